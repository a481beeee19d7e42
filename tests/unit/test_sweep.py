"""core.sweep: a sweep's trials stay inside their declared spaces, a grid is exactly its product,
the same spec always gives the same trials, a sweep survives JSON and its header, and every bad
declaration gets one error naming its line."""

import itertools
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distrun.core.errors import SpecError
from distrun.core.header import parse_cell, render_header, spec_from_cell
from distrun.core.sweep import (
    MAX_TRIALS,
    Choice,
    EarlyStop,
    IntRange,
    LogUniform,
    Objective,
    Param,
    Space,
    SweepSpec,
    Uniform,
    Value,
    Values,
    check,
    expand,
    from_dict,
    median_stop,
    objective_value,
    to_dict,
)

FAST = settings(deadline=None, max_examples=200, suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------------------------
# Strategies

NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
WORDS = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.:/+-]{0,8}", fullmatch=True)
INTS = st.integers(-(10**12), 10**12)
FLOATS = st.floats(allow_nan=False, allow_infinity=False)
VALUES = st.one_of(INTS, FLOATS, WORDS)


def _distinct(values: list[Value]) -> tuple[Value, ...]:
    kept: list[Value] = []
    for value in values:
        if value not in kept:
            kept.append(value)
    return tuple(kept)


LISTS = st.lists(VALUES, min_size=1, max_size=4).map(_distinct)
BOUNDS = (
    st.lists(FLOATS, min_size=2, max_size=2, unique=True).map(sorted).filter(lambda b: b[0] < b[1])
)
POSITIVE_BOUNDS = st.lists(
    st.floats(min_value=5e-324, allow_infinity=False), min_size=2, max_size=2, unique=True
).map(sorted)
INT_BOUNDS = st.lists(INTS, min_size=2, max_size=2, unique=True).map(sorted)
SPACES: st.SearchStrategy[Space] = st.one_of(
    LISTS.map(Values),
    LISTS.map(Choice),
    BOUNDS.map(lambda b: Uniform(*b)),
    POSITIVE_BOUNDS.map(lambda b: LogUniform(*b)),
    INT_BOUNDS.map(lambda b: IntRange(*b)),
)
OBJECTIVES = st.builds(
    Objective,
    st.sampled_from(["loss", "val_loss", "accuracy", "train/loss", "eval.f1"]),
    st.sampled_from(["min", "max"]),
    st.sampled_from(["last", "best"]),
)
STOPS = st.builds(EarlyStop, st.just("median"), st.integers(0, 10**6), st.integers(1, MAX_TRIALS))


def _params(spaces: st.SearchStrategy[Space], max_size: int) -> st.SearchStrategy[tuple[Param]]:
    return st.lists(
        st.tuples(NAMES, spaces), min_size=1, max_size=max_size, unique_by=lambda p: p[0].upper()
    ).map(lambda pairs: tuple(Param(name, space) for name, space in pairs))


@st.composite
def random_sweeps(draw: st.DrawFn) -> SweepSpec:
    objective = draw(st.none() | OBJECTIVES)
    return SweepSpec(
        draw(_params(SPACES, 5)),
        search="random",
        trials=draw(st.integers(1, 40)),
        parallel=draw(st.integers(1, MAX_TRIALS)),
        objective=objective,
        early_stop=None if objective is None else draw(st.none() | STOPS),
        seed=draw(st.none() | st.integers(0, 2**63 - 1)),
    )


GRIDS = _params(LISTS.map(Values), 4).map(lambda params: SweepSpec(params, search="grid"))
SWEEPS = st.one_of(random_sweeps(), GRIDS)


def _inside(value: Value, space: Space) -> bool:
    if isinstance(space, Values | Choice):
        return any(value == v and type(value) is type(v) for v in space.values)
    if isinstance(space, IntRange):
        return type(value) is int and space.low <= value <= space.high
    return type(value) is float and space.low <= value <= space.high


# ---------------------------------------------------------------------------------------------
# Properties


