"""kube-apiserver restarts while distrun follows a job (in a cluster of this module's own, with
the real Training Operator): every watch and log stream breaks at once, and the job ends while
they are down. The follower must come back by itself, lose no status change and no line, and
repeat none."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from distrun.core import jobids
from distrun.core.job import JobState
from distrun.core.logs import JobUpdate, LogBatch
from distrun.core.spec import JobSpec
from distrun.engines.kube.kubeflow import KubeflowEngine

from .cluster import KubeCluster
from .controllers import start_training_operator

pytestmark = pytest.mark.kubernetes

WAIT = 120.0
NAMESPACE = "apiserver-restart"
JOB_ID = "restarting-api"
REPLICAS = ("master-0", "worker-0")
HALF = 50


@pytest.fixture(scope="module")
def own_cluster(kube_cluster: KubeCluster) -> Iterator[KubeCluster]:
    """A cluster of its own: restarting the session's API server would disturb other tests."""
    with KubeCluster(kube_cluster.binaries) as cluster:
        cluster.create_namespace(NAMESPACE)
        start_training_operator(cluster, cluster.binaries.training_operator, NAMESPACE)
        yield cluster


@pytest.fixture
async def engine(own_cluster: KubeCluster) -> AsyncIterator[KubeflowEngine]:
    async with own_cluster.api_client("admin") as api:
        made = KubeflowEngine(api_client=api, namespace=NAMESPACE)
        yield made
        await made.close()


async def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def test_a_follower_survives_an_apiserver_restart_without_loss_or_repeat(
    own_cluster: KubeCluster, engine: KubeflowEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobids, "new_job_id", lambda _name: JOB_ID)  # to name the pods' logs
    logs = {name: own_cluster.pod_log(NAMESPACE, f"{JOB_ID}-{name}") for name in REPLICAS}
    for name, log in logs.items():
        log.write(*(f"{name} {n}" for n in range(HALF)))
    spec = JobSpec.from_dict(
        {"framework": "pytorch", "code": "", "roles": {"master": {"replicas": 1},
                                                         "worker": {"replicas": 1}}}
    )  # fmt: skip
    await engine.submit(spec, "alice")
    seen: dict[str, list[tuple[int, str]]] = {name: [] for name in REPLICAS}
    states: list[JobState] = []

    async def follow() -> None:
        async for event in engine.follow(JOB_ID, "alice"):
            if isinstance(event, LogBatch):
                seen_lines = [(line.replica, line.seq, line.text) for line in event.lines]
                for replica, seq, text in seen_lines:
                    seen[replica].append((seq, text))
            elif isinstance(event, JobUpdate):
                states.append(event.job.state)

    follower = asyncio.create_task(follow())
    await until(lambda: all(len(lines) >= HALF for lines in seen.values()), "the first half")
    # kwok ends both pods 2 s from now: while kube-apiserver is down (for 4 s) or just after.
    async with own_cluster.api_client("admin") as api:
        core = client.CoreV1Api(api)
        end = {"kwok.distrun.test/exit-code": "0", "kwok.distrun.test/run-for": "2s"}
        for name in REPLICAS:
            patch = {"metadata": {"annotations": end}}
            await core.patch_namespaced_pod(f"{JOB_ID}-{name}", NAMESPACE, patch)
    restart = asyncio.create_task(asyncio.to_thread(own_cluster.restart_apiserver, 4.0))
    await asyncio.sleep(1.0)
    for name, log in logs.items():  # printed while nothing can be read
        log.write(*(f"{name} {n}" for n in range(HALF, 2 * HALF)))
    await restart
    try:
        await asyncio.wait_for(follower, WAIT)
    except TimeoutError:
        job = await engine.get_job(JOB_ID, "alice")
        counts = {name: len(lines) for name, lines in seen.items()}
        raise AssertionError(f"the follower did not end: {states=} {counts=} {job=}") from None
    assert states[-1] == JobState.SUCCEEDED
    for name in REPLICAS:
        assert seen[name] == [(n, f"{name} {n}") for n in range(2 * HALF)], name
    assert (await engine.get_job(JOB_ID, "alice")).state == JobState.SUCCEEDED
