"""core.metrics reads log lines exactly as the log viewer's metrics.ts does: both run the shared
cases of metric_lines.json."""

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from distrun.core.metrics import (
    IGNORED_KEYS,
    MAX_PARSED_CHARS,
    STEP_KEYS,
    ParsedLine,
    is_metric_name,
    parse_line,
)

CASES_PATH = Path(__file__).parents[2] / "labextension/src/logviewer/__tests__/metric_lines.json"
CASES = json.loads(CASES_PATH.read_text(encoding="utf-8"))


def test_the_shared_cases_cover_every_rule() -> None:
    assert len(CASES) >= 40
    assert len({case["why"] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case["why"] for case in CASES])
def test_a_shared_case(case: dict) -> None:
    parsed = parse_line(case["line"])
    assert parsed == ParsedLine(case["step"], [tuple(pair) for pair in case["metrics"]])


def test_a_whole_step_is_an_int() -> None:
    assert parse_line("step 120 loss=1").step == 120
    assert isinstance(parse_line("step 120 loss=1").step, int)
    assert isinstance(parse_line("loss=1").metrics[0][1], float)


def test_only_the_start_of_a_very_long_line_is_read() -> None:
    assert parse_line("loss=0.5 " + "x" * 100_000 + " acc=0.9").metrics == [("loss", 0.5)]


def test_the_start_is_counted_in_utf16_units_as_javascript_does() -> None:
    # 2,100 astral characters are 4,200 units: a metric after them is past the 4,096 read.
    assert parse_line("\U0001f600" * 2100 + " loss=1").metrics == []
    assert parse_line("\u00e9" * (MAX_PARSED_CHARS - 8) + " loss=1").metrics == [("loss", 1.0)]


@given(st.text(max_size=200))
def test_any_text_parses_to_finite_lower_case_metrics(text: str) -> None:
    parsed = parse_line(text)
    for name, value in parsed.metrics:
        assert name == name.lower() and name not in STEP_KEYS and name not in IGNORED_KEYS
        assert math.isfinite(value)


@pytest.mark.parametrize(
    ("name", "is_metric"),
    [
        ("loss", True),
        ("val_acc", True),
        ("train/loss", True),
        ("Loss", True),
        ("LOSS", True),
        ("epoch", True),
        ("step", False),
        ("global_step", False),
        ("rank", False),
        ("seed", False),
        ("BATCH_SIZE", False),
        ("2loss", False),
        ("loss-val", False),
        ("", False),
    ],
)
def test_is_metric_name(name: str, is_metric: bool) -> None:
    assert is_metric_name(name) is is_metric
