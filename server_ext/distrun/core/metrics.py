"""Numbers that training code prints, picked out of log lines: the port of the log viewer's
`parseMetrics` (labextension/src/logviewer/metrics.ts), so the server reads a sweep's objective
exactly as the chart shows it. Both parsers pass the cases of
labextension/src/logviewer/__tests__/metric_lines.json; change them together.

The rules (metrics.ts says more), applied to the text as a terminal shows it:
- A metric is a key and a number. The key is an identifier (`/` or `.` may join identifier
  parts: `train/loss`), not preceded by a letter, digit, `_`, `.`, `/` or `-`, maybe quoted.
- Between key and number: `=`, or `:` and at least one space, or, for the words of
  `_SPACED_KEY` only, spaces (`step 120`, `loss 0.31`).
- The number may sit in `[...]` or `tensor(...)` or be followed by `%`, and must end there: the
  end, a space, `%`, one of `])},;|'"`, or a `.`, `:` or `-` before a space or the end. Else it is
  part of an address, a version, a time, a file name or a date, and the key is skipped.
- Keys are compared in lower case; ALL-CAPS env-style keys and `IGNORED_KEYS` are not metrics.
- `STEP_KEYS` give the line's step; `N/M` counts only after a step key or `epoch`.
"""

import math
import re
from dataclasses import dataclass, field

from distrun.core.terminal import plain_text

STEP_KEYS = frozenset({"step", "global_step", "iter", "iteration"})
_PROGRESS_KEYS = STEP_KEYS | {"epoch"}
IGNORED_KEYS = frozenset(
    {
        "rank",
        "local_rank",
        "global_rank",
        "node_rank",
        "world_size",
        "local_world_size",
        "pid",
        "port",
        "seed",
        "v_num",
        "version",
        "line",
    }
)
# Lines longer than this, in UTF-16 code units as JavaScript counts, are parsed on their start.
MAX_PARSED_CHARS = 4096

_SPACED_KEY = re.compile(
    r"step|global_step|iter|iteration|epoch|loss|[a-z0-9_]*_loss|lr|learning_rate|acc|accuracy"
    r"|[a-z0-9_]*_acc(?:uracy)?|ppl|perplexity|grad_norm"
)
# JavaScript's \s, spelled out: Python's differs (it has \x1c-\x1f and \x85, lacks \ufeff).
_WS = "\t\n\x0b\x0c\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_KEY = r"[A-Za-z_][A-Za-z0-9_]*(?:[/.][A-Za-z_][A-Za-z0-9_]*)*"
_NUMBER = r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
# Groups: 1 key, 2 separator, 3 number, 4 total.
_METRIC = re.compile(
    rf"(?<![A-Za-z0-9_./-])['\"]?({_KEY})['\"]?"
    rf"([{_WS}]*=[{_WS}]*|:[{_WS}]+|[{_WS}]+)"
    r"(?:tensor\(|\[)?"
    rf"({_NUMBER})(?:[{_WS}]*/[{_WS}]*([0-9]+))?"
)
_CLEAN_END = re.compile(rf"\Z|%|[\])}},;|'\"{_WS}]|[.:-](?![^{_WS}])")
_KEY_ONLY = re.compile(_KEY)
_ALL_CAPS = re.compile(r"[A-Z][A-Z0-9_]+")


@dataclass(frozen=True)
class ParsedLine:
    step: int | float | None  # the training step the line reports, when it names one
    metrics: list[tuple[str, float]] = field(default_factory=list)  # in order, names lower case


def parse_line(text: str) -> ParsedLine:
    """The step and the metrics of one line of output, read from what a terminal shows of it."""
    return parse_metrics(plain_text(text))


def parse_metrics(text: str) -> ParsedLine:
    """The step and the metrics of text already plain (no escape codes, no carriage returns)."""
    text = _parsed_part(text)
    step: int | float | None = None
    metrics: list[tuple[str, float]] = []
    position = 0
    while (match := _METRIC.search(text, position)) is not None:
        raw_key, separator, number, total = match.groups()
        if not _accept(raw_key, separator, total, _CLEAN_END.match(text, match.end())):
            # The next key may begin inside this match: resume just after the key.
            position = match.end(1)
            continue
        position = match.end()
        key, value = raw_key.lower(), float(number)
        if not math.isfinite(value):
            continue
        if key not in STEP_KEYS:
            metrics.append((key, value))
        elif step is None:
            step = int(value) if value.is_integer() else value
    return ParsedLine(step, metrics)


def is_metric_name(name: str) -> bool:
    """Whether `name`, written `name=0.5`, is a metric the parser reports (not a step)."""
    return (
        _KEY_ONLY.fullmatch(name) is not None
        and name.lower() not in STEP_KEYS
        and _accept(name, "=", None, True)
    )


def _accept(raw_key: str, separator: str, total: str | None, clean_end: object) -> bool:
    key = raw_key.lower()
    if key in IGNORED_KEYS:
        return False
    spaced_key = _SPACED_KEY.fullmatch(key) is not None
    if _ALL_CAPS.fullmatch(raw_key) and not spaced_key:
        return False
    if "=" not in separator and ":" not in separator and not spaced_key:
        return False
    if total is not None and key not in _PROGRESS_KEYS:
        return False  # `Accuracy: 9890/10000` is a count, not a rate
    return bool(clean_end)


def _parsed_part(text: str) -> str:
    if len(text) * 2 <= MAX_PARSED_CHARS:  # short enough even if every character were two units
        return text
    units = text.encode("utf-16-le", "surrogatepass")
    if len(units) <= 2 * MAX_PARSED_CHARS:
        return text
    return units[: 2 * MAX_PARSED_CHARS].decode("utf-16-le", "surrogatepass")
