"""A busy cluster, where a single object's resourceVersion expires: a followed job's watch must
recover from 410 Gone with one list, not a loop (in a cluster of this module's own: its API
server is restarted).

On 2026-11-26 the Kubernetes soak at 1,200 pods showed about 12,000 `GET pytorchjobs` and as many
`WATCH pytorchjobs` in 30 s: a job's feed watched from the job object's own version, which on a
busy cluster is soon too old; the watch answered 410 at once, the feed read the object again
(the same old version) and watched again, with no pause. Here many objects change, so that the
job's own version falls out of the API server's window (checked directly), and the API server
restarts, so that every watch must start again; the requests for PyTorchJobs the API server
serves afterwards are counted by the API server itself."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from distrun.core import jobids
from distrun.core.job import Job, JobState
from distrun.core.logs import JobUpdate
from distrun.core.spec import JobSpec
from distrun.engines.kube.kubeflow import KubeflowEngine

from .apiserver_metrics import apiserver_load
from .cluster import KubeCluster

pytestmark = pytest.mark.kubernetes

WAIT = 120.0
NAMESPACE = "watch-expiry"
JOB_ID = "expiring-job"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
CHANGES = 300  # writes to other objects after the job's last one
SETTLE_SECONDS = 10.0  # after the restart, what the follower asks of the API server


@pytest.fixture(scope="module")
def own_cluster(kube_cluster: KubeCluster) -> Iterator[KubeCluster]:
    """A cluster of its own, without the Training Operator: nothing but distrun (and the
    control plane's metadata informers) asks for PyTorchJobs, and the job changes only when
    the test changes it."""
    with KubeCluster(kube_cluster.binaries) as cluster:
        cluster.create_namespace(NAMESPACE)
        yield cluster


@pytest.fixture
async def admin(own_cluster: KubeCluster) -> AsyncIterator[Any]:
    async with own_cluster.api_client("admin") as api:
        yield api


async def busy(api: Any, changes: int) -> None:
    """`changes` writes to other objects (ConfigMaps), each a new resourceVersion."""
    core = client.CoreV1Api(api)
    body = {"metadata": {"name": "churn"}, "data": {"n": "0"}}
    await core.create_namespaced_config_map(NAMESPACE, body)
    for n in range(changes):
        await core.patch_namespaced_config_map("churn", NAMESPACE, {"data": {"n": str(n)}})


async def watch_answer(api: Any, version: str) -> dict[str, Any]:
    """The first event of a watch of PyTorchJobs from `version`, once the API server serves
    watches again (right after a restart it answers 429 while its watch cache fills)."""
    async with asyncio.timeout(WAIT):
        while True:
            answer = await first_watch_event(api, version)
            if answer.get("code") != 429:
                return answer
            await asyncio.sleep(answer.get("details", {}).get("retryAfterSeconds", 1))


async def first_watch_event(api: Any, version: str) -> dict[str, Any]:
    custom = client.CustomObjectsApi(api)
    response = await custom.list_namespaced_custom_object(
        GROUP,
        VERSION,
        NAMESPACE,
        PLURAL,
        watch=True,
        resource_version=version,
        timeout_seconds=5,
        _preload_content=False,
    )
    try:
        line = await asyncio.wait_for(response.content.readline(), 10)
    finally:
        response.release()
    return dict(json.loads(line)) if line.strip() else {}


async def mark_succeeded(api: Any) -> None:
    custom = client.CustomObjectsApi(api)
    obj = await custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, JOB_ID)
    now = "2026-11-26T00:00:00Z"
    condition = {"type": "Succeeded", "status": "True", "reason": "JobSucceeded",
                 "message": "done", "lastUpdateTime": now, "lastTransitionTime": now}  # fmt: skip
    obj["status"] = {"conditions": [condition], "startTime": now, "completionTime": now}
    await custom.replace_namespaced_custom_object_status(
        GROUP, VERSION, NAMESPACE, PLURAL, JOB_ID, obj
    )


def pytorchjob_requests(before: Any, after: Any) -> dict[str, int]:
    served = after.requests - before.requests
    return {
        verb: served[(verb, PLURAL, "")] for verb in ("GET", "LIST", "WATCH")
    }  # fmt: skip


async def test_a_followed_job_whose_version_expired_recovers_with_one_list_not_a_loop(
    own_cluster: KubeCluster, admin: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobids, "new_job_id", lambda _name: JOB_ID)
    engine = KubeflowEngine(api_client=admin, namespace=NAMESPACE)
    spec = JobSpec.from_dict(
        {"framework": "pytorch", "code": "", "roles": {"worker": {"replicas": 1}}}
    )
    await engine.submit(spec, "alice")
    jobs: list[Job] = []

    async def follow() -> None:
        async for event in engine.follow(JOB_ID, "alice"):
            if isinstance(event, JobUpdate):
                jobs.append(event.job)

    follower = asyncio.create_task(follow())
    try:
        async with asyncio.timeout(WAIT):
            while not jobs:
                await asyncio.sleep(0.1)
        custom = client.CustomObjectsApi(admin)
        obj = await custom.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, JOB_ID)
        own_version = obj["metadata"]["resourceVersion"]
        await busy(admin, CHANGES)
        await asyncio.to_thread(own_cluster.restart_apiserver, 1.0)
        answer = await watch_answer(admin, own_version)
        assert answer.get("type") == "ERROR" and answer["object"].get("code") == 410, (
            f"the job's own version should have expired on this busy cluster: {answer}"
        )
        before = await apiserver_load(admin)
        await asyncio.sleep(SETTLE_SECONDS)
        after = await apiserver_load(admin)
        served = pytorchjob_requests(before, after)
        # distrun's job watch: one list after its 410 and a watch or two; the control plane's
        # metadata informers (garbage collector, quota) a list and a watch each at most.
        assert served["GET"] <= 2 and served["LIST"] <= 3 and served["WATCH"] <= 6, (
            f"PyTorchJob requests in {SETTLE_SECONDS:.0f} s after the restart: {served}"
        )
        await mark_succeeded(admin)
        await asyncio.wait_for(follower, WAIT)
        assert jobs[-1].state == JobState.SUCCEEDED, "the recovered watch saw the job end"
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
        await engine.close()