@FAST
@given(random_sweeps())
def test_every_trial_of_a_random_search_is_inside_its_spaces(spec: SweepSpec) -> None:
    check(spec)
    trials = expand(spec)
    assert len(trials) == spec.trials
    for trial in trials:
        assert list(trial) == [p.name for p in spec.params]
        for param in spec.params:
            assert _inside(trial[param.name], param.space), (param, trial[param.name])


@FAST
@given(GRIDS)
def test_a_grid_is_exactly_the_product_in_declared_order(spec: SweepSpec) -> None:
    check(spec)
    lists = [p.space.values for p in spec.params if isinstance(p.space, Values)]
    names = [p.name for p in spec.params]
    product = [dict(zip(names, point, strict=True)) for point in itertools.product(*lists)]
    assert expand(spec) == product
    assert [list(t.values()) for t in expand(spec)] == [list(p) for p in itertools.product(*lists)]


@FAST
@given(SWEEPS)
def test_equal_specs_give_the_same_trials_and_json_keeps_the_spec(spec: SweepSpec) -> None:
    again = from_dict(json.loads(json.dumps(to_dict(spec))))
    assert again == spec
    assert expand(again) == expand(spec)


@FAST
@given(SWEEPS)
def test_a_rendered_sweep_parses_back(spec: SweepSpec) -> None:
    header = render_header({"framework": "pytorch", "roles": {"worker": {"replicas": 2}}}, (), spec)
    parsed = parse_cell(header + "print(1)\n")
    assert parsed.sweep == spec
    assert expand(parsed.sweep) == expand(spec)


def test_a_different_seed_draws_differently_and_the_derived_seed_is_stable() -> None:
    spec = SweepSpec((Param("lr", Uniform(0.0, 1.0)),), search="random", trials=5)
    assert expand(spec) == expand(SweepSpec(spec.params, search="random", trials=5))
    assert expand(spec) != expand(SweepSpec(spec.params, search="random", trials=5, seed=1))
    # The derived seed is part of the contract: the same header draws these values everywhere.
    spec = SweepSpec((Param("n", IntRange(1, 100)),), search="random", trials=3)
    assert expand(spec) == [{"n": 75}, {"n": 10}, {"n": 71}]


def test_a_uniform_near_the_largest_floats_stays_inside() -> None:
    spec = SweepSpec((Param("x", Uniform(-1.7e308, 1.7e308)),), search="random", trials=50)
    values = [float(t["x"]) for t in expand(spec)]
    assert all(math.isfinite(x) and abs(x) <= 1.7e308 for x in values)


# ---------------------------------------------------------------------------------------------
# The header


SWEEP_CELL = """%framework=pytorch
%worker=2
%sweep.lr=loguniform(1e-4,1e-1)
%sweep.batch=32,64,128
%sweep.opt=choice(adam,sgd)
%search=random
%trials=6
%parallel=3
%objective=accuracy:max:best
%earlyStop=median:3
print(1)
"""


def test_a_ciao_header_declares_a_sweep() -> None:
    parsed = parse_cell(SWEEP_CELL)
    assert parsed.sweep == SweepSpec(
        (
            Param("lr", LogUniform(1e-4, 1e-1)),
            Param("batch", Values((32, 64, 128))),
            Param("opt", Choice(("adam", "sgd"))),
        ),
        search="random",
        trials=6,
        parallel=3,
        objective=Objective("accuracy", "max", "best"),
        early_stop=EarlyStop("median", 3),
    )
    assert parsed.code == "\n" * 10 + "print(1)\n"
    spec, _ = spec_from_cell(SWEEP_CELL)  # the sweep stays out of the job's spec
    assert spec.roles["worker"].replicas == 2


def test_distrun_flags_declare_the_same_sweep() -> None:
    flags = parse_cell(
        "%%distrun --framework pytorch --workers 2 --sweep lr=loguniform(1e-4,1e-1) "
        "--sweep batch=32,64,128 --sweep 'opt=choice(adam, sgd)' --search random --trials 6 "
        "--parallel 3 --objective accuracy:max:best --early-stop median:3\nprint(1)\n"
    )
    assert flags.sweep == parse_cell(SWEEP_CELL).sweep


