"""The sweep resource and the metrics comparison through a real jupyter_server: a sweep read from
its trials alone (jobs submitted as the sweep runner submits them), their objective read from
the first replica's log, cancel and delete reaching every trial, one user never reaching
another's sweep. The document checks run in test_openapi.py's manner."""

from typing import Any

import pytest

from distrun.client.sweep_runner import Trial, trial_spec
from distrun.core.job import JobState
from distrun.core.spec import JobSpec
from distrun.core.sweep import (
    EarlyStop,
    Objective,
    Param,
    SweepSpec,
    Uniform,
    Values,
    to_dict,
)
from tests.fake_engine import FakeEngine
from tests.server.conftest import BOB, CAROL
from tests.server.test_rest import expect_error

TEMPLATE = JobSpec.from_dict({"framework": "pytorch", "code": "pass\n", "name": "fit"})
SWEEP = SweepSpec(
    params=(Param("lr", Values((0.1, 0.2, 0.3, 0.4, 0.5))),),
    objective=Objective("loss", "min"),
    early_stop=EarlyStop("median", after=2, min_trials=2),
)


async def start_trial(api: Any, number: int, lr: float, **kwargs: Any) -> dict[str, Any]:
    spec = trial_spec(TEMPLATE, SWEEP, "sweep-abc123", Trial(number, {"lr": lr}))
    job: dict[str, Any] = await api("jobs", method="POST", body={"spec": spec.to_dict()}, **kwargs)
    return job


def report(engine: FakeEngine, job_id: str, losses: list[float]) -> None:
    texts = [f"step {step} loss={loss}" for step, loss in enumerate(losses, 1)]
    engine.emit(job_id, "master-0", *texts)
    engine.emit(job_id, "worker-0", "loss=0.0")  # only the first replica counts


@pytest.fixture
async def three_trials(api: Any, fake_engine: FakeEngine) -> list[dict[str, Any]]:
    """Trials 0-2 of five: #0 and #1 done, #2 cancelled behind them (as the median rule does)."""
    trials = [await start_trial(api, n, lr) for n, lr in enumerate((0.1, 0.2, 0.3))]
    report(fake_engine, trials[0]["id"], [3.0, 2.0, 1.5])
    report(fake_engine, trials[1]["id"], [3.0, 1.0, 0.5])
    report(fake_engine, trials[2]["id"], [4.0, 3.5])
    fake_engine.finish(trials[0]["id"])
    fake_engine.finish(trials[1]["id"])
    fake_engine.finish(trials[2]["id"], JobState.CANCELLED)
    await api("jobs", method="POST", body={"spec": TEMPLATE.to_dict()})  # not a trial
    return trials


async def test_a_sweep_reads_from_its_trials_with_the_best_and_the_stopped_one(api, three_trials):
    sweep = await api("sweeps", "sweep-abc123")
    assert (sweep["id"], sweep["name"], sweep["trials_total"]) == ("sweep-abc123", "fit", 5)
    assert sweep["counts"] == {"succeeded": 2, "stopped": 1, "queued": 2}
    assert sweep["best"] == 1 and not sweep["ended"]
    assert sweep["definition"]["objective"] == {"metric": "loss", "goal": "min", "read": "last"}
    rows = {row["number"]: row for row in sweep["trials"]}
    assert [rows[n]["objective"] for n in (0, 1, 2)] == [1.5, 0.5, 3.5]
    assert rows[1]["params"] == {"lr": 0.2} and rows[1]["job_id"] == three_trials[1]["id"]
    assert rows[1]["series"]["loss"] == [[1.0, 3.0], [2.0, 1.0], [3.0, 0.5]]
    assert rows[1]["metrics"] == {"loss": 0.5}


