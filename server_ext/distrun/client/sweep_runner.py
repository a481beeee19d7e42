"""A sweep run by a client (`distrun sweep FILE`): its trials as ordinary jobs on the chosen
engine, `parallel` at a time, each started the moment another ends with the parameters its
search proposes then (core/search.py: a list, or a model that learns from the trials so far);
each trial's objective read from its first replica's log as it runs (the metrics core/metrics
finds, as the log viewer plots them); the stopping rule (median or asha, core/early_stop.py)
applied as trials report; the results at the end.

A trial is a normal job: its own replicas, logs and status, named `<name>-t<N>`, its parameters
and which sweep and trial it is in its environment (core/trial_env.py).
"""

import asyncio
import dataclasses
import json
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distrun.client.base import Client, LinesEvent, StatusEvent
from distrun.core.early_stop import rung_of, rung_step, stop_rung
from distrun.core.errors import DistrunError, NotFound, SpecError
from distrun.core.logs import LogLine
from distrun.core.metric_series import MetricSeries
from distrun.core.search import Outcome, Search, searcher
from distrun.core.spec import JobSpec
from distrun.core.sweep import (
    MODEL_SEARCHES,
    SweepSpec,
    Value,
    from_dict,
    objective_value,
    to_dict,
    trial_count,
)
from distrun.core.trial_env import (
    ORIGIN_ENV,
    PARAM_ENV_PREFIX,
    PARAMS_ENV,
    sweep_definition,
    trial_env,
    trial_of,
    without_trial_env,
)

TERMINAL = ("succeeded", "failed", "cancelled")


def new_sweep_id() -> str:
    return f"sweep-{secrets.token_hex(3)}"


def sweep_of(job: dict[str, Any]) -> tuple[str, int] | None:
    """(sweep id, trial number) of a job that is a sweep's trial."""
    return trial_of((job.get("spec") or {}).get("env") or {})


@dataclass
class Trial:
    number: int
    params: dict[str, Value]
    job_id: str | None = None
    state: str = "queued"  # then the job's state, or "stopped" by the stopping rule
    readings: MetricSeries = field(default_factory=MetricSeries)  # of its first replica's log
    started: float | None = None  # monotonic
    ended: float | None = None
    error: str | None = None  # why it could not be submitted
    objective: str | None = None
    origin: str | None = None  # what proposed its parameters (core/search.py's ORIGINS)
    judged_rung: int | None = None  # asha: the highest rung it was judged at
    stopped_rung: int | None = None  # asha: the rung it was stopped at
    first_replica: str = ""  # of a resumed trial's job: the replica its objective is read from

    @property
    def history(self) -> list[tuple[float, float]]:
        """(step, objective) as reported."""
        return self.readings.points(self.objective) if self.objective else []

    @property
    def metrics(self) -> dict[str, float]:
        """Each metric's last value."""
        return self.readings.last

    @property
    def seconds(self) -> float | None:
        if self.started is None:
            return None
        return (self.ended or time.monotonic()) - self.started

    def read_all(self, lines: list[LogLine]) -> bool:
        """Takes lines of its log; True when one reported the objective."""
        reported = [self.objective in self.readings.read(line.text) for line in lines]
        return any(reported)


def trial_spec(template: JobSpec, sweep: SweepSpec, sweep_id: str, trial: Trial) -> JobSpec:
    origin = trial.origin if sweep.search in MODEL_SEARCHES else None
    env = {
        **template.env,
        **trial_env(sweep_id, trial.number, trial.params, to_dict(sweep), origin),
    }
    name = f"{template.name}-t{trial.number}"[:40]
    return dataclasses.replace(template, env=env, name=name)


