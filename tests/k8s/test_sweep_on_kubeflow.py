"""A sweep on the Kubeflow engine (issue 16): `distrun sweep`'s runner over the engine, its trials
real PyTorchJobs that the real Training Operator reconciles. kwok plays the containers: each
trial's master "prints" losses set by the trial's own parameter (read back from the job's
environment, as the code would), and the test ends its pods once the sweep has read them."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from distrun.client.engine_client import EngineClient
from distrun.client.sweep_runner import SweepRun
from distrun.core.spec import JobSpec
from distrun.core.sweep import Objective, Param, SweepSpec, Values
from distrun.core.trial_env import PARAMS_ENV, trial_of
from distrun.engines.kube.kubeflow import KubeflowEngine

from .cluster import KubeCluster
from .real_operator import WAIT, submit_with_logs, succeed

pytestmark = pytest.mark.kubernetes

RATES = (0.2, 0.5, 0.1)


class TierClient(EngineClient):
    """The engine client, with each trial's pod logs registered before the operator makes its
    pods, holding the losses its rate gives, and its pods ended once the sweep read them."""

    def __init__(
        self,
        engine: KubeflowEngine,
        cluster: KubeCluster,
        admin: Any,
        namespace: str,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        super().__init__(engine, owner="alice")
        self.kubeflow, self.cluster, self.admin = engine, cluster, admin
        self.namespace, self.monkeypatch = namespace, monkeypatch
        self.submitted: list[float] = []  # when each trial was submitted
        self.ending: list[float] = []  # when the test began to end each trial's pods
        self.ended: list[float] = []  # when they had ended
        self.endings: list[asyncio.Task[None]] = []

    async def submit(self, spec: JobSpec) -> dict[str, Any]:
        rate = json.loads(spec.env[PARAMS_ENV])["lr"]
        losses = tuple(f"step {step} loss={(1 - rate) ** step:.4f}" for step in (1, 2, 3))
        job, _logs = await submit_with_logs(
            self.cluster, self.kubeflow, spec, self.monkeypatch, {"master-0": losses}
        )
        self.submitted.append(time.monotonic())
        self.endings.append(asyncio.create_task(self._end_after_reading(job.id)))
        return job.to_json()

    async def _end_after_reading(self, job_id: str) -> None:
        while len(await self.kubeflow.read_logs(job_id, "alice", replicas={"master-0"})) < 3:
            await asyncio.sleep(0.2)
        self.ending.append(time.monotonic())
        await succeed(self.admin, self.namespace, job_id)
        self.ended.append(time.monotonic())


async def test_a_sweep_on_the_kubeflow_engine_runs_its_trials_as_pytorchjobs_and_finds_the_best(
    kubeflow: KubeflowEngine,
    kube_cluster: KubeCluster,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = TierClient(kubeflow, kube_cluster, kube_admin, operator_namespace, monkeypatch)
    template = JobSpec.from_dict(
        {"framework": "pytorch", "code": "pass\n", "roles": {"worker": {"replicas": 1}}}
    )
    sweep = SweepSpec(
        params=(Param("lr", Values(RATES)),), parallel=2, objective=Objective("loss", "min")
    )
    run = SweepRun(client, template, sweep)
    trials = await asyncio.wait_for(run.run(), 4 * WAIT)
    await asyncio.gather(*client.endings)

    assert [trial.state for trial in trials] == ["succeeded"] * 3
    _first, second, third = client.submitted
    assert second < min(client.ended), "two trials at once"
    assert third > min(client.ending), "the third only once one of them ended"
    best = run.best()
    assert best is not None and best.params == {"lr": 0.5}
    assert run.result(best) == pytest.approx(0.125)
    jobs = [job for job in await kubeflow.list_jobs("alice") if trial_of(job.spec.env)]
    assert sorted(trial_of(job.spec.env) for job in jobs) == [(run.id, n) for n in range(3)]
    assert {job.engine for job in jobs} == {"kubeflow"}
