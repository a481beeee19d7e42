"""Why a job is not running yet, in words, as the log websocket's status events say it (what the
sidebar shows): from pod status (scheduling, starting, image pulls as the kubelet reports
them), from the operator's events when there are no pods, and from Volcano's PodGroup."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.websocket import WebSocketClientConnection

from distrun.engines.kube.volcano import podgroup_reason

from .cluster import KubeCluster
from .distrun_server import (
    DistrunServer,
    delete_user_jobs,
    engine_config,
    prepare_server_identity,
    receive,
    running,
    user_namespace,
)
from .operator_sim import (
    WAIT,
    create_pod,
    get_custom,
    image_pull_back_off,
    put_podgroup,
    pytorch_pod_labels,
    wait_for_pod,
    warning_event,
)

pytestmark = pytest.mark.kubernetes

ALICE_NS = user_namespace("alice")
MASTER_ONLY = "%engine=kubeflow\n%framework=pytorch\n%worker=0\nprint('hi')\n"


@pytest.fixture(scope="module")
def server(kube_cluster: KubeCluster) -> Iterator[DistrunServer]:
    kubeconfig: Path = prepare_server_identity(kube_cluster)
    with running(DistrunServer(engine_config(kubeconfig))) as (started,):
        yield started
    delete_user_jobs(kube_cluster)


async def submit(server: DistrunServer, cell: str) -> dict[str, Any]:
    status, job = await server.call("alice", "distrun", "jobs", method="POST", body={"cell": cell})
    assert status == 201, job
    return dict(job)


async def stream(server: DistrunServer, job_id: str) -> WebSocketClientConnection:
    return await server.websocket("alice", "distrun", "jobs", job_id, "logs", "stream")


async def reason_until(ws: WebSocketClientConnection, check: Any) -> str:
    """The job's reason from the first status event where `check(reason)` holds."""
    deadline = time.monotonic() + WAIT
    reasons = []
    while time.monotonic() < deadline:
        message = await receive(ws)
        assert message is not None, f"the websocket closed; reasons so far: {reasons}"
        if message["type"] == "status":
            job = message["job"]
            assert job["state"] == "pending", job
            reasons.append(job["reason"])
            if check(job["reason"]):
                return str(job["reason"])
    raise AssertionError(f"no status event with the expected reason; got {reasons}")


async def test_an_unschedulable_pod_is_named_with_the_schedulers_words(
    server: DistrunServer, kube_cluster: KubeCluster, kube_admin: Any
) -> None:
    job = await submit(server, MASTER_ONLY)
    ws = await stream(server, job["id"])
    owner = await get_custom(kube_admin, ALICE_NS, "kubeflow.org/v1/pytorchjobs", job["id"])
    await create_pod(
        kube_cluster,
        kube_admin,
        owner,
        name=f"{job['id']}-master-0",
        labels=pytorch_pod_labels(job["id"], "master", 0),
        container="pytorch",
        gpus=64,  # more than any node has
    )
    reason = await reason_until(ws, lambda r: "Unschedulable" in r)
    assert reason.startswith("master-0: Unschedulable: 0/2 nodes are available")
    assert "nvidia.com/gpu" in reason
    ws.close()


async def test_a_starting_pod_then_an_image_pull_back_off_are_said_as_they_happen(
    server: DistrunServer, kube_cluster: KubeCluster, kube_admin: Any
) -> None:
    job = await submit(server, MASTER_ONLY)
    pod = f"{job['id']}-master-0"
    ws = await stream(server, job["id"])
    owner = await get_custom(kube_admin, ALICE_NS, "kubeflow.org/v1/pytorchjobs", job["id"])
    await create_pod(
        kube_cluster,
        kube_admin,
        owner,
        name=pod,
        labels=pytorch_pod_labels(job["id"], "master", 0),
        container="pytorch",
        annotations={"kwok.distrun.test/start-after": "1h"},  # scheduled, never started
    )
    reason = await reason_until(ws, lambda r: "starting on node" in r)
    assert reason.startswith("master-0: starting on node kwok-")
    await wait_for_pod(
        kube_admin, ALICE_NS, pod, lambda p: p["spec"].get("nodeName"), "the pod to be bound"
    )
    await image_pull_back_off(kube_admin, ALICE_NS, pod, "pytorch")
    reason = await reason_until(ws, lambda r: "ImagePullBackOff" in r)
    assert reason == ('master-0: ImagePullBackOff: Back-off pulling image "registry.invalid/x:1"')
    status, fetched = await server.call("alice", "distrun", "jobs", job["id"])
    assert status == 200 and fetched["reason"] == reason
    assert fetched["replicas"][0]["reason"].startswith("ImagePullBackOff")
    ws.close()


async def test_the_operators_warning_is_the_reason_while_there_are_no_pods(
    server: DistrunServer, kube_admin: Any
) -> None:
    job = await submit(server, MASTER_ONLY)
    ws = await stream(server, job["id"])
    first = await receive(ws)
    assert first is not None and first["job"]["reason"] == (
        "waiting for the controller to create the pods"
    )
    owner = await get_custom(kube_admin, ALICE_NS, "kubeflow.org/v1/pytorchjobs", job["id"])
    quota = 'pods "x-master-0" is forbidden: exceeded quota: gpus, requested: nvidia.com/gpu=8'
    await warning_event(kube_admin, owner, "FailedCreatePod", quota)
    reason = await reason_until(ws, lambda r: "FailedCreatePod" in r)
    assert reason == f"FailedCreatePod: {quota}"
    # Seen through the follow, so a newer warning can only arrive by its re-reading events.
    await warning_event(kube_admin, owner, "FailedCreatePod", "admission webhook denied", 5)
    reason = await reason_until(ws, lambda r: "webhook" in r)
    assert reason == "FailedCreatePod: admission webhook denied"
    ws.close()


async def test_a_volcano_gang_says_it_waits_for_its_queue_then_for_placement(
    server: DistrunServer, kube_admin: Any
) -> None:
    cell = "%engine=volcano\n%framework=pytorch\n%worker=2\nprint('hi')\n"
    job = await submit(server, cell)
    ws = await stream(server, job["id"])
    owner = await get_custom(kube_admin, ALICE_NS, "batch.volcano.sh/v1alpha1/jobs", job["id"])
    await put_podgroup(
        kube_admin, owner, "Pending", unschedulable="queue resource quota insufficient"
    )
    reason = await reason_until(ws, lambda r: "queue" in r)
    assert reason == (
        "waiting for queue default to admit all 3 replicas (gang scheduling): "
        "queue resource quota insufficient"
    )
    await put_podgroup(kube_admin, owner, "Inqueue")
    reason = await reason_until(ws, lambda r: r.startswith("admitted"))
    assert reason == "admitted to queue default; waiting until all 3 replicas can be placed at once"
    await put_podgroup(kube_admin, owner, "Running")
    reason = await reason_until(ws, lambda r: "queue" not in r)
    assert reason == "waiting for the controller to create the pods"
    ws.close()


def test_a_podgroup_with_no_status_yet_counts_as_pending() -> None:
    group = {"spec": {"minMember": 4, "queue": "research"}}
    assert podgroup_reason(group) == (
        "waiting for queue research to admit all 4 replicas (gang scheduling)"
    )
    assert podgroup_reason({"status": {"phase": "Completed"}}) is None