class SweepRun:
    """Runs a sweep's trials through `client` and keeps their results."""

    def __init__(
        self,
        client: Client,
        template: JobSpec,
        sweep: SweepSpec,
        sweep_id: str | None = None,
        on_change: Callable[["SweepRun"], None] = lambda run: None,
    ) -> None:
        self.client, self.template, self.sweep = client, template, sweep
        self.id = sweep_id or new_sweep_id()
        self.search: Search = searcher(sweep)
        objective = sweep.objective.metric if sweep.objective else None
        self.trials = [Trial(n, {}, objective=objective) for n in range(trial_count(sweep))]
        self.on_change = on_change
        self._ended = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopping = False
        self._cancelled = False  # the running trials were asked to stop

    @property
    def objective(self) -> str | None:
        return self.sweep.objective.metric if self.sweep.objective else None

    def result(self, trial: Trial) -> float | None:
        if self.sweep.objective is None:
            return None
        return objective_value(trial.history, self.sweep.objective.goal, self.sweep.objective.read)

    def best(self) -> Trial | None:
        scored = [(v, t) for t in self.trials if (v := self.result(t)) is not None]
        if not scored or self.sweep.objective is None:
            return None
        pick = min if self.sweep.objective.goal == "min" else max
        return pick(scored, key=lambda pair: pair[0])[1]

    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for trial in self.trials:
            counts[trial.state] = counts.get(trial.state, 0) + 1
        return counts

    async def run(self) -> list[Trial]:
        queued = [t for t in self.trials if t.job_id is None and t.state == "queued"]
        for trial in self.trials:
            if trial.job_id is not None and trial.state not in (*TERMINAL, "stopped"):
                self._adopt(trial, {"replicas": [{"name": trial.first_replica}]})
        try:
            while (queued and not self._stopping) or self._running():
                while queued and not self._stopping and len(self._running()) < self.sweep.parallel:
                    await self._start(queued.pop(0))
                self._ended.clear()
                if self._stopping and not self._cancelled:
                    await self.cancel()  # a trial was cancelled from outside: so are the rest
                elif self._running():
                    await self._ended.wait()
        finally:
            await self.cancel()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            self.on_change(self)  # the followers cancelled above may not have said their end
        return self.trials

    async def cancel(self) -> None:
        """Starts no more trials and stops those still running (an interrupted sweep leaves
        nothing behind); `run` returns once they have ended."""
        self._stopping = self._cancelled = True
        for trial in self._running():
            if trial.job_id is not None:
                await self._cancel_quietly(trial.job_id)
        self._ended.set()

    def _running(self) -> list[Trial]:
        return [
            t for t in self.trials if t.job_id is not None and t.state not in (*TERMINAL, "stopped")
        ]

    async def _start(self, trial: Trial) -> None:
        proposal = self.search.ask(trial.number)
        trial.params, trial.origin = proposal.params, proposal.origin
        try:
            job = await self.client.submit(trial_spec(self.template, self.sweep, self.id, trial))
        except DistrunError as error:
            trial.state, trial.error = "failed", str(error)
            self.search.tell(trial.number, "failed", [], None)
            self.on_change(self)
            return
        trial.job_id, trial.state, trial.started = job["id"], job["state"], time.monotonic()
        self._adopt(trial, job)

    def _adopt(self, trial: Trial, job: dict[str, Any]) -> None:
        """Follows a trial's job to its end (one this run started, or a resumed one's)."""
        task = asyncio.create_task(self._follow(trial, job))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self.on_change(self)

    async def _follow(self, trial: Trial, job: dict[str, Any]) -> None:
        assert trial.job_id is not None
        first = job["replicas"][0]["name"]
        try:
            async for event in self.client.follow(trial.job_id, replicas=[first]):
                if isinstance(event, StatusEvent):
                    self._status(trial, event.job)
                elif isinstance(event, LinesEvent) and await self._read(trial, event.lines):
                    self.on_change(self)
        except DistrunError:
            pass
        if trial.state not in (*TERMINAL, "stopped"):
            self._status(trial, await self.client.get_job(trial.job_id))
        trial.ended = trial.ended or time.monotonic()
        self.search.tell(trial.number, _outcome(trial), trial.history, self.result(trial))
        self._ended.set()
        self.on_change(self)

    def _status(self, trial: Trial, job: dict[str, Any]) -> None:
        if job["state"] == "cancelled" and trial.state != "stopped" and not self._stopping:
            # Cancelled by someone else (the sidebar, `distrun cancel`, the sweep's cancel):
            # the sweep ends; no trial has a record of its own to say "stop here" otherwise.
            self._stopping = True
            self._ended.set()
        if trial.state != "stopped":
            trial.state = job["state"]
        if job["state"] in TERMINAL:
            trial.ended = trial.ended or time.monotonic()
        self.on_change(self)

    async def _read(self, trial: Trial, lines: list[LogLine]) -> bool:
        """Reads a batch of the trial's lines, judging it at each report (a batch read late
        can hold many steps: the rule must see the step it could first stop at); True when
        one reported the objective."""
        reported = False
        for line in lines:
            if trial.read_all([line]):
                reported = True
                await self._judge(trial)
            if trial.state == "stopped":
                break
        return reported

    async def _judge(self, trial: Trial) -> None:
        stop, objective = self.sweep.early_stop, self.sweep.objective
        if stop is None or objective is None or trial.state in (*TERMINAL, "stopped"):
            return
        rung = None
        if stop.rule == "asha":
            # Judged once a rung, against the trials that reached it by then (asynchronous).
            rung = rung_of(trial.history[-1][0], stop.after, stop.reduction)
            if rung is None or (trial.judged_rung is not None and rung <= trial.judged_rung):
                return
            trial.judged_rung = rung
        histories = {t.number: t.history for t in self.trials if t.history}
        stopped = stop_rung(stop, objective.goal, histories, trial.number, rung)
        if stopped is not None:
            trial.state = "stopped"
            trial.stopped_rung = stopped if stop.rule == "asha" else None
            assert trial.job_id is not None
            self._ended.set()  # its slot is free now, not once its processes are gone
            self.on_change(self)
            await self._cancel_quietly(trial.job_id)

    async def _cancel_quietly(self, job_id: str) -> None:
        try:
            await self.client.cancel(job_id)
        except DistrunError:
            pass


