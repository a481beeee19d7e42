"""core/search.py and core/early_stop.py: what a model search proposes and learns, and the
asha rule's rungs and cut, with no jobs (tests/unit/test_sweep_runner.py runs them in a sweep)."""

import pytest

from distrun.core.early_stop import asha_stop, rung_of, rung_step, stop_rung
from distrun.core.errors import SpecError
from distrun.core.header import parse_cell, render_header
from distrun.core.search import ListSearch, TpeSearch, searcher, startup_trials
from distrun.core.sweep import (
    Choice,
    EarlyStop,
    IntRange,
    LogUniform,
    Objective,
    Param,
    SweepSpec,
    Uniform,
    Values,
    check,
    from_dict,
    to_dict,
)

SPACE = (
    Param("x", Uniform(-5.0, 10.0)),
    Param("lr", LogUniform(1e-4, 1e-1)),
    Param("layers", IntRange(1, 8)),
    Param("opt", Choice(("adam", "sgd"))),
)


def tpe(trials: int = 20, seed: int | None = 3, goal: str = "min") -> SweepSpec:
    spec = SweepSpec(
        SPACE,
        search="tpe",
        trials=trials,
        objective=Objective("loss", goal),
        seed=seed,  # type: ignore[arg-type]
    )
    check(spec)
    return spec


def score(params: dict[str, object]) -> float:
    return (float(params["x"]) - 2) ** 2 + (0.0 if params["opt"] == "sgd" else 3.0)  # type: ignore[arg-type]


def run_search(spec: SweepSpec) -> list[tuple[dict[str, object], str, float]]:
    search = searcher(spec)
    seen = []
    for number in range(spec.trials or 0):
        proposal = search.ask(number)
        value = score(proposal.params)
        search.tell(number, "complete", [(1, value)], value)
        seen.append((proposal.params, proposal.origin, value))
    return seen


