"""What no controller does in the tier's `kube_cluster`, done by hand: the kubelet's part that
kwok does not simulate (an image pull backing off; a container restarting in its pod, with the
kubelet's current/previous log pair and restartCount, and its end after restarts) through the
pod's status subresource, and Volcano's PodGroup (Volcano runs only in `controllers_cluster`).
The pods and the jobs' conditions and events come from the real Training Operator
(real_operator.py)."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes_asyncio import client

from .cluster import KWOK_LOGS, KubeCluster, PodLog

WAIT = 60.0  # seconds: generous, the machine may be loaded


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


async def read_pod(api: Any, namespace: str, name: str) -> dict[str, Any]:
    response = await client.CoreV1Api(api).read_namespaced_pod(
        name, namespace, _preload_content=False
    )
    return dict(json.loads(await response.read()))


async def wait_for_pod(api: Any, namespace: str, name: str, check: Any, what: str) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        pod = await read_pod(api, namespace, name)
        if check(pod):
            return pod
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; pod status: {pod.get('status')}")
        await asyncio.sleep(0.2)


async def set_container_status(
    api: Any, namespace: str, name: str, container_status: dict[str, Any], phase: str
) -> None:
    """Replace the pod's only container status (and its phase), as the kubelet reports it."""
    pod = await read_pod(api, namespace, name)
    pod["status"]["phase"] = phase
    pod["status"]["containerStatuses"] = [container_status]
    await client.CoreV1Api(api).replace_namespaced_pod_status(name, namespace, pod)


async def image_pull_back_off(api: Any, namespace: str, name: str, container: str) -> None:
    image = "registry.invalid/x:1"
    await set_container_status(
        api,
        namespace,
        name,
        {
            "name": container,
            "image": image,
            "imageID": "",
            "ready": False,
            "started": False,
            "restartCount": 0,
            "state": {
                "waiting": {
                    "reason": "ImagePullBackOff",
                    "message": f'Back-off pulling image "{image}"',
                }
            },
        },
        phase="Pending",
    )


async def restart_container(
    cluster: KubeCluster, api: Any, namespace: str, pod: str, container: str, *new_lines: str
) -> PodLog:
    """The container ends and the kubelet starts it again: the log kwok serves becomes a new
    file (starting with `new_lines`), the old one is served as `previous`, and then the pod's
    status shows the next restartCount with the last run terminated."""
    current = await read_pod(api, namespace, pod)
    (status,) = current["status"]["containerStatuses"]
    restarts = int(status.get("restartCount", 0)) + 1
    old_file, new_log = _swap_logs(cluster, namespace, pod, restarts)
    if new_lines:
        new_log.write(*new_lines)
    await _wait_until_served(api, namespace, pod, container, old_file, new_log.path)
    started = status["state"].get("running", {}).get("startedAt", now())
    await set_container_status(
        api,
        namespace,
        pod,
        {
            **status,
            "restartCount": restarts,
            "lastState": {
                "terminated": {
                    "exitCode": 1,
                    "reason": "Error",
                    "startedAt": started,
                    "finishedAt": now(),
                }
            },
            "state": {"running": {"startedAt": now()}},
        },
        phase="Running",
    )
    return new_log


async def end_restarted_container(api: Any, namespace: str, pod: str, exit_code: int = 0) -> None:
    """The restarted container ends for good and the pod with it, as the kubelet reports it
    (kwok's own exit would report the container as never restarted)."""
    current = await read_pod(api, namespace, pod)
    (status,) = current["status"]["containerStatuses"]
    started = status["state"].get("running", {}).get("startedAt", now())
    reason = "Completed" if exit_code == 0 else "Error"
    ended = {"exitCode": exit_code, "reason": reason, "startedAt": started, "finishedAt": now()}
    await set_container_status(
        api,
        namespace,
        pod,
        {**status, "ready": False, "started": False, "state": {"terminated": ended}},
        phase="Succeeded" if exit_code == 0 else "Failed",
    )


def _swap_logs(
    cluster: KubeCluster, namespace: str, pod: str, restarts: int
) -> tuple[Path, PodLog]:
    custom = kubernetes.client.CustomObjectsApi(cluster.admin)
    group, version, plural = KWOK_LOGS
    logs = custom.get_namespaced_custom_object(group, version, namespace, plural, pod)
    (entry,) = logs["spec"]["logs"]
    old_file = Path(entry["logsFile"])
    new_log = PodLog(old_file.with_name(f"{old_file.stem}.restart-{restarts}.log"))
    new_log.path.touch()
    entry["previousLogsFile"], entry["logsFile"] = str(old_file), str(new_log.path)
    custom.replace_namespaced_custom_object(group, version, namespace, plural, pod, logs)
    return old_file, new_log


async def _wait_until_served(
    api: Any, namespace: str, pod: str, container: str, previous: Path, current: Path
) -> None:
    """kwok learns of the swap through a watch; the kubelet's switch is atomic, so wait."""
    core = client.CoreV1Api(api)

    async def served(is_previous: bool) -> str:
        try:
            text = await core.read_namespaced_pod_log(
                pod, namespace, container=container, previous=is_previous
            )
        except client.exceptions.ApiException:
            return "(not served)"
        return str(text)

    deadline = time.monotonic() + WAIT
    while True:
        old, new = await served(True), await served(False)
        if old == _messages(previous) and new == _messages(current):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"kwok never served the swapped logs: {old!r}, {new!r}")
        await asyncio.sleep(0.2)


def _messages(path: Path) -> str:
    """What the API serves of a CRI log file without timestamps: the messages, one a line."""
    lines = path.read_text().splitlines()
    return "".join(line.split(" ", 3)[3] + "\n" for line in lines)


PODGROUPS = ("scheduling.volcano.sh", "v1beta1", "podgroups")


async def put_podgroup(
    api: Any, job: dict[str, Any], phase: str, unschedulable: str | None = None
) -> None:
    """The PodGroup the Volcano job controller keeps for a job (`{name}-{uid}`), in `phase`,
    with the scheduler's Unschedulable condition when given (PodGroups have no status
    subresource: the status is part of the object)."""
    meta = job["metadata"]
    name = f"{meta['name']}-{meta['uid']}"
    conditions = []
    if unschedulable:
        conditions.append(
            {
                "type": "Unschedulable",
                "status": "True",
                "reason": "NotEnoughResources",
                "message": unschedulable,
                "lastTransitionTime": now(),
                "transitionID": "t1",
            }
        )
    body = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "ownerReferences": [
                {
                    "apiVersion": job["apiVersion"],
                    "kind": job["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"minMember": job["spec"]["minAvailable"], "queue": "default"},
        "status": {"phase": phase, "conditions": conditions},
    }
    custom = client.CustomObjectsApi(api)
    group, version, plural = PODGROUPS
    try:
        existing = await custom.get_namespaced_custom_object(
            group, version, meta["namespace"], plural, name
        )
    except client.exceptions.ApiException as error:
        if error.status != 404:
            raise
        await custom.create_namespaced_custom_object(
            group, version, meta["namespace"], plural, body
        )
        return
    body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
    await custom.replace_namespaced_custom_object(
        group, version, meta["namespace"], plural, name, body
    )