# --- resuming a sweep whose runner stopped -----------------------------------------------------


async def resume(
    client: Client, sweep_id: str, on_change: Callable[[SweepRun], None] = lambda run: None
) -> SweepRun:
    """The sweep `sweep_id` rebuilt from its trials (the user's jobs that name it): their
    definition and job as the newest trial carries them, every ended trial's reports read from
    its log and taught to the search (a model search learns them; a list goes on where it
    stopped), trials still running followed again; `run` then starts the trials not yet
    started. A trial cancelled without the stopping rule's say (the runner interrupted) stays
    cancelled; its reports teach the model as a stopped trial's."""
    numbered = {
        of[1]: job
        for job in await client.list_jobs()
        if (of := sweep_of(job)) is not None and of[0] == sweep_id
    }
    if not numbered:
        raise NotFound(f"no sweep {sweep_id!r} among your jobs; `distrun ls` lists the sweeps")
    jobs = list(numbered.values())
    newest = max(jobs, key=lambda job: job.get("created_at") or 0)
    definition = sweep_definition(newest["spec"]["env"])
    try:
        sweep = from_dict(definition)
    except DistrunError as error:
        raise SpecError(f"sweep {sweep_id!r} cannot be resumed: its trials carry {error}") from None
    run = SweepRun(client, _template(newest), sweep, sweep_id, on_change)
    restored = [run.trials[n] for n in sorted(numbered) if n < len(run.trials)]
    for trial in restored:
        await _restore(run, trial, numbered[trial.number])
    for trial in restored:  # once every trial's reports are in: the rule compares them all
        if trial.state in TERMINAL:
            _learn(run, trial)
    return run


async def _restore(run: SweepRun, trial: Trial, job: dict[str, Any]) -> None:
    env = job["spec"]["env"]
    trial.params = json.loads(env.get(PARAMS_ENV, "{}"))
    trial.origin = env.get(ORIGIN_ENV) or run.sweep.search
    trial.job_id, trial.state = job["id"], job["state"]
    trial.first_replica = job["replicas"][0]["name"]
    # Monotonic times that give the job's duration so far.
    now, wall = time.monotonic(), time.time()
    started_at = job.get("started_at") or job.get("created_at") or wall
    trial.ended = now if job["state"] in TERMINAL else None
    trial.started = now - ((job.get("finished_at") or wall) - started_at)
    if job["state"] not in TERMINAL:
        run.search.resumed(trial.number, trial.params)  # in flight for the model
        return
    page = await run.client.logs(job["id"], replicas=[trial.first_replica])
    trial.read_all(page.lines)


