"""Property tests of the cell-header parser: it never crashes, it round-trips, it keeps the body."""

import re
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from distrun.core.errors import LimitExceeded, SpecError
from distrun.core.frameworks import FRAMEWORKS
from distrun.core.header import needs_ipython, parse_cell, render_header, spec_from_cell
from distrun.core.quantities import QUANTITY_RE, QuantityError, check_cpu, check_memory
from distrun.core.spec import (
    CLEAN_POD_POLICIES,
    ENGINE_NAME_RE,
    ENV_NAME_RE,
    IMAGE_RE,
    JOB_NAME_RE,
    NAMESPACE_RE,
    RESTART_POLICIES,
)

FAST = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])

# Pieces of headers, good and bad, so generated cells reach deep into the parser.
KEYS = st.sampled_from(
    [
        "framework",
        "worker",
        "workers",
        "wokers",
        "master",
        "ps",
        "chief",
        "evaluator",
        "launcher",
        "cpu",
        "memory",
        "gpu",
        "image",
        "name",
        "engine",
        "namespace",
        "env",
        "files",
        "restartPolicy",
        "restart_policy",
        "backoffLimit",
        "deadline",
        "cleanPolicy",
        "ttl",
        "queue",
        "priorityClass",
        "worker.cpu",
        "ps.memory",
        "master.gpu",
        "worker.disk",
        "x.y.z",
        "config",
        "sweep.lr",
        "sweep.LR",
        "sweep",
        "sweep.a-b",
        "search",
        "trials",
        "trails",
        "parallel",
        "objective",
        "earlyStop",
        "early_stop",
        "seed",
    ]
)
VALUES = st.sampled_from(
    [
        "pytorch",
        "tensorflow",
        "jax",
        "mpi",
        "generic",
        "xgboost",
        "paddle",
        "pytorh",
        "0",
        "1",
        "2",
        "3",
        "-1",
        "two",
        "1.5",
        "99999999",
        "2Gi",
        "lots",
        "500m",
        "all",
        "none",
        "OnFailure",
        "my-job",
        "Bad_Name",
        "python:3.11",
        "A=1",
        "A= b ",
        "1X=2",
        "a.py,b.py",
        "../x",
        "a.py,,b",
        "10m",
        "2;%cpu=1",
        "2;%memory=x",
        "2;%image=y",
        "",
        "=",
        "²",
        "1e3",
        "uniform(0,1)",
        "loguniform(0,1)",
        "int(1,3)",
        "choice(a,b)",
        "normal(0,1)",
        "uniform(1",
        "0.1,0.01",
        "1e999",
        "random",
        "grid",
        "loss:min",
        "acc:max:best",
        "step:min",
        "median:3",
        "median:3:0",
    ]
)
FLAGS = st.sampled_from(
    [
        "--framework",
        "--workers",
        "--worker",
        "--masters",
        "--ps",
        "--gpus",
        "--cpu",
        "--memory",
        "--env",
        "--files",
        "--name",
        "--image",
        "--deadline",
        "--clean-pod-policy",
        "--role-resources",
        "--wokers",
        "--restart-policy",
        "-x",
        "--",
        "--sweep",
        "--search",
        "--trials",
        "--parallel",
        "--objective",
        "--early-stop",
        "--seed",
    ]
)
NOISE = st.text(max_size=4)
SPACE = st.sampled_from(["", " ", "\t"])
SETTING_LINE = st.tuples(
    SPACE, st.just("%"), KEYS | NOISE, SPACE, st.sampled_from(["=", ""]), SPACE, VALUES | NOISE
).map("".join)
FLAG_VALUE = (
    VALUES
    | NOISE
    | st.sampled_from(["'pytorch", "'a b'", '"x"', "worker:cpu=2,gpu=1", "lr=int(1,4)"])
)
MAGIC_LINE = st.lists(st.tuples(FLAGS, FLAG_VALUE).map(" ".join), max_size=5).map(
    lambda flags: " ".join(["%%distrun", *flags])
)
OTHER_LINE = st.sampled_from(
    ["", "  ", "\r", "# a comment", "print(1)", "%matplotlib inline", "!ls", "%env X=1"]
) | st.text(max_size=10)
HEADERISH_CELL = st.lists(
    st.one_of(SETTING_LINE, SETTING_LINE, SETTING_LINE, MAGIC_LINE, OTHER_LINE), max_size=10
).map("\n".join)
ANY_CELL = HEADERISH_CELL | st.text() | HEADERISH_CELL.map(lambda cell: cell + "\n\ud800")

HEADER_SYNTAX = re.compile(
    r"[ \t]*%%distrun([ \t].*)?|[ \t]*%[A-Za-z][A-Za-z0-9_.-]*[ \t]*=.*", re.DOTALL
)


def _is_header_line(line: str) -> bool:
    return HEADER_SYNTAX.fullmatch(line.removesuffix("\r")) is not None


def _is_blank_or_comment(line: str) -> bool:
    stripped = line.removesuffix("\r").strip(" \t")
    return not stripped or stripped.startswith("#")


@FAST
@given(cell=ANY_CELL)
def test_parse_cell_on_any_text_raises_only_a_spec_error_naming_a_line_of_the_cell(cell):
    try:
        parse_cell(cell)
    except SpecError as err:
        assert err.line is not None and 1 <= err.line <= cell.count("\n") + 1
        assert str(err).startswith(f"line {err.line}: ")


