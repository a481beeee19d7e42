"""Helpers for tests whose pods and job conditions come from the real Training Operator
(fixture `operator_namespace`): the test decides only what a container prints (`pod_log`,
registered under the pod name the operator will give) and how it exits (kwok's annotation)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
from kubernetes_asyncio import client

from distrun.core import jobids
from distrun.core.job import Job
from distrun.core.spec import JobSpec
from distrun.engines.kube.engine import KubeEngine
from distrun.engines.kube.logs import read_ledger

from .cluster import KWOK_LOGS, NODES, KubeCluster, PodLog
from .waiting import eventually

WAIT = 90.0  # seconds: generous, the machine may be loaded
EXIT_ANNOTATION = "kwok.distrun.test/exit-code"
MESSAGE_ANNOTATION = "kwok.distrun.test/message"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
PYTORCHJOBS = "kubeflow.org/v1/pytorchjobs"  # as get_custom names a custom resource
V1_PLURALS = ("pytorchjobs", "tfjobs", "xgboostjobs", "paddlejobs", "jaxjobs", "mpijobs")


async def get_custom(api: Any, namespace: str, group_version_plural: str, name: str) -> Any:
    group, version, plural = group_version_plural.split("/")
    return await client.CustomObjectsApi(api).get_namespaced_custom_object(
        group, version, namespace, plural, name
    )


async def job_pods(api: Any, namespace: str, job_id: str) -> dict[str, Any]:
    """The operator's pods of the job, by replica name (`{role}-{index}`)."""
    listed = await client.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{JOB_NAME_LABEL}={job_id}"
    )
    pods = {}
    for pod in listed.items:
        labels = pod.metadata.labels
        role = labels["training.kubeflow.org/replica-type"]
        index = labels.get("training.kubeflow.org/replica-index", "0")  # MPI's launcher: none
        pods[f"{role}-{index}"] = pod
    return pods


async def running_pods(api: Any, namespace: str, job_id: str, count: int = 2) -> dict[str, Any]:
    """The job's `count` pods by replica, once all run."""
    return await eventually(
        lambda: job_pods(api, namespace, job_id),
        lambda found: (
            len(found) == count and all(p.status.phase == "Running" for p in found.values())
        ),
        "the operator's pods to run",
    )


async def end_pods(
    core: Any, namespace: str, pods: dict[str, Any], exits: dict[str, str] | None = None
) -> None:
    """Has kwok end each replica's container with its exit code (default 0). A pod already
    gone is fine: once the job has ended, the operator deletes the pods still running
    (cleanPodPolicy Running). Failing replicas are patched first, which does not order what
    the operator sees: a job meant to fail should end its failing replicas alone."""
    codes = {replica: (exits or {}).get(replica, "0") for replica in pods}
    for replica in sorted(pods, key=lambda name: codes[name] == "0"):
        await end_pod(core, namespace, pods[replica].metadata.name, codes[replica])


async def end_pod(core: Any, namespace: str, name: str, code: str, message: str = "") -> None:
    """Has kwok end the pod's container with exit code `code` (and `message` as the
    terminated container's message, when given); a pod already gone is fine."""
    annotations = {EXIT_ANNOTATION: code} | ({MESSAGE_ANNOTATION: message} if message else {})
    try:
        await core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": annotations}})
    except client.exceptions.ApiException as error:
        if error.status != 404:
            raise


async def submit_with_logs(
    cluster: KubeCluster,
    engine: KubeEngine,
    job_spec: JobSpec,
    monkeypatch: pytest.MonkeyPatch,
    lines: dict[str, tuple[str, ...]] | None = None,
) -> tuple[Job, dict[str, PodLog]]:
    """alice's job of `job_spec`, with a log registered for every replica's pod before the
    operator makes it (the id is drawn first, then given to the engine, to know the pods'
    names), holding `lines` of the replicas named there."""
    job_id = jobids.new_job_id(job_spec.name)
    namespace = engine.namespace_for("alice")
    logs = {
        replica: cluster.pod_log(namespace, f"{job_id}-{replica}")
        for replica in job_spec.replica_names()
    }
    for replica, written in (lines or {}).items():
        logs[replica].write(*written)
    with monkeypatch.context() as patch:
        patch.setattr(jobids, "new_job_id", lambda _name: job_id)
        job = await engine.submit(job_spec, "alice")
    return job, logs