def _learn(run: SweepRun, trial: Trial) -> None:
    """An ended trial of the earlier run: stopped by the rule or not, taught to the search."""
    objective, stop = run.sweep.objective, run.sweep.early_stop
    if trial.state == "cancelled" and stop is not None and objective is not None:
        histories = {t.number: t.history for t in run.trials if t.history}
        rung = stop_rung(stop, objective.goal, histories, trial.number)
        if rung is not None:
            trial.state = "stopped"
            trial.stopped_rung = rung if rung >= 0 else None
    outcome = _outcome(trial) if trial.state != "cancelled" else "stopped"
    run.search.add_finished(trial.params, outcome, trial.history, run.result(trial))


def _template(trial_job: dict[str, Any]) -> JobSpec:
    """The sweep's job: a trial's, without what makes it that trial."""
    spec = JobSpec.from_dict(trial_job["spec"])
    env = {
        k: v
        for k, v in without_trial_env(spec.env).items()
        if k != PARAMS_ENV and not k.startswith(PARAM_ENV_PREFIX)
    }
    base, dash, number = spec.name.rpartition("-t") if spec.name else ("", "", "")
    name = base if dash and number.isdigit() else spec.name
    return dataclasses.replace(spec, env=env, name=name)


def _outcome(trial: Trial) -> Outcome:
    if trial.state == "stopped":
        return "stopped"
    return "complete" if trial.state == "succeeded" else "failed"


# --- for people ------------------------------------------------------------------------------


def progress_printer(emit: Callable[[str], None]) -> Callable[[SweepRun], None]:
    """A SweepRun's `on_change` that emits a progress line when trials start or end, or
    another trial becomes the best (not at every line a trial prints)."""
    last: list[Any] = [None]

    def show(run: SweepRun) -> None:
        best = run.best()
        moment = (run.counts(), best.number if best else None)
        if moment != last[0]:
            last[0] = moment
            emit(progress_line(run))

    return show


def progress_line(run: SweepRun) -> str:
    counts = run.counts()
    done = sum(counts.get(state, 0) for state in (*TERMINAL, "stopped"))
    parts = [f"{done}/{len(run.trials)} done"]
    parts += [f"{counts[s]} {s}" for s in ("running", "pending", "queued") if counts.get(s)]
    best = run.best()
    if best is not None and run.objective is not None:
        parts.append(f"best #{best.number} {run.objective}={run.result(best):.6g}")
    return f"[distrun] sweep {run.id}: " + ", ".join(parts)


def results_table(run: SweepRun) -> str:
    """One row a trial: number, parameters, what proposed them (a model search), state (with
    the step of the rung asha stopped it at), objective, other final metrics, duration; the
    best trial marked with *."""
    best = run.best()
    names = [param.name for param in run.sweep.params]
    by_model = run.sweep.search in MODEL_SEARCHES
    others = sorted({m for t in run.trials for m in t.metrics} - {run.objective or ""})[:4]
    head = ["", "TRIAL", *names, *(["BY"] if by_model else []), "STATE"]
    head += [run.objective.upper()] if run.objective else []
    rows = [[*head, *(m.upper() for m in others), "SECONDS"]]
    for trial in run.trials:
        result = run.result(trial)
        rows.append(
            [
                "*" if trial is best else "",
                f"#{trial.number}",
                *(_cell(trial.params.get(name)) for name in names),
                *([trial.origin or "-"] if by_model else []),
                _state_cell(run, trial),
                *([_cell(result)] if run.objective else []),
                *(_cell(trial.metrics.get(m)) for m in others),
                "-" if trial.seconds is None else f"{trial.seconds:.1f}",
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _state_cell(run: SweepRun, trial: Trial) -> str:
    stop = run.sweep.early_stop
    if trial.stopped_rung is None or stop is None:
        return trial.state
    return f"{trial.state} (step {rung_step(trial.stopped_rung, stop.after, stop.reduction)})"


def _cell(value: Value | None) -> str:
    if value is None:
        return "-"
    return f"{value:.6g}" if isinstance(value, float) else str(value)
