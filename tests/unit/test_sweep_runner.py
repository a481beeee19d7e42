"""client/sweep_runner.py with a fake client whose jobs print scripted losses: how many trials
run at once, when the next one starts, what the median rule stops, which trial is best, and
what an interrupted sweep leaves running. tests/training/test_sweep.py runs a real one."""

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from distrun.client.base import LinesEvent, LogPage, StatusEvent
from distrun.client.sweep_runner import (
    SweepRun,
    Trial,
    progress_line,
    progress_printer,
    results_table,
    resume,
    sweep_of,
    trial_spec,
)
from distrun.core.errors import NotFound
from distrun.core.logs import LogLine
from distrun.core.spec import JobSpec
from distrun.core.sweep import EarlyStop, Objective, Param, SweepSpec, Uniform, Values


class FakeClient:
    """Each job prints `loss=` for steps 1..5, falling by its `lr` per step, a tick apart."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.running: set[str] = set()
        self.most_at_once = 0
        self.cancelled: set[str] = set()

    async def submit(self, spec: JobSpec) -> dict[str, Any]:
        job_id = f"job-{len(self.jobs)}"
        job = {
            "id": job_id,
            "state": "running",
            "spec": spec.to_dict(),
            "replicas": [{"name": "master-0"}, {"name": "worker-0"}],
        }
        self.jobs[job_id] = job
        self.running.add(job_id)
        self.most_at_once = max(self.most_at_once, len(self.running))
        return job

    async def follow(
        self, job_id: str, since: Any = None, replicas: list[str] | None = None
    ) -> AsyncIterator[Any]:
        job = self.jobs[job_id]
        lr = json.loads(job["spec"]["env"]["DISTRUN_PARAMS"])["lr"]
        loss = 10.0
        for step in range(1, 6):
            await asyncio.sleep(0.01)
            if job_id in self.cancelled:
                break
            loss -= lr
            said = f"step {step} loss={loss}"
            yield LinesEvent([LogLine("master-0", step, 0.0, said), self.also(step)])
        self.running.discard(job_id)
        job["state"] = "cancelled" if job_id in self.cancelled else "succeeded"
        yield StatusEvent(dict(job))

    @staticmethod
    def also(step: int) -> LogLine:
        """A line after the loss in the same batch: every line of a batch is read."""
        return LogLine("master-0", step, 0.0, f"step {step} accuracy={step / 10}")

    async def get_job(self, job_id: str) -> dict[str, Any]:
        return dict(self.jobs[job_id])

    async def cancel(self, job_id: str) -> dict[str, Any]:
        self.cancelled.add(job_id)
        return dict(self.jobs[job_id])


TEMPLATE = JobSpec.from_dict({"framework": "pytorch", "code": "pass\n", "name": "fit"})


def sweep(rates: tuple[float, ...], stop: EarlyStop | None = None, parallel: int = 2) -> SweepSpec:
    return SweepSpec(
        params=(Param("lr", Values(rates)),),
        parallel=parallel,
        objective=Objective("loss", "min"),
        early_stop=stop,
    )


async def test_trials_run_parallel_at_a_time_and_the_best_is_the_lowest_loss() -> None:
    client = FakeClient()
    run = SweepRun(client, TEMPLATE, sweep((0.1, 0.5, 0.2, 0.3)))  # type: ignore[arg-type]
    trials = await run.run()
    assert client.most_at_once == 2
    assert [t.state for t in trials] == ["succeeded"] * 4
    best = run.best()
    assert best is not None and best.params == {"lr": 0.5}
    assert run.result(best) == pytest.approx(7.5)
    assert best.metrics["accuracy"] == pytest.approx(0.5)
    table = results_table(run)
    assert "* #1" in table.replace("  ", " ") and "LOSS" in table
    assert "4/4 done" in progress_line(run)


async def test_each_trial_is_a_job_named_for_it_with_its_parameters_and_its_sweep() -> None:
    client = FakeClient()
    run = SweepRun(client, TEMPLATE, sweep((0.1, 0.2)), sweep_id="sweep-abc")  # type: ignore[arg-type]
    await run.run()
    jobs = list(client.jobs.values())
    assert [job["spec"]["name"] for job in jobs] == ["fit-t0", "fit-t1"]
    assert [sweep_of(job) for job in jobs] == [("sweep-abc", 0), ("sweep-abc", 1)]
    assert jobs[1]["spec"]["env"]["DISTRUN_PARAM_LR"] == "0.2"


async def test_the_median_rule_stops_a_trial_behind_the_others_at_the_same_step() -> None:
    client = FakeClient()
    stop = EarlyStop("median", after=3, min_trials=2)
    run = SweepRun(client, TEMPLATE, sweep((0.5, 0.3, 0.45, 0.01), stop), None)  # type: ignore[arg-type]
    trials = await run.run()
    assert trials[3].state == "stopped"
    assert client.jobs["job-3"]["state"] == "cancelled"
    assert trials[3].history[-1][0] == 3, "stopped at the first step the rule may judge"
    assert [t.state for t in trials[:3]] == ["succeeded"] * 3


async def test_an_interrupted_sweep_cancels_its_running_trials_and_starts_no_more() -> None:
    client = FakeClient()
    run = SweepRun(client, TEMPLATE, sweep((0.1, 0.2, 0.3, 0.4)))  # type: ignore[arg-type]
    task = asyncio.create_task(run.run())
    await asyncio.sleep(0.02)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert client.cancelled == {"job-0", "job-1"}
    assert len(client.jobs) == 2


async def test_cancelling_a_sweep_stops_its_running_trials_and_run_returns_without_more() -> None:
    client = FakeClient()
    run = SweepRun(client, TEMPLATE, sweep((0.1, 0.2, 0.3, 0.4)))  # type: ignore[arg-type]
    task = asyncio.create_task(run.run())
    await asyncio.sleep(0.02)
    await run.cancel()
    trials = await asyncio.wait_for(task, 5)
    assert [t.state for t in trials] == ["cancelled", "cancelled", "queued", "queued"]
    assert len(client.jobs) == 2


async def test_a_trial_cancelled_from_outside_ends_the_sweep_and_its_other_trials() -> None:
    client = FakeClient()
    run = SweepRun(client, TEMPLATE, sweep((0.1, 0.2, 0.3, 0.4)))  # type: ignore[arg-type]
    task = asyncio.create_task(run.run())
    await asyncio.sleep(0.02)
    await client.cancel("job-0")  # as the sidebar or `distrun cancel` would
    trials = await asyncio.wait_for(task, 5)
    assert [t.state for t in trials] == ["cancelled", "cancelled", "queued", "queued"]
    assert client.cancelled == {"job-0", "job-1"} and len(client.jobs) == 2


async def test_each_trial_carries_the_sweep_definition_for_whoever_lists_it() -> None:
    client = FakeClient()
    run = SweepRun(client, TEMPLATE, sweep((0.1, 0.2)))  # type: ignore[arg-type]
    await run.run()
    definition = json.loads(client.jobs["job-1"]["spec"]["env"]["DISTRUN_SWEEP_SPEC"])
    assert definition["objective"] == {"metric": "loss", "goal": "min", "read": "last"}
    assert definition["params"] == {"lr": {"values": [0.1, 0.2]}}


class CurveClient(FakeClient):
    """Each job prints `loss=` for steps 1..9: (lr - 0.3)**2 plus a falling term, so that the
    order of trials at every step is the order of their final losses."""

    async def follow(
        self, job_id: str, since: Any = None, replicas: list[str] | None = None
    ) -> AsyncIterator[Any]:
        job = self.jobs[job_id]
        lr = json.loads(job["spec"]["env"]["DISTRUN_PARAMS"])["lr"]
        for step in range(1, 10):
            await asyncio.sleep(0.005)
            if job_id in self.cancelled:
                break
            loss = (lr - 0.3) ** 2 + 1 / step
            yield LinesEvent([LogLine("master-0", step, 0.0, f"step {step} loss={loss}")])
        self.running.discard(job_id)
        job["state"] = "cancelled" if job_id in self.cancelled else "succeeded"
        yield StatusEvent(dict(job))


def tpe_sweep(trials: int, parallel: int, seed: int = 5) -> SweepSpec:
    return SweepSpec(
        params=(Param("lr", Uniform(0.0, 1.0)),),
        search="tpe",
        trials=trials,
        parallel=parallel,
        objective=Objective("loss", "min"),
        seed=seed,
    )


async def test_a_tpe_search_proposes_each_trial_and_says_which_the_model_proposed() -> None:
    client = CurveClient()
    run = SweepRun(client, TEMPLATE, tpe_sweep(12, parallel=2))  # type: ignore[arg-type]
    trials = await run.run()
    assert [t.state for t in trials] == ["succeeded"] * 12
    origins = [t.origin for t in trials]
    drawn = origins.count("random")
    # Random until 3 trials have ended (up to 2 more asked meanwhile), then the model's.
    assert 3 <= drawn <= 5 and origins == ["random"] * drawn + ["tpe"] * (12 - drawn)
    in_env = [job["spec"]["env"]["DISTRUN_TRIAL_ORIGIN"] for job in client.jobs.values()]
    assert in_env == origins
    assert len({t.params["lr"] for t in trials}) == 12
    losses = {t.number: run.result(t) or 0.0 for t in trials}
    by_model = [losses[t.number] for t in trials if t.origin == "tpe"]
    drawn_losses = [losses[t.number] for t in trials if t.origin == "random"]
    assert sorted(by_model)[len(by_model) // 2] < sorted(drawn_losses)[len(drawn_losses) // 2]
    table = results_table(run)
    assert " BY " in table and "tpe" in table


async def test_a_tpe_search_with_a_seed_proposes_the_same_trials_again() -> None:
    runs = [SweepRun(CurveClient(), TEMPLATE, tpe_sweep(6, parallel=1)) for _ in range(2)]  # type: ignore[arg-type]
    first, second = [[t.params for t in await run.run()] for run in runs]
    assert first == second
    other = SweepRun(CurveClient(), TEMPLATE, tpe_sweep(6, parallel=1, seed=6))  # type: ignore[arg-type]
    assert [t.params for t in await other.run()] != first


async def test_asha_stops_trials_behind_at_a_rung_and_keeps_the_best() -> None:
    client = CurveClient()
    rates = (0.3, 0.9, 0.0, 0.8, 0.35, 1.0)
    stop = EarlyStop("asha", after=1, reduction=3)
    run = SweepRun(client, TEMPLATE, sweep(rates, stop, parallel=6))  # type: ignore[arg-type]
    trials = await run.run()
    states = {t.params["lr"]: (t.state, t.stopped_rung) for t in trials}
    assert states[0.3] == ("succeeded", None), "the best trial is never stopped"
    stopped = [t for t in trials if t.state == "stopped"]
    assert len(stopped) >= 3
    for trial in stopped:
        assert trial.stopped_rung in (0, 1)
        assert trial.history[-1][0] == (1, 3)[trial.stopped_rung or 0], "stopped at its rung"
    assert "stopped (step 1)" in results_table(run) or "stopped (step 3)" in results_table(run)


class BatchClient(CurveClient):
    """Each job's steps 1..9 arrive in one batch, as when a loaded machine reads a log late."""

    async def follow(
        self, job_id: str, since: Any = None, replicas: list[str] | None = None
    ) -> AsyncIterator[Any]:
        lines = [event async for event in super().follow(job_id, since, replicas)]
        said = [line for event in lines if isinstance(event, LinesEvent) for line in event.lines]
        yield LinesEvent(said)
        yield lines[-1]