async def clear_v1_jobs(api: Any, namespace: str) -> None:
    """Deletes every Training Operator v1 job of `namespace` and waits until they are gone
    (with their pods: foreground deletion), so a test there sees only its own."""
    custom = client.CustomObjectsApi(api)
    body = {"propagationPolicy": "Foreground"}
    for plural in V1_PLURALS:
        await custom.delete_collection_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, plural, body=body
        )
    deadline = time.monotonic() + WAIT
    while True:
        left = [
            item["metadata"]["name"]
            for plural in V1_PLURALS
            for item in (
                await custom.list_namespaced_custom_object("kubeflow.org", "v1", namespace, plural)
            )["items"]
        ]
        if not left:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the jobs {left} of {namespace} were never deleted")
        await asyncio.sleep(0.3)


@contextlib.contextmanager
def pods_held(cluster: KubeCluster) -> Iterator[None]:
    """Every node cordoned inside the block: the operator's pods made then stay Pending,
    Unschedulable, until it ends (so a test through a server process, which learns the job's
    id only once it is submitted, registers its pods' logs before they run)."""
    core = kubernetes.client.CoreV1Api(cluster.admin)

    def cordon(unschedulable: bool) -> None:
        for node in NODES:
            core.patch_node(node.name, {"spec": {"unschedulable": unschedulable}})

    cordon(True)
    try:
        yield
    finally:
        cordon(False)


def register_logs(
    cluster: KubeCluster, namespace: str, job_id: str, lines: dict[str, tuple[str, ...]]
) -> dict[str, PodLog]:
    """The logs of the job's pods named in `lines` ("master-0": what it prints first)."""
    logs = {replica: cluster.pod_log(namespace, f"{job_id}-{replica}") for replica in lines}
    for replica, written in lines.items():
        logs[replica].write(*written)
    return logs


async def succeed(api: Any, namespace: str, job_id: str) -> None:
    """Every pod of the job ends with exit code 0, one after the other and the master last
    (each waited for): the operator, which ends the job when its master succeeds, then finds
    no pod still running to delete, and every log stays readable."""
    core = client.CoreV1Api(api)
    pods = await job_pods(api, namespace, job_id)
    for replica in sorted(pods, key=lambda name: name.startswith("master")):
        name = pods[replica].metadata.name
        await end_pod(core, namespace, name, "0")
        deadline = time.monotonic() + WAIT
        while (await core.read_namespaced_pod(name, namespace)).status.phase != "Succeeded":
            if time.monotonic() > deadline:
                raise AssertionError(f"pod {name} never succeeded")
            await asyncio.sleep(0.2)


async def operator_pods(api: Any, namespace: str, job_id: str, count: int) -> dict[str, Any]:
    """The job's pods once the operator has made `count` of them."""
    deadline = time.monotonic() + WAIT
    while len(pods := await job_pods(api, namespace, job_id)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"the operator made {sorted(pods)} of {count} pods")
        await asyncio.sleep(0.2)
    return pods


def fresh_log(cluster: KubeCluster, namespace: str, pod: str) -> PodLog:
    """A new, empty log for the pod named `pod`, for the pod the operator made again under the
    same name (kwok serves a pod's log by its name): the test calls it while that pod waits."""
    custom = kubernetes.client.CustomObjectsApi(cluster.admin)
    group, version, plural = KWOK_LOGS
    logs = custom.get_namespaced_custom_object(group, version, namespace, plural, pod)
    (entry,) = logs["spec"]["logs"]
    old = Path(entry["logsFile"])
    log = PodLog(old.with_name(f"{old.stem}.{len(list(old.parent.iterdir()))}.log"))
    log.path.touch()
    entry["logsFile"] = str(log.path)
    custom.replace_namespaced_custom_object(group, version, namespace, plural, pod, logs)
    return log


async def ledger_counts(api: Any, namespace: str, job_id: str, replica: str) -> list[int]:
    """The line counts of the replica's runs that distrun has recorded in its job's ledger."""
    configmap = await client.CoreV1Api(api).read_namespaced_config_map(
        job_id, namespace, _preload_content=False
    )
    ledger = read_ledger(json.loads(await configmap.read()))
    return [int(lines) for _, lines in ledger.get(replica, [])]