def test_the_search_is_random_when_a_distribution_is_given_else_a_grid() -> None:
    random = parse_cell("%framework=pytorch\n%sweep.lr=uniform(0,1)\n%trials=2\n").sweep
    grid = parse_cell("%framework=pytorch\n%sweep.lr=0.1,0.01\n%sweep.n=1,2\n").sweep
    assert random is not None and random.search == "random"
    assert grid is not None and grid.search == "grid"
    assert expand(grid) == [
        {"lr": 0.1, "n": 1},
        {"lr": 0.1, "n": 2},
        {"lr": 0.01, "n": 1},
        {"lr": 0.01, "n": 2},
    ]


def test_a_list_is_a_choice_in_a_random_search() -> None:
    spec = parse_cell("%framework=pytorch\n%sweep.b=32,64\n%search=random\n%trials=20\n").sweep
    assert spec is not None
    assert {t["b"] for t in expand(spec)} == {32, 64}


def test_a_cell_without_sweep_lines_has_no_sweep() -> None:
    assert parse_cell("%framework=pytorch\nprint(1)\n").sweep is None
    assert parse_cell("print(1)\n").sweep is None


def test_render_writes_the_sweep_after_the_job() -> None:
    sweep = parse_cell(SWEEP_CELL).sweep
    text = render_header({"framework": "pytorch"}, (), sweep)
    assert text == (
        "%framework=pytorch\n"
        "%sweep.lr=loguniform(0.0001,0.1)\n"
        "%sweep.batch=32,64,128\n"
        "%sweep.opt=choice(adam,sgd)\n"
        "%search=random\n"
        "%trials=6\n"
        "%parallel=3\n"
        "%objective=accuracy:max:best\n"
        "%earlyStop=median:3\n"
    )


def test_render_refuses_a_sweep_that_would_not_parse() -> None:
    bad = SweepSpec((Param("lr", Uniform(1.0, 0.1)),), search="random", trials=2)
    with pytest.raises(SpecError, match="bounds reversed"):
        render_header({"framework": "pytorch"}, (), bad)


HEAD = "%framework=pytorch\n"