async def test_a_tpe_sweep_says_which_trials_the_model_proposed_and_where_asha_stopped(
    api, fake_engine
):
    sweep = SweepSpec(
        params=(Param("lr", Uniform(0.0, 1.0)),),
        search="tpe",
        trials=6,
        objective=Objective("loss", "min"),
        early_stop=EarlyStop("asha", after=1, reduction=3),
    )
    losses = {0.1: [1.0, 0.8, 0.5, 0.4], 0.2: [0.9, 0.6, 0.3], 0.3: [2.0], 0.4: [0.95, 0.9, 0.85]}
    jobs = []
    for number, (lr, reported) in enumerate(losses.items()):
        trial = Trial(number, {"lr": lr}, origin="random" if number < 2 else "tpe")
        spec = trial_spec(TEMPLATE, sweep, "sweep-tpe", trial)
        jobs.append(await api("jobs", method="POST", body={"spec": spec.to_dict()}))
        report(fake_engine, jobs[-1]["id"], reported)
    fake_engine.finish(jobs[0]["id"])
    fake_engine.finish(jobs[1]["id"])
    fake_engine.finish(jobs[2]["id"], JobState.CANCELLED)  # the worst at step 1
    fake_engine.finish(jobs[3]["id"], JobState.CANCELLED)  # the worst at step 3
    rows = {row["number"]: row for row in (await api("sweeps", "sweep-tpe"))["trials"]}
    assert [rows[n]["origin"] for n in range(4)] == ["random", "random", "tpe", "tpe"]
    assert [rows[n]["state"] for n in range(4)] == ["succeeded", "succeeded", "stopped", "stopped"]
    assert [(rows[n]["rung"], rows[n]["rung_step"]) for n in range(4)] == [
        (None, None),
        (None, None),
        (0, 1),
        (1, 3),
    ]


async def test_a_running_sweep_polled_again_reads_only_the_lines_written_since(
    api, fake_engine, monkeypatch
):
    running = await start_trial(api, 0, 0.1)
    report(fake_engine, running["id"], [3.0, 2.0])
    returned: list[int] = []
    read_logs = fake_engine.read_logs

    async def counted(*args: Any, **kwargs: Any) -> Any:
        lines = await read_logs(*args, **kwargs)
        returned.append(len(lines))
        return lines

    monkeypatch.setattr(fake_engine, "read_logs", counted)
    first = await api("sweeps", "sweep-abc123")
    assert first["trials"][0]["series"]["loss"] == [[1.0, 3.0], [2.0, 2.0]]
    assert sum(returned) == 2
    returned.clear()
    fake_engine.emit(running["id"], "master-0", "step 3 loss=1.5")
    again = await api("sweeps", "sweep-abc123")
    assert sum(returned) == 1, "only the new line"
    assert again["trials"][0]["series"]["loss"] == [[1.0, 3.0], [2.0, 2.0], [3.0, 1.5]]
    assert (await api("metrics", params={"job": running["id"]}))["jobs"][0]["metrics"] == {
        "loss": 1.5
    }


async def test_the_sweep_list_groups_trials_without_reading_logs(api, three_trials):
    body = await api("sweeps")
    assert [sweep["id"] for sweep in body["sweeps"]] == ["sweep-abc123"]
    (sweep,) = body["sweeps"]
    assert [row["number"] for row in sweep["trials"]] == [0, 1, 2]
    assert all("series" not in row for row in sweep["trials"])
    assert sweep["counts"]["queued"] == 2


async def test_cancel_stops_every_running_trial_and_delete_removes_them_all(api, fake_engine):
    trials = [await start_trial(api, n, lr) for n, lr in enumerate((0.1, 0.2))]
    fake_engine.finish(trials[0]["id"])
    sweep = await api("sweeps", "sweep-abc123", "cancel", method="POST", body={})
    assert [row["state"] for row in sweep["trials"]] == ["succeeded", "cancelled"]
    assert fake_engine.job(trials[1]["id"]).state == JobState.CANCELLED
    await api("sweeps", "sweep-abc123", method="DELETE")
    assert (await api("jobs"))["jobs"] == []
    await expect_error(api, 404, "sweeps", "sweep-abc123")


async def test_one_user_never_reaches_anothers_sweep(api, three_trials, fake_engine):
    assert (await api("sweeps", headers=BOB))["sweeps"] == []
    for method, path in (("GET", ()), ("DELETE", ()), ("POST", ("cancel",))):
        body = {} if method == "POST" else None
        await expect_error(
            api, 404, "sweeps", "sweep-abc123", *path, method=method, body=body, headers=BOB
        )
    await expect_error(api, 404, "metrics", params={"job": three_trials[0]["id"]}, headers=BOB)
    await expect_error(
        api, 403, "sweeps", "sweep-abc123", "cancel", method="POST", body={}, headers=CAROL
    )
    assert fake_engine.job(three_trials[0]["id"]).state == JobState.SUCCEEDED


async def test_jobs_metrics_side_by_side(api, checked, three_trials):
    ids = [trial["id"] for trial in three_trials[:2]]
    status, body = await checked("GET", f"/distrun/metrics?job={ids[0]}&job={ids[1]}")
    assert status == 200
    assert [job["id"] for job in body["jobs"]] == ids
    assert body["jobs"][1]["series"]["loss"][-1] == [3.0, 0.5]
    message = (await expect_error(api, 400, "metrics"))["message"]
    assert "?job=<id>" in message
    await expect_error(api, 404, "metrics", params={"job": "no-such-job"})