def test_a_tpe_search_proposes_points_of_the_space_then_learns_from_them() -> None:
    seen = run_search(tpe(30))
    for params, _, _ in seen:
        assert -5 <= params["x"] <= 10 and 1e-4 <= params["lr"] <= 1e-1  # type: ignore[operator]
        assert params["layers"] in range(1, 9) and params["opt"] in ("adam", "sgd")
    origins = [origin for _, origin, _ in seen]
    assert origins == ["random"] * startup_trials(tpe(30)) + ["tpe"] * (30 - 6)
    drawn = sorted(v for _, o, v in seen if o == "random")
    modelled = sorted(v for _, o, v in seen if o == "tpe")
    assert modelled[len(modelled) // 2] < drawn[len(drawn) // 2]


def test_the_same_seed_proposes_the_same_points_and_another_seed_others() -> None:
    assert run_search(tpe(12, seed=4)) == run_search(tpe(12, seed=4))
    assert run_search(tpe(12, seed=4)) != run_search(tpe(12, seed=5))
    assert run_search(tpe(8, seed=None)) == run_search(tpe(8, seed=None)), "seed derived"


def test_trials_in_flight_are_not_proposed_twice() -> None:
    spec = SweepSpec(
        (Param("opt", Values(("a", "b", "c", "d"))),),
        search="tpe",
        trials=8,
        objective=Objective("loss", "min"),
    )
    search = searcher(spec)
    for number in range(4):
        search.tell(number, "complete", [(1, 1.0)], float(number))  # unknown trials: ignored
    asked = [search.ask(n).params["opt"] for n in range(4)]
    assert asked  # Optuna's constant liar keeps pending ones in view; all four in range
    assert set(asked) <= {"a", "b", "c", "d"}


def test_stopped_failed_and_resumed_trials_are_learned_or_skipped() -> None:
    search = searcher(tpe(10))
    assert isinstance(search, TpeSearch)
    first = search.ask(0)
    search.tell(0, "stopped", [(1, 5.0), (2, 4.0)], 4.0)
    search.ask(1)
    search.tell(1, "failed", [], None)
    search.add_finished(first.params, "complete", [(1, 1.0)], 1.0)
    search.add_finished(
        {"x": 99.0, **{k: v for k, v in first.params.items() if k != "x"}},
        "complete",
        [(1, 0.5)],
        0.5,
    )  # outside the space: skipped
    search.add_finished(first.params, "failed", [], None)
    states = [t.state.name for t in search._study.trials]
    assert states == ["PRUNED", "FAIL", "COMPLETE"]


def test_a_model_search_needs_an_objective() -> None:
    spec = SweepSpec(SPACE, search="tpe", trials=5)
    with pytest.raises(SpecError, match="learns from the objective"):
        searcher(spec)


def test_grid_and_random_searches_hand_out_their_list() -> None:
    spec = SweepSpec((Param("lr", Values((0.1, 0.2))),))
    search = searcher(spec)
    assert isinstance(search, ListSearch)
    assert [search.ask(n).params for n in range(2)] == [{"lr": 0.1}, {"lr": 0.2}]
    assert search.ask(1).origin == "grid"


def test_tpe_and_bayes_and_asha_in_a_header_and_back() -> None:
    cell = (
        "%framework=pytorch\n%sweep.lr=loguniform(1e-4,1e-1)\n%search=bayes\n%trials=9\n"
        "%objective=loss:min\n%earlyStop=asha:2:4\nprint(1)\n"
    )
    sweep = parse_cell(cell).sweep
    assert sweep is not None and sweep.search == "bayes" and sweep.trials == 9
    assert sweep.early_stop == EarlyStop("asha", 2, reduction=4)
    assert from_dict(to_dict(sweep)) == sweep
    assert "%earlyStop=asha:2:4" in render_header(parse_cell(cell).spec_fields, sweep=sweep)
    default = parse_cell(cell.replace("asha:2:4", "asha")).sweep
    assert default is not None and default.early_stop == EarlyStop("asha", 1, reduction=3)


@pytest.mark.parametrize(
    ("stop", "message"),
    [
        ("asha:0", "asha's first rung is at step 1 or later"),
        ("asha:1:1", "asha's reduction 1 is not a whole number from 2"),
        ("asha:x", "asha's first rung (a step) and reduction are whole numbers"),
        ("asha:1:3:4", "is neither median:N"),
    ],
)
def test_a_bad_asha_setting_says_what_to_write(stop: str, message: str) -> None:
    cell = f"%framework=pytorch\n%sweep.lr=0.1,0.2\n%objective=loss:min\n%earlyStop={stop}\n"
    with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_cell(cell)


def test_a_model_search_needs_trials() -> None:
    with pytest.raises(SpecError, match="a tpe search needs its number of trials"):
        parse_cell("%framework=pytorch\n%sweep.lr=0.1,0.2\n%search=tpe\n%objective=loss:min\n")


def test_a_median_sweep_json_is_unchanged_by_asha() -> None:
    spec = SweepSpec(
        (Param("lr", Values((0.1,))),),
        objective=Objective("loss", "min"),
        early_stop=EarlyStop("median", 3),
    )
    assert to_dict(spec)["early_stop"] == {"rule": "median", "after": 3, "min_trials": 3}


def test_rungs_are_at_the_first_step_times_powers_of_the_reduction() -> None:
    assert [rung_of(s, 2, 3) for s in (1, 2, 5, 6, 17, 18, 54)] == [None, 0, 0, 1, 1, 2, 3]
    assert [rung_step(r, 2, 3) for r in range(4)] == [2, 6, 18, 54]


HISTORIES = {
    "a": [(1, 0.9), (3, 0.5)],
    "b": [(1, 0.8), (3, 0.7)],
    "c": [(1, 0.7), (3, 0.2), (9, 0.1)],
    "d": [(1, 0.95)],
}


def test_asha_keeps_the_best_third_of_a_rung_and_the_first_to_reach_it() -> None:
    assert asha_stop("min", HISTORIES, "d", after=1, reduction=3)  # 0.95: worst of four at 1
    assert not asha_stop("min", HISTORIES, "c", after=1, reduction=3, rung=0)  # best at 1
    assert asha_stop("min", HISTORIES, "a", after=1, reduction=3, rung=0)  # 0.9 of .7 .8 .9 .95
    assert not asha_stop("min", HISTORIES, "c", after=1, reduction=3)  # alone at step 9
    assert asha_stop("min", HISTORIES, "b", after=1, reduction=3)  # 0.7 of .2 .5 .7 at step 3
    assert not asha_stop("min", {"a": [(1, 5.0)]}, "a", after=1, reduction=3)
    assert not asha_stop("min", HISTORIES, "d", after=2, reduction=3), "before the first rung"


def test_asha_follows_the_goal_and_the_stop_rung_says_where() -> None:
    accuracy = {k: [(s, 1 - v) for s, v in h] for k, h in HISTORIES.items()}
    assert asha_stop("max", accuracy, "d", after=1, reduction=3)
    assert not asha_stop("max", accuracy, "c", after=1, reduction=3, rung=0)
    stop = EarlyStop("asha", 1, reduction=3)
    assert stop_rung(stop, "min", HISTORIES, "b") == 1
    assert stop_rung(stop, "min", HISTORIES, "c") is None
    assert stop_rung(EarlyStop("median", 1, 2), "min", HISTORIES, "d") == -1
