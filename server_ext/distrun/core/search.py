"""Where a sweep's next trial goes: `searcher(spec)` gives a `Search` that proposes each trial's
parameters (`ask`) and learns each trial's outcome (`tell`).

A grid or a random search hands out `expand`'s list in order and learns nothing. A model
search (`tpe`; `bayes` is the same search, the name kept for Katib's `bayesianoptimization`)
is Optuna's Tree-structured Parzen Estimator through its ask-and-tell interface, in memory (no
storage, no server): each trial is an Optuna trial, asked when it starts, told when it ends
(complete with its objective, pruned with its reports when a stopping rule ended it, failed
without an objective). Trials still running are in flight for the sampler: Optuna's constant
liar counts them as if they had ended badly, so `%parallel` trials asked together spread out
instead of landing on the same point. The first trials are drawn at random (Optuna's startup
trials: `startup_trials`) until the model has results to learn from.

Optuna is imported only by a model search (the `sweeps` extra installs it).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from distrun.core.errors import SpecError
from distrun.core.sweep import (
    MODEL_SEARCHES,
    Choice,
    History,
    IntRange,
    LogUniform,
    SweepSpec,
    Uniform,
    Value,
    Values,
    effective_seed,
    expand,
)

Outcome = Literal["complete", "stopped", "failed"]
ORIGINS = ("grid", "random", "tpe")  # what proposed a trial: the list, a random draw, the model
MAX_STARTUP_TRIALS = 10  # Optuna's default


@dataclass(frozen=True)
class Proposal:
    params: dict[str, Value]
    origin: str  # one of ORIGINS


class Search(Protocol):
    def ask(self, number: int) -> Proposal: ...

    def tell(self, number: int, outcome: Outcome, history: History, value: float | None) -> None:
        """Trial `number` ended: its reports (step, objective) and its result."""

    def add_finished(
        self, params: dict[str, Value], outcome: Outcome, history: History, value: float | None
    ) -> None:
        """A trial of an earlier run of the sweep (resumed), ended: learn from it."""

    def resumed(self, number: int, params: dict[str, Value]) -> None:
        """Trial `number` of an earlier run of the sweep is still running, at `params`."""


def searcher(spec: SweepSpec) -> Search:
    if spec.search in MODEL_SEARCHES:
        return TpeSearch(spec)
    return ListSearch(spec)


def startup_trials(spec: SweepSpec) -> int:
    """Random draws before the model proposes: Optuna's 10, fewer in a short sweep (a fifth
    of its trials, at least 3), so that most of its trials are the model's."""
    return min(MAX_STARTUP_TRIALS, max(3, (spec.trials or 0) // 5))


class ListSearch:
    """Grid and random search: `expand`'s points in order."""

    def __init__(self, spec: SweepSpec) -> None:
        self._points = expand(spec)
        self._origin = spec.search

    def ask(self, number: int) -> Proposal:
        return Proposal(dict(self._points[number]), self._origin)

    def tell(self, number: int, outcome: Outcome, history: History, value: float | None) -> None:
        pass

    def add_finished(
        self, params: dict[str, Value], outcome: Outcome, history: History, value: float | None
    ) -> None:
        pass

    def resumed(self, number: int, params: dict[str, Value]) -> None:
        pass


class TpeSearch:
    """Optuna's TPE sampler, asked and told (module docstring)."""

    def __init__(self, spec: SweepSpec) -> None:
        optuna = _optuna()
        if spec.objective is None:
            raise SpecError(
                f"a {spec.search} search learns from the objective; add %objective=loss:min",
                field="objective",
            )
        self._optuna = optuna
        self._startup = startup_trials(spec)
        self._distributions = {p.name: _distribution(optuna, p.space) for p in spec.params}
        sampler = optuna.samplers.TPESampler(
            seed=effective_seed(spec) % 2**32,  # numpy's generator takes 32 bits
            n_startup_trials=self._startup,
            constant_liar=True,
        )
        direction = "minimize" if spec.objective.goal == "min" else "maximize"
        self._study = optuna.create_study(direction=direction, sampler=sampler)
        self._asked: dict[int, Any] = {}  # number -> its optuna.trial.Trial

    def ask(self, number: int) -> Proposal:
        ended = len(self._study.get_trials(deepcopy=False, states=_learned(self._optuna)))
        trial = self._study.ask(self._distributions)
        self._asked[number] = trial
        return Proposal(dict(trial.params), "random" if ended < self._startup else "tpe")

    def tell(self, number: int, outcome: Outcome, history: History, value: float | None) -> None:
        trial = self._asked.pop(number, None)
        if trial is None:
            return
        state = self._optuna.trial.TrialState
        if outcome == "complete" and value is not None and math.isfinite(value):
            self._study.tell(trial, value)
        elif outcome == "stopped" and _finite(history):
            for step, reported in _by_step(history):
                trial.report(reported, step)
            self._study.tell(trial, state=state.PRUNED)
        else:
            self._study.tell(trial, state=state.FAIL)

    def resumed(self, number: int, params: dict[str, Value]) -> None:
        # Asked again at its own point (an enqueued trial), so that it is in flight for the
        # constant liar and told when it ends like any other.
        self._study.enqueue_trial(params, skip_if_exists=False)
        self._asked[number] = self._study.ask(self._distributions)

    def add_finished(
        self, params: dict[str, Value], outcome: Outcome, history: History, value: float | None
    ) -> None:
        optuna = self._optuna
        if outcome == "complete" and value is not None and math.isfinite(value):
            fields: dict[str, Any] = {"value": value}
        elif outcome == "stopped" and _finite(history):
            fields = {
                "state": optuna.trial.TrialState.PRUNED,
                "intermediate_values": dict(_by_step(history)),
            }
        else:
            return  # a failed trial teaches the sampler nothing
        try:
            frozen = optuna.trial.create_trial(
                params=params, distributions=self._distributions, **fields
            )
        except (ValueError, TypeError):
            return  # a point outside this definition's space (the header changed): skip it
        self._study.add_trial(frozen)


def _learned(optuna: Any) -> tuple[Any, ...]:
    return (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def _optuna() -> Any:
    try:
        import optuna
    except ImportError:
        raise SpecError(
            "a tpe or bayes search needs Optuna, which is not installed here; install it with "
            "pip install 'distrun[sweeps]' (or pip install optuna)",
            field="search",
        ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no line per trial on stderr
    return optuna


def _distribution(optuna: Any, space: Any) -> Any:
    distributions = optuna.distributions
    if isinstance(space, Values | Choice):
        return distributions.CategoricalDistribution(space.values)
    if isinstance(space, IntRange):
        return distributions.IntDistribution(space.low, space.high)
    if isinstance(space, LogUniform):
        return distributions.FloatDistribution(space.low, space.high, log=True)
    assert isinstance(space, Uniform)
    return distributions.FloatDistribution(space.low, space.high)


def _finite(history: History) -> bool:
    return any(math.isfinite(value) for _, value in history)


def _by_step(history: History) -> Sequence[tuple[int, float]]:
    """Optuna's intermediate values: one per whole step, the last reported at it."""
    steps: dict[int, float] = {}
    for step, value in history:
        if math.isfinite(value):
            steps[int(step)] = value
    return sorted(steps.items())
