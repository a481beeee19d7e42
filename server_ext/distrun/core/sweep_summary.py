"""A sweep seen from its trials alone: which jobs belong to which sweep (their environment says,
core/trial_env.py), and the sweep's table (parameters, state, objective, the other metrics,
duration, the best trial) from those jobs and what their first replica's log reported.

Nothing else holds a sweep: whoever lists the jobs can show it, so the server keeps no state.
A trial a stopping rule stopped is a cancelled job; it reads as "stopped" when the rule,
applied again to the trials' reports, stops it at its last report (asha: at the highest rung
it reached, which the row names). A model search's trial says what proposed it (its
environment's DISTRUN_TRIAL_ORIGIN: "tpe", or "random" for the first draws).
"""

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from distrun.core.early_stop import rung_step, stop_rung
from distrun.core.errors import DistrunError
from distrun.core.job import Job
from distrun.core.metric_series import MetricSeries, Point
from distrun.core.sweep import (
    SweepSpec,
    from_dict,
    objective_value,
    to_dict,
    trial_count,
)
from distrun.core.trial_env import ORIGIN_ENV, PARAMS_ENV, sweep_definition, trial_of

MAX_POINTS = 500  # a series' points in a summary, however long the log


@dataclass(frozen=True)
class TrialJob:
    number: int
    job: Job
    readings: MetricSeries | None = None  # None: its log was not read


def sweeps_of(jobs: Iterable[Job]) -> dict[str, list[TrialJob]]:
    """Sweep id -> its trials by number, for the jobs that are trials."""
    found: dict[str, list[TrialJob]] = {}
    for job in jobs:
        trial = trial_of(job.spec.env)
        if trial is not None:
            found.setdefault(trial[0], []).append(TrialJob(trial[1], job))
    return {sweep_id: sorted(trials, key=lambda t: t.number) for sweep_id, trials in found.items()}


def definition_of(trials: list[TrialJob]) -> SweepSpec | None:
    """The sweep's definition as its newest trial carries it; None when none carries a valid
    one (trials started by an older version)."""
    for trial in reversed(trials):
        try:
            return from_dict(sweep_definition(trial.job.spec.env))
        except DistrunError:
            continue
    return None


def summary(sweep_id: str, trials: list[TrialJob]) -> dict[str, Any]:
    """The sweep as JSON (openapi.yaml's Sweep): each trial with its parameters, state and,
    where its log was read, its objective, last metrics and series."""
    spec = definition_of(trials)
    objective = spec.objective if spec else None
    histories = {
        t.number: t.readings.points(objective.metric)
        for t in trials
        if t.readings is not None and objective is not None
    }
    rows = [_trial_json(t, spec, histories) for t in trials]
    states = [row["state"] for row in rows]
    total = trial_count(spec) if spec else len(trials)
    counts = {state: states.count(state) for state in dict.fromkeys(states)}
    if total > len(trials):
        counts["queued"] = total - len(trials)
    return {
        "id": sweep_id,
        "name": _template_name(trials[0].job.name) if trials else sweep_id,
        "engine": trials[0].job.engine if trials else None,
        "definition": None if spec is None else to_dict(spec),
        "trials_total": total,
        "counts": counts,
        "ended": not counts.get("queued") and all(t.job.state.terminal for t in trials),
        "created_at": min((t.job.created_at for t in trials), default=None),
        "best": best_trial(rows, spec),
        "trials": rows,
    }


def best_trial(rows: list[dict[str, Any]], spec: SweepSpec | None) -> int | None:
    """The number of the trial with the best objective, or None before any reported."""
    if spec is None or spec.objective is None:
        return None
    scored: list[tuple[float, int]] = [
        (row["objective"], row["number"]) for row in rows if row["objective"] is not None
    ]
    if not scored:
        return None
    pick = min if spec.objective.goal == "min" else max
    return pick(scored, key=lambda pair: pair[0])[1]


def _trial_json(
    trial: TrialJob, spec: SweepSpec | None, histories: Mapping[int, list[Point]]
) -> dict[str, Any]:
    job, readings = trial.job, trial.readings
    objective = spec.objective if spec else None
    value = None
    if objective is not None and trial.number in histories:
        value = objective_value(histories[trial.number], objective.goal, objective.read)
    rung = _stopped_rung(trial, spec, histories)
    stop = spec.early_stop if spec else None
    row: dict[str, Any] = {
        "number": trial.number,
        "job_id": job.id,
        "params": _params(job),
        "origin": job.spec.env.get(ORIGIN_ENV),
        "state": "stopped" if rung is not None else job.state.value,
        "rung": rung if rung is None or rung >= 0 else None,
        "rung_step": None
        if rung is None or rung < 0 or stop is None
        else rung_step(rung, stop.after, stop.reduction),
        "objective": value,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
    }
    if readings is not None:
        row["metrics"] = dict(readings.last)
        row["series"] = {name: readings.points(name) for name in readings.names()}
    return row


def _stopped_rung(
    trial: TrialJob, spec: SweepSpec | None, histories: Mapping[int, list[Point]]
) -> int | None:
    """Where the sweep's stopping rule stopped a cancelled trial (core/early_stop.stop_rung:
    a rung, -1 for the median rule), or None."""
    stop = spec.early_stop if spec else None
    if trial.job.state.value != "cancelled" or stop is None or spec is None:
        return None
    if spec.objective is None:
        return None
    return stop_rung(stop, spec.objective.goal, histories, trial.number)


def _params(job: Job) -> Any:
    try:
        return json.loads(job.spec.env.get(PARAMS_ENV, "{}"))
    except ValueError:
        return {}


def _template_name(trial_name: str) -> str:
    base, dash, number = trial_name.rpartition("-t")
    return base if dash and number.isdigit() else trial_name