async def test_a_batch_of_many_steps_is_judged_at_each_report() -> None:
    stop = EarlyStop("asha", after=1, reduction=3)
    run = SweepRun(BatchClient(), TEMPLATE, sweep((0.3, 1.0), stop, parallel=1))  # type: ignore[arg-type]
    trials = await run.run()
    assert trials[1].state == "stopped" and trials[1].stopped_rung == 0
    assert trials[1].history[-1][0] == 1, "stopped at its first report behind, not its last"


class SlowCancelClient(CurveClient):
    """Cancelling a job takes a while (its processes are stopped, its state written)."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelling: set[str] = set()
        self.cancelling_at_submit: list[set[str]] = []

    async def submit(self, spec: JobSpec) -> dict[str, Any]:
        self.cancelling_at_submit.append(set(self.cancelling))
        return await super().submit(spec)

    async def cancel(self, job_id: str) -> dict[str, Any]:
        self.cancelling.add(job_id)
        await asyncio.sleep(0.3)
        self.cancelling.discard(job_id)
        return await super().cancel(job_id)


async def test_a_stopped_trial_frees_its_slot_at_once_not_when_its_job_has_ended() -> None:
    client = SlowCancelClient()
    stop = EarlyStop("asha", after=1, reduction=3)
    run = SweepRun(client, TEMPLATE, sweep((0.3, 1.0, 0.31), stop, parallel=1))  # type: ignore[arg-type]
    trials = await run.run()
    assert trials[1].state == "stopped"
    assert "job-1" in client.cancelling_at_submit[2], "trial 2 started while 1 was cancelled"


async def test_the_last_progress_line_says_every_trial_is_done_when_the_last_was_stopped() -> None:
    """The rule stopping the last trial still running ends the sweep: the cell's last progress
    line says so (the browser suite once waited for `6/6 done` that never came)."""
    lines: list[str] = []
    printer = progress_printer(lines.append)
    stop = EarlyStop("asha", after=1, reduction=3)
    run = SweepRun(SlowCancelClient(), TEMPLATE, sweep((0.3, 1.0), stop, parallel=1), None, printer)  # type: ignore[arg-type]
    trials = await run.run()
    assert trials[-1].state == "stopped"
    assert lines[-1].startswith(f"[distrun] sweep {run.id}: 2/2 done, best #0 "), lines


class ListingClient(CurveClient):
    """Also lists its jobs and gives their logs back, as a resumed sweep reads them."""

    def __init__(self) -> None:
        super().__init__()
        self.said: dict[str, list[LogLine]] = {}

    async def submit(self, spec: JobSpec) -> dict[str, Any]:
        job = await super().submit(spec)
        job["created_at"] = float(len(self.jobs))
        return job

    async def follow(
        self, job_id: str, since: Any = None, replicas: list[str] | None = None
    ) -> AsyncIterator[Any]:
        async for event in super().follow(job_id, since, replicas):
            if isinstance(event, LinesEvent):
                self.said.setdefault(job_id, []).extend(event.lines)
            yield event

    async def list_jobs(self) -> list[dict[str, Any]]:
        return [dict(job) for job in self.jobs.values()]

    async def logs(self, job_id: str, replicas: list[str] | None = None) -> LogPage:
        return LogPage(list(self.said.get(job_id, [])), {})


async def test_a_resumed_tpe_sweep_learns_its_ended_trials_and_starts_only_the_rest() -> None:
    client = ListingClient()
    first = SweepRun(client, TEMPLATE, tpe_sweep(8, parallel=1))  # type: ignore[arg-type]

    def interrupt(run: SweepRun) -> None:
        if run.counts().get("succeeded") == 4:
            asyncio.get_running_loop().create_task(run.cancel())

    first.on_change = interrupt
    await first.run()
    assert first.counts() == {"succeeded": 4, "queued": 4}
    again = await resume(client, first.id)  # type: ignore[arg-type]
    assert again.sweep == first.sweep and again.template.name == "fit"
    assert "DISTRUN_SWEEP" not in again.template.env and "DISTRUN_PARAMS" not in again.template.env
    assert [t.params for t in again.trials[:4]] == [t.params for t in first.trials[:4]]
    assert [t.history for t in again.trials[:4]] == [t.history for t in first.trials[:4]]
    trials = await again.run()
    assert [t.state for t in trials] == ["succeeded"] * 8
    assert len(client.jobs) == 8, "the four ended trials were not run again"
    assert [sweep_of(job) for job in client.jobs.values()] == [(first.id, n) for n in range(8)]
    assert [t.origin for t in trials[4:]] == ["tpe"] * 4, "the model learned the first four"


async def test_resuming_a_sweep_no_job_names_is_a_clear_error() -> None:
    with pytest.raises(NotFound, match="no sweep 'sweep-nope' among your jobs"):
        await resume(ListingClient(), "sweep-nope")  # type: ignore[arg-type]


async def test_a_resumed_sweep_follows_a_trial_its_stopped_runner_left_running() -> None:
    client = ListingClient()
    spec = tpe_sweep(5, parallel=1)
    first = SweepRun(client, TEMPLATE, spec)  # type: ignore[arg-type]

    def interrupt(run: SweepRun) -> None:
        if run.counts().get("succeeded") == 3:
            asyncio.get_running_loop().create_task(run.cancel())

    first.on_change = interrupt
    await first.run()
    # The runner's process died while trial 3 ran: its job goes on, followed by nobody.
    left = Trial(3, {"lr": 0.31}, origin="tpe")
    await client.submit(trial_spec(TEMPLATE, spec, first.id, left))
    again = await resume(client, first.id)  # type: ignore[arg-type]
    assert again.trials[3].state == "running" and again.trials[3].job_id == "job-3"
    trials = await again.run()
    assert [t.state for t in trials] == ["succeeded"] * 5
    assert len(client.jobs) == 5, "the running trial was followed, not started again"
    assert trials[3].params == {"lr": 0.31} and trials[3].history[-1][0] == 9, "read whole"
