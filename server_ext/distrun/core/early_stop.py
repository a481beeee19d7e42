"""Asynchronous successive halving (ASHA, Li et al. 2020), as a stopping rule on the steps a
trial's code reports, and the one entry point for a sweep's stopping rules (`stop_rung`).

Rungs are at steps `after * reduction**k` (k = 0, 1, ...). When a trial reaches a rung it is
judged once, against every trial that has reached that rung so far (its own value included):
it goes on when its best value up to the rung is at least as good as the (1 - 1/reduction)
quantile of theirs (linear interpolation, as Ray Tune's AsyncHyperBand computes it), so about
one in `reduction` trials goes on; the first trial at a rung always does. Trials are never
paused and resumed (that would need the training code to checkpoint): a stopped trial is
cancelled, which is what makes the rule asynchronous and fit for `%parallel` trials.

Written here rather than taken from Optuna's SuccessiveHalvingPruner: that pruner keeps its
rung decisions in its study's storage, in the order events arrived, while a sweep is shown by
anyone from its trials alone (core/sweep_summary.py applies the same function again).
"""

import math
from collections.abc import Hashable, Mapping
from typing import Literal, TypeVar

from distrun.core.sweep import EarlyStop, History, Step, best_until, median_stop

K = TypeVar("K", bound=Hashable)


def rung_of(step: Step, after: int, reduction: int) -> int | None:
    """The highest rung at or below `step` (0 is the first, at step `after`); None before it."""
    if step < after:
        return None
    rung = 0
    while after * reduction ** (rung + 1) <= step:
        rung += 1
    return rung


def rung_step(rung: int, after: int, reduction: int) -> int:
    return int(after * reduction**rung)


def asha_stop(
    goal: Literal["min", "max"],
    histories: Mapping[K, History],
    trial: K,
    after: int,
    reduction: int,
    rung: int | None = None,
) -> bool:
    """Whether `trial` stops at `rung` (by default the highest it has reached): its best value up
    to the rung's step is worse than the (1 - 1/reduction) quantile of the best values up to that
    step of the trials that have reached it."""
    history = histories.get(trial)
    if not history:
        return False
    reached = rung_of(history[-1][0], after, reduction)
    if reached is None or (rung is not None and rung > reached):
        return False
    step = rung_step(reached if rung is None else rung, after, reduction)
    values = [
        value
        for other in histories.values()
        if other and other[-1][0] >= step and (value := best_until(other, step, goal)) is not None
    ]
    own = best_until(history, step, goal)
    if own is None or len(values) < 2:
        return False
    # Better is lower: a maximised metric is negated.
    sign = 1.0 if goal == "min" else -1.0
    cutoff = _quantile(sorted(sign * v for v in values), 1 / reduction)
    return sign * own > cutoff


def stop_rung(
    stop: EarlyStop,
    goal: Literal["min", "max"],
    histories: Mapping[K, History],
    trial: K,
    rung: int | None = None,
) -> int | None:
    """The sweep's stopping rule applied to `trial`'s reports so far: None when it goes on,
    else the rung it stops at (asha), or -1 (the median rule has no rungs). `rung`: judge asha
    at that rung rather than the highest reached."""
    if stop.rule == "asha":
        if asha_stop(goal, histories, trial, stop.after, stop.reduction, rung):
            history = histories[trial]
            reached = rung_of(history[-1][0], stop.after, stop.reduction)
            return reached if rung is None else rung
        return None
    return -1 if median_stop(goal, histories, trial, stop.after, stop.min_trials) else None


def _quantile(ordered: list[float], fraction: float) -> float:
    """The `fraction` quantile of sorted values, interpolated between neighbours."""
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