@pytest.mark.parametrize(
    ("cell", "message"),
    [
        (
            HEAD + "%worker=1\n%sweep.lr=uniform(0.1,1)\n%search=grid\n",
            (
                "line 3: 'lr' is uniform(0.1,1.0); a grid needs a list of values, e.g. "
                "%sweep.lr=0.1,1.0 (or %search=random to draw at random)"
            ),
        ),
        (
            "%%distrun --framework pytorch --sweep lr=uniform(0.1,1) --search grid\n",
            (
                "line 1: 'lr' is uniform(0.1,1.0); a grid needs a list of values, e.g. "
                "--sweep lr=0.1,1.0 (or --search random to draw at random)"
            ),
        ),
        (
            HEAD + "%sweep.opt=choice(adam,sgd)\n%search=grid\n",
            (
                "line 2: 'opt' is choice(adam,sgd); a grid needs a list of values, e.g. "
                "%sweep.opt=adam,sgd"
            ),
        ),
        (
            HEAD + "%trials=5\n",
            "line 2: sweep settings need a swept parameter; add one, like %sweep.lr=0.1,0.01",
        ),
        (
            HEAD + "%sweep.lr=normal(0,1)\n",
            (
                "line 2: 'lr': unknown distribution 'normal'; did you mean uniform(...)? the "
                "distributions are uniform(a,b), loguniform(a,b), int(a,b), choice(x,y,...), or "
                "list the values: %sweep.lr=0.1,0.01"
            ),
        ),
        (
            HEAD + "%sweep.lr=uniform(1,0.1)\n%trials=3\n",
            (
                "line 2: 'lr' is uniform(1.0,0.1), its bounds reversed; write the smaller first: "
                "%sweep.lr=uniform(0.1,1.0)"
            ),
        ),
        (
            HEAD + "%sweep.n=int(3,3)\n%trials=3\n",
            "line 2: 'n' is int(3,3), its bounds equal; for one value write %sweep.n=3",
        ),
        (
            HEAD + "%sweep.lr=uniform(a,1)\n%trials=3\n",
            "line 2: 'lr': uniform(a,b) takes two numbers; write %sweep.lr=uniform(0.1,0.9)",
        ),
        (
            HEAD + "%sweep.lr=uniform(1)\n%trials=3\n",
            "line 2: 'lr': uniform(...) takes two bounds; write %sweep.lr=uniform(0.1,0.9)",
        ),
        (
            HEAD + "%sweep.n=int(1.5,3)\n%trials=3\n",
            "line 2: 'n': int(a,b) takes whole numbers; write %sweep.n=int(1,8)",
        ),
        (
            HEAD + "%sweep.lr=loguniform(0,1)\n%trials=3\n",
            (
                "line 2: 'lr' is loguniform(0.0,1.0); loguniform needs bounds above 0, like "
                "%sweep.lr=loguniform(0.0001,0.1)"
            ),
        ),
        (HEAD + "%sweep.lr=\n", "line 2: 'lr' has no values; list them, like %sweep.lr=0.1,0.01"),
        (
            HEAD + "%sweep.opt=choice()\n%trials=2\n",
            "line 2: 'opt' has no values; list them, like %sweep.opt=0.1,0.01",
        ),
        (HEAD + "%sweep.lr=1,,2\n", "line 2: 'lr' has an empty value; list numbers or words"),
        (HEAD + "%sweep.x=3x\n", "line 2: 'x' has '3x', neither a number nor a word"),
        (HEAD + "%sweep.x=1e999\n", "line 2: 'x': 1e999 is too large a number"),
        (HEAD + "%sweep.lr=1,1.0\n", "line 2: 'lr' lists 1.0 twice"),
        (
            HEAD + "%sweep.lr=0.1,0.2\n%trials=3\n",
            (
                "line 3: a grid runs every combination (2 trials), so it takes no trials setting; "
                "remove it, or add %search=random to draw 3 at random"
            ),
        ),
        (
            HEAD + "%sweep.lr=uniform(0,1)\n",
            "line 2: a random search needs its number of trials; add %trials=10",
        ),
        (
            HEAD + "%sweep.lr=uniform(0,1)\n%trials=1001\n",
            "line 3: trials 1001 is not a number of trials from 1 to 1000",
        ),
        (HEAD + "%sweep.lr=uniform(0,1)\n%trials=many\n", "line 3: trials 'many' is not a whole"),
        (
            (
                f"{HEAD}%sweep.a={','.join(map(str, range(40)))}\n"
                f"%sweep.b={','.join(map(str, range(30)))}\n"
            ),
            "line 3: the grid has 1,200 trials, over the limit of 1000",
        ),
        (
            HEAD + "%sweep.lr=0.1\n%parallel=0\n",
            "line 3: parallel 0 is not a number of trials at once from 1 to 1000",
        ),
        (
            HEAD + "%sweep.lr=0.1\n%search=hyperopt\n",
            "line 3: search 'hyperopt' is not one of grid",
        ),
        (
            HEAD + "%sweep.lr=0.1\n%objective=loss\n",
            "line 3: objective 'loss' is not metric:goal[:read]; write %objective=loss:min",
        ),
        (
            HEAD + "%sweep.lr=0.1\n%objective=step:min\n",
            "line 3: objective 'step' is the step, not a metric",
        ),
        (
            HEAD + "%sweep.lr=0.1\n%objective=world_size:max\n",
            "line 3: objective 'world_size' is a number the metric reader ignores",
        ),
        (
            HEAD + "%sweep.lr=0.1\n%objective=val-loss:min\n",
            "line 3: objective 'val-loss' is not a metric name",
        ),
        (
            HEAD + "%sweep.lr=0.1\n%objective=2nd_loss:min\n",
            "line 3: objective '2nd_loss' is not a metric name",
        ),
        (
            HEAD + "%sweep.lr=0.1\n%objective=loss:minimize\n",
            "line 3: objective goal 'minimize' is neither min nor max",
        ),
        (
            HEAD + "%sweep.lr=0.1\n%objective=loss:min:worst\n",
            "line 3: objective read 'worst' is neither last",
        ),
        (
            HEAD + "%sweep.lr=0.1\n%earlyStop=median:3\n",
            "line 3: early stopping compares trials by their objective; add %objective=loss:min",
        ),
        (
            HEAD + "%sweep.lr=0.1\n%objective=loss:min\n%earlyStop=mean:3\n",
            "line 4: early stop 'mean:3' is neither median:N",
        ),
        (
            HEAD + "%sweep.lr=0.1\n%objective=loss:min\n%earlyStop=median:x\n",
            "line 4: early stop 'median:x': the steps",
        ),
        (
            HEAD + "%sweep.lr=0.1\n%objective=loss:min\n%earlyStop=median:3:0\n",
            "line 4: early stop needs from 1 to 1000 trials to compare with, not 0",
        ),
        (HEAD + "%sweep.lr=0.1\n%seed=-1\n", "line 3: seed '-1' is not a whole number"),
        (
            HEAD + "%sweep.lr=0.1\n%sweep.LR=0.2\n",
            "line 3: parameters 'lr' and 'LR' differ only in case",
        ),
        (
            HEAD + "%sweep.lr=0.1\n%sweep.lr=0.2\n",
            "line 3: sweep.lr is already set on line 2; keep only one of them",
        ),
        (HEAD + "%sweep=0.1\n", "line 2: name the swept parameter, like %sweep.lr=0.1,0.01"),
        (
            HEAD + "%sweep.learning-rate=0.1\n",
            "line 2: sweep parameter 'learning-rate' is not a name of letters, digits and _",
        ),
        (HEAD + "%trails=3\n", "line 2: unknown setting 'trails'; did you mean 'trials'?"),
        (
            "%%distrun --framework pytorch --sweep lr\n",
            "line 1: --sweep 'lr' is not name=values; write --sweep lr=0.1,0.01",
        ),
        (
            "%%distrun --framework pytorch --sweep lr=uniform(0,1)\n",
            "line 1: a random search needs its number of trials; add --trials 10",
        ),
    ],
)
def test_a_bad_sweep_gets_one_error_naming_its_line(cell: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_cell(cell)
    assert str(caught.value).startswith(message)
    assert caught.value.line is not None


# ---------------------------------------------------------------------------------------------
# JSON


def test_json_is_the_header_in_objects() -> None:
    spec = parse_cell(SWEEP_CELL).sweep
    assert spec is not None
    assert to_dict(spec) == {
        "params": {
            "lr": {"loguniform": [0.0001, 0.1]},
            "batch": {"values": [32, 64, 128]},
            "opt": {"choice": ["adam", "sgd"]},
        },
        "search": "random",
        "trials": 6,
        "parallel": 3,
        "objective": {"metric": "accuracy", "goal": "max", "read": "best"},
        "early_stop": {"rule": "median", "after": 3, "min_trials": 3},
        "seed": None,
    }


def test_from_dict_fills_defaults() -> None:
    spec = from_dict({"params": {"lr": {"uniform": [0, 1]}}, "trials": 2})
    assert spec == SweepSpec((Param("lr", Uniform(0.0, 1.0)),), search="random", trials=2)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "a sweep must be an object"),
        ({"params": {}}, "sweep settings need a swept parameter"),
        ({"params": {"lr": {"normal": [0, 1]}}}, "sweep param 'lr' must be one of"),
        ({"params": {"lr": {"uniform": 1}}}, "sweep param 'lr': uniform takes a list"),
        ({"params": {"lr": {"values": [True]}}}, "'lr': True is neither a finite number"),
        ({"params": {"lr": {"values": ["a b"]}}}, "'lr': 'a b' is neither a finite number"),
        ({"params": {"lr": {"int": [1.5, 2]}}, "trials": 1}, "'lr': the bounds of int are"),
        ({"params": {"lr": {"values": [1]}}, "trials": "2"}, "a grid runs every combination"),
        ({"params": {"lr": {"values": [1]}}, "colour": 1}, "unknown sweep field 'colour'"),
        ({"params": {"lr": {"values": [1]}}, "objective": {"metric": "loss"}}, "objective must"),
        ({"params": {"lr": {"values": [1]}}, "seed": 2**63}, "seed 9223372036854775808 is not"),
        ({"params": {"lr": {"values": [1]}}, "parallel": True}, "parallel True is not"),
    ],
)
def test_from_dict_refuses(data: Any, message: str) -> None:
    with pytest.raises(SpecError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        from_dict(data)


# ---------------------------------------------------------------------------------------------
# Judging trials


def test_objective_value_reads_the_last_or_the_best() -> None:
    history = [(1, 0.5), (2, 0.2), (3, 0.4)]
    assert objective_value(history, "min", "last") == 0.4
    assert objective_value(history, "min", "best") == 0.2
    assert objective_value(history, "max", "best") == 0.5
    assert objective_value([], "min", "last") is None


LOSSES = {
    "a": [(1, 1.0), (2, 0.5), (3, 0.3)],
    "b": [(1, 1.0), (2, 0.6), (3, 0.4)],
    "c": [(1, 1.0), (2, 0.7), (3, 0.5)],
    "d": [(1, 1.2), (2, 0.9), (3, 0.8)],
}


def test_median_stop_stops_a_trial_worse_than_the_median_of_the_others() -> None:
    assert median_stop("min", LOSSES, "d", after=3)  # 0.8 > median(0.3, 0.4, 0.5)
    assert not median_stop("min", LOSSES, "a", after=3)
    assert not median_stop("min", LOSSES, "b", after=3)  # 0.4 is not above median(0.3,0.5,0.8)


def test_median_stop_waits_for_the_step_and_for_enough_trials() -> None:
    assert not median_stop("min", LOSSES, "d", after=4)
    assert not median_stop("min", LOSSES, "d", after=3, min_trials=4)
    three = {k: v for k, v in LOSSES.items() if k != "a"}
    assert not median_stop("min", three, "d", after=3)
    assert median_stop("min", three, "d", after=3, min_trials=2)


def test_median_stop_compares_at_the_same_step_with_trials_that_reached_it() -> None:
    histories = {
        "slow": [(1, 0.9), (2, 0.8)],
        "x": [(1, 0.5), (5, 0.1)],  # its best up to step 2 is 0.5, not 0.1
        "y": [(1, 0.6), (2, 0.6)],
        "z": [(1, 0.7), (3, 0.2)],
        "late": [(3, 0.1)],  # no value at step 2: left out
        "behind": [(1, 0.01)],  # has not reached step 2: left out
    }
    assert median_stop("min", histories, "slow", after=2)  # 0.8 > median(0.5, 0.6, 0.7)
    assert not median_stop("min", histories, "slow", after=2, min_trials=4)


def test_median_stop_uses_the_best_so_far_and_the_goal() -> None:
    accuracy = {
        "a": [(1, 0.9), (2, 0.1)],  # its best so far, 0.9, counts
        "b": [(1, 0.5), (2, 0.5)],
        "c": [(1, 0.6), (2, 0.6)],
        "d": [(1, 0.7), (2, 0.7)],
    }
    assert not median_stop("max", accuracy, "a", after=2)
    assert median_stop("max", accuracy, "b", after=2)  # 0.5 < median(0.9, 0.6, 0.7)
    assert not median_stop("max", accuracy, "missing", after=0)
    assert not median_stop("max", {**accuracy, "e": []}, "e", after=0)


def test_the_objective_is_named_as_the_metric_reader_names_it() -> None:
    spec = parse_cell(HEAD + "%sweep.lr=0.1\n%objective=Val_Loss:MIN\n").sweep
    assert spec is not None and spec.objective == Objective("val_loss", "min", "last")