async def test_a_bad_sweep_id_is_a_404_with_a_message(api):
    body = await expect_error(api, 404, "sweeps", "NOT..valid")
    assert "no sweep" in body["message"]


async def test_sweep_responses_match_the_document(checked, three_trials):
    assert (await checked("GET", "/distrun/sweeps"))[0] == 200
    assert (await checked("GET", "/distrun/sweeps/sweep-abc123"))[0] == 200
    job = three_trials[0]["id"]
    assert (await checked("GET", f"/distrun/metrics?job={job}"))[0] == 200
    assert (await checked("GET", "/distrun/metrics", valid_request=False))[0] == 400
    assert (await checked("POST", "/distrun/sweeps/sweep-abc123/cancel", {}))[0] == 200
    assert await checked("DELETE", "/distrun/sweeps/sweep-abc123") == (204, "")
    assert (await checked("GET", "/distrun/sweeps/sweep-abc123"))[0] == 404


class FakeKubeflow(FakeEngine):
    """An engine that hands sweeps to a (recorded) Katib."""

    def __init__(self) -> None:
        super().__init__("kubeflow")
        self.experiments: list[tuple[JobSpec, SweepSpec, str]] = []

    async def submit_experiment(self, spec: JobSpec, sweep: SweepSpec, owner: str) -> Any:
        self.experiments.append((spec, sweep, owner))
        return {"metadata": {"name": "fit-ab12c", "namespace": f"team-{owner}"}}


@pytest.fixture
def kubeflow() -> FakeKubeflow:
    return FakeKubeflow()


@pytest.fixture
def jp_server_config(jp_server_config, kubeflow):
    factories = jp_server_config["DistrunApp"]["engine_factories"]
    return {
        **jp_server_config,
        "DistrunApp": {"engine_factories": {**factories, "kubeflow": lambda app: kubeflow}},
    }


SWEEP_CELL = "%framework=pytorch\n%engine=kubeflow\n%sweep.lr=0.1,0.01\n%objective=loss:min\npass\n"


async def test_a_sweep_cell_goes_to_katib_on_a_kubeflow_engine(checked, kubeflow):
    status, body = await checked("POST", "/distrun/sweeps", {"cell": SWEEP_CELL, "via": "katib"})
    assert (status, body) == (
        201,
        {
            "via": "katib",
            "engine": "kubeflow",
            "namespace": "team-alice",
            "experiment": "fit-ab12c",
        },
    )
    ((spec, sweep, owner),) = kubeflow.experiments
    assert (spec.framework, owner, sweep.params[0].name) == ("pytorch", "alice", "lr")
    assert "sweep" not in spec.code and "pass" in spec.code


async def test_what_the_server_does_not_run_as_a_sweep_is_a_400_saying_what_to_do(
    api, checked, kubeflow
):
    status, body = await checked(
        "POST", "/distrun/sweeps", {"cell": SWEEP_CELL}, valid_request=False
    )
    assert status == 400 and "distrun sweep FILE" in body["message"]
    local = SWEEP_CELL.replace("%engine=kubeflow\n", "")
    status, body = await checked("POST", "/distrun/sweeps", {"cell": local, "via": "katib"})
    assert status == 400 and "only a Kubeflow engine" in body["message"]
    no_sweep = "%framework=pytorch\n%engine=kubeflow\npass\n"
    status, body = await checked("POST", "/distrun/sweeps", {"cell": no_sweep, "via": "katib"})
    assert status == 400 and "%sweep.lr=" in body["message"]
    body = await expect_error(api, 400, "jobs", method="POST", body={"cell": SWEEP_CELL})
    assert "Run distributed" in body["message"]
    assert kubeflow.experiments == []


async def test_a_spec_and_a_sweep_go_to_katib_as_distrun_sweep_sends_them(checked, kubeflow):
    spec = {**TEMPLATE.to_dict(), "engine": "kubeflow"}
    body = {"spec": spec, "sweep": to_dict(SWEEP), "via": "katib"}
    status, created = await checked("POST", "/distrun/sweeps", body)
    assert status == 201 and created["experiment"] == "fit-ab12c"
    ((sent_spec, sent_sweep, _),) = kubeflow.experiments
    assert sent_spec.name == "fit" and sent_sweep == SWEEP
    bad = {**body, "sweep": {"params": {"lr": {"uniform": [1, 0]}}}}
    status, refused = await checked("POST", "/distrun/sweeps", bad, valid_request=False)
    assert status == 400 and "lr" in refused["message"]
