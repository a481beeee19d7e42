"""Why a job is not running yet, in words, as the log websocket's status events say it (what the
sidebar shows): from pod status (scheduling, starting, image pulls as the kubelet reports
them), from the operator's events when there are no pods, and from Volcano's PodGroup. The real
Training Operator makes the pods and records the events; the kubelet's image pull (kwok has
none) and Volcano's PodGroup (Volcano runs only in `controllers_cluster`, where
test_engines_on_real_controllers.py checks its reasons through the engine) are made by hand."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes_asyncio import client
from tornado.websocket import WebSocketClientConnection

from distrun.engines.kube.volcano import podgroup_reason

from .cluster import KubeCluster, wait_for
from .controllers import training_operator_for
from .distrun_server import (
    DistrunServer,
    delete_user_jobs,
    engine_config,
    prepare_server_identity,
    receive,
    running,
    user_namespace,
)
from .operator_sim import image_pull_back_off, put_podgroup, wait_for_pod
from .real_operator import WAIT, clear_v1_jobs, get_custom, operator_pods, pods_held

pytestmark = pytest.mark.kubernetes

ALICE_NS = user_namespace("alice")
MASTER_ONLY = "%engine=kubeflow\n%framework=pytorch\n%worker=0\nprint('hi')\n"


@pytest.fixture(scope="module")
def server(kube_cluster: KubeCluster) -> Iterator[DistrunServer]:
    kubeconfig: Path = prepare_server_identity(kube_cluster)
    with running(DistrunServer(engine_config(kubeconfig))) as (started,):
        yield started
    delete_user_jobs(kube_cluster)


@pytest.fixture
def operator(kube_cluster: KubeCluster, operator_namespace: str) -> Iterator[None]:
    """The real Training Operator reconciling alice's namespace during one test (after the
    session's, which serves the webhooks)."""
    with training_operator_for(kube_cluster, ALICE_NS):
        yield


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
    server: DistrunServer, operator: None
) -> None:
    cell = MASTER_ONLY.replace("%worker=0\n", "%worker=0\n%master=1\n%master.gpu=16\n")
    job = await submit(server, cell)  # no node has 16 GPUs
    ws = await stream(server, job["id"])
    reason = await reason_until(ws, lambda r: "Unschedulable" in r)
    assert reason.startswith("master-0: Unschedulable: 0/2 nodes are available")
    assert "nvidia.com/gpu" in reason
    ws.close()


async def test_a_starting_pod_then_an_image_pull_back_off_are_said_as_they_happen(
    server: DistrunServer, kube_cluster: KubeCluster, kube_admin: Any, operator: None
) -> None:
    with pods_held(kube_cluster):  # the operator's pod waits while the test marks it
        job = await submit(server, MASTER_ONLY)
        pod = f"{job['id']}-master-0"
        ws = await stream(server, job["id"])
        await operator_pods(kube_admin, ALICE_NS, job["id"], 1)
        never_starts = {"kwok.distrun.test/start-after": "1h"}  # scheduled, never started
        await client.CoreV1Api(kube_admin).patch_namespaced_pod(
            pod, ALICE_NS, {"metadata": {"annotations": never_starts}}
        )
    reason = await reason_until(ws, lambda r: "starting on node" in r)
    assert reason.startswith("master-0: starting on node kwok-")
    await wait_for_pod(
        kube_admin, ALICE_NS, pod, lambda p: p["spec"].get("nodeName"), "the pod to be bound"
    )
    await image_pull_back_off(kube_admin, ALICE_NS, pod, "pytorch")  # the kubelet's part
    reason = await reason_until(ws, lambda r: "ImagePullBackOff" in r)
    assert reason == ('master-0: ImagePullBackOff: Back-off pulling image "registry.invalid/x:1"')
    status, fetched = await server.call("alice", "distrun", "jobs", job["id"])
    assert status == 200 and fetched["reason"] == reason
    assert fetched["replicas"][0]["reason"].startswith("ImagePullBackOff")
    ws.close()


async def test_the_operators_warning_is_the_reason_while_there_are_no_pods(
    server: DistrunServer, kube_cluster: KubeCluster, kube_admin: Any, operator_namespace: str
) -> None:
    """A ResourceQuota refuses the operator's pods: its FailedCreatePod warning is the reason,
    and a newer one (another quota) replaces it."""
    await clear_v1_jobs(kube_admin, ALICE_NS)  # and their pods: the quota's words count them
    job = await submit(server, MASTER_ONLY)
    pod = f"{job['id']}-master-0"
    ws = await stream(server, job["id"])
    first = await receive(ws)
    assert first is not None and first["job"]["reason"] == (
        "waiting for the controller to create the pods"
    )
    with no_pods_quota(kube_cluster, "no-pods"), training_operator_for(kube_cluster, ALICE_NS):
        reason = await reason_until(ws, lambda r: "FailedCreatePod" in r)
        assert reason == f"FailedCreatePod: {refused(pod, 'no-pods')}"
        # Seen through the follow, so a newer warning can only arrive by its re-reading events.
        with no_pods_quota(kube_cluster, "still-no-pods"):
            remove_quota(kube_cluster, "no-pods")
            reason = await reason_until(ws, lambda r: "still-no-pods" in r)
            assert reason == f"FailedCreatePod: {refused(pod, 'still-no-pods')}"
    ws.close()


def refused(pod: str, quota: str) -> str:
    """The operator's words when the API server refuses it a pod for `quota` (pods: 0)."""
    return (
        f'Error creating: pods "{pod}" is forbidden: exceeded quota: {quota}, '
        "requested: pods=1, used: pods=0, limited: pods=0"
    )


@contextlib.contextmanager
def no_pods_quota(cluster: KubeCluster, name: str) -> Iterator[None]:
    """A ResourceQuota `name` of no pods in alice's namespace, inside the block."""
    body = {"metadata": {"name": name}, "spec": {"hard": {"pods": "0"}}}
    core = kubernetes.client.CoreV1Api(cluster.admin)
    core.create_namespaced_resource_quota(ALICE_NS, body)
    try:
        # Enforced as such once the quota controller has counted its usage.
        wait_for(
            lambda: bool(core.read_namespaced_resource_quota(name, ALICE_NS).status.hard),
            f"quota {name} to be counted",
        )
        yield
    finally:
        remove_quota(cluster, name)


def remove_quota(cluster: KubeCluster, name: str) -> None:
    core = kubernetes.client.CoreV1Api(cluster.admin)
    with contextlib.suppress(kubernetes.client.exceptions.ApiException):
        core.delete_namespaced_resource_quota(name, ALICE_NS)


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