@FAST
@given(cell=ANY_CELL, framework=st.sampled_from([None, "generic", "tf", 3]))
def test_spec_from_cell_on_any_text_raises_only_spec_errors_or_limits(cell, framework):
    overrides = {} if framework is None else {"framework": framework}
    try:
        spec_from_cell(cell, overrides)
    except (SpecError, LimitExceeded):
        pass


@FAST
@given(cell=ANY_CELL)
def test_parsing_blanks_only_a_leading_block_of_header_lines(cell):
    try:
        parsed = parse_cell(cell)
    except SpecError:
        return
    before, after = cell.split("\n"), parsed.code.split("\n")
    assert len(after) == len(before)
    changed = [i for i, (old, new) in enumerate(zip(before, after, strict=True)) if old != new]
    assert all(after[i] == "" and _is_header_line(before[i]) for i in changed)
    assert parsed.has_header == bool(changed)
    if changed:
        # Everything up to the last blanked line is header: settings, blanks or comments.
        assert all(i in changed or _is_blank_or_comment(before[i]) for i in range(changed[-1] + 1))
    else:
        assert parsed.code == cell


@FAST
@given(code=ANY_CELL)
def test_needs_ipython_answers_for_any_text(code):
    assert needs_ipython(code) in (True, False)


# ---------------------------------------------------------------------------------------------
# Round trip: valid fields -> render_header -> parse_cell gives the same fields back


def _matching(pattern: re.Pattern[str]) -> st.SearchStrategy[str]:
    return st.from_regex(pattern, fullmatch=True)


ENV_VALUE = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\n\r\x00"), max_size=20
)


def _quantities(check: Any) -> st.SearchStrategy[str]:
    def valid(text: str) -> bool:
        try:
            return bool(check(text))
        except QuantityError:
            return False

    return _matching(QUANTITY_RE).filter(valid)


PATH_PART = _matching(re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,10}"))
PATH = st.lists(PATH_PART, min_size=1, max_size=3).map("/".join)
SCALARS: dict[str, st.SearchStrategy[Any]] = {
    "name": _matching(JOB_NAME_RE),
    "engine": _matching(ENGINE_NAME_RE),
    "namespace": _matching(NAMESPACE_RE),
    "image": _matching(IMAGE_RE),
    "restart_policy": st.sampled_from(RESTART_POLICIES),
    "backoff_limit": st.integers(0, 999_999),
    "active_deadline_seconds": st.integers(0, 999_999_999),
    "clean_pod_policy": st.sampled_from(CLEAN_POD_POLICIES),
    "ttl_seconds_after_finished": st.integers(0, 999_999_999),
    "queue": _matching(NAMESPACE_RE),
    "priority_class": _matching(NAMESPACE_RE),
}
RESOURCES = st.fixed_dictionaries(
    {},
    optional={
        "cpu": _quantities(check_cpu),
        "memory": _quantities(check_memory),
        "gpu": st.integers(0, 999_999),
    },
)


@st.composite
def header_fields(draw: st.DrawFn) -> dict[str, Any]:
    framework = draw(st.sampled_from(list(FRAMEWORKS)))
    fields: dict[str, Any] = {"framework": framework}
    role_names = draw(st.lists(st.sampled_from(FRAMEWORKS[framework].role_names), unique=True))
    if role_names:
        fields["roles"] = {}
        for role in role_names:
            spec = {"replicas": draw(st.integers(0, 999_999))}
            resources = draw(RESOURCES)
            fields["roles"][role] = {**spec, **({"resources": resources} if resources else {})}
    fields.update(draw(st.fixed_dictionaries({}, optional=SCALARS)))
    env = draw(st.dictionaries(_matching(ENV_NAME_RE), ENV_VALUE, max_size=4))
    if env:
        fields["env"] = env
    return fields


@FAST
@given(fields=header_fields(), files=st.lists(PATH, unique=True, max_size=4))
# Whitespace other than spaces and tabs is part of a value, also at its ends.
@example(fields={"framework": "generic", "env": {"A": "\x0bx\u2028", "B": "\x1c"}}, files=[])
def test_a_rendered_header_parses_back_to_the_same_fields(fields, files):
    parsed = parse_cell(render_header(fields, files) + "train()\n")
    assert parsed.spec_fields == fields
    assert parsed.file_refs == files
    assert parsed.has_header


@FAST
@given(fields=header_fields(), body=st.text())
def test_the_body_after_a_header_is_kept_exactly(fields, body):
    header = render_header(fields)
    body = "run()\n" + body  # a code line ends the header, whatever follows
    parsed = parse_cell(header + body)
    assert parsed.code == "\n" * header.count("\n") + body


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
OVERRIDE_KEYS = st.sampled_from(["framework", "roles", "name", "env", "files", "backoff_limit"])
ROLE_OVERRIDES = st.dictionaries(
    st.sampled_from(["worker", "master", "ps"]),
    JSON | st.fixed_dictionaries({}, optional={"replicas": JSON, "resources": JSON}),
)


@FAST
@given(
    overrides=st.dictionaries(OVERRIDE_KEYS, JSON)
    | st.fixed_dictionaries({"roles": ROLE_OVERRIDES})
)
def test_spec_from_cell_with_any_json_overrides_raises_only_spec_errors_or_limits(overrides):
    try:
        spec_from_cell("%framework=pytorch\n%worker=2;%cpu=1\n%env=A=1\nx", overrides)
    except (SpecError, LimitExceeded):
        pass
