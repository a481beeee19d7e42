"""Smoke tests of the test cluster itself: the real schemas, controllers, RBAC and kwok pods that
the Kubernetes engines' tests stand on."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from .binaries import CRD_SOURCES
from .cluster import KubeCluster
from .waiting import eventually

pytestmark = pytest.mark.kubernetes

WAIT = 60.0  # seconds; generous, the machine may be loaded
CONTAINER = {"name": "main", "image": "registry.invalid/distrun-test:1", "command": ["train"]}


def unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def replica_template(container_name: str) -> dict[str, Any]:
    return {"spec": {"containers": [{**CONTAINER, "name": container_name}]}}


def pytorchjob(name: str, workers: Any = 2) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": replica_template("pytorch"),
                },
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": "Never",
                    "template": replica_template("pytorch"),
                },
            }
        },
    }


def tfjob(name: str, workers: Any = 2) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": workers,
                    "restartPolicy": "Never",
                    "template": replica_template("tensorflow"),
                }
            }
        },
    }


def trainjob(name: str, nodes: Any = 2) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "ClusterTrainingRuntime",
                "name": "torch-distributed",
            },
            "trainer": {"numNodes": nodes, "image": CONTAINER["image"], "command": ["train"]},
        },
    }


def volcano_job(name: str, replicas: Any = 2) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "minAvailable": 2,
            "schedulerName": "volcano",
            "tasks": [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {
                        "spec": {"restartPolicy": "Never", "containers": [CONTAINER]},
                    },
                }
            ],
        },
    }


# kind -> (group, version, plural, manifest builder, path of the replica count in the spec)
JOB_KINDS: dict[str, tuple[str, str, str, Callable[..., dict[str, Any]], tuple[Any, ...]]] = {
    "PyTorchJob": (
        "kubeflow.org",
        "v1",
        "pytorchjobs",
        pytorchjob,
        ("pytorchReplicaSpecs", "Worker", "replicas"),
    ),
    "TFJob": ("kubeflow.org", "v1", "tfjobs", tfjob, ("tfReplicaSpecs", "Worker", "replicas")),
    "TrainJob": (
        "trainer.kubeflow.org",
        "v1alpha1",
        "trainjobs",
        trainjob,
        ("trainer", "numNodes"),
    ),
    "VolcanoJob": ("batch.volcano.sh", "v1alpha1", "jobs", volcano_job, ("tasks", 0, "replicas")),
}


def pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    gpus: int = 0,
) -> dict[str, Any]:
    container: dict[str, Any] = dict(CONTAINER)
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}, "annotations": annotations or {}},
        "spec": {"restartPolicy": "Never", "containers": [container]},
    }


async def gone(read: Callable[[], Any]) -> bool:
    try:
        await read()
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def dig(data: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        data = data[key]
    return data


async def test_every_operator_crd_is_installed_and_established(kube_admin: Any) -> None:
    crds = await client.ApiextensionsV1Api(kube_admin).list_custom_resource_definition()
    established = {
        crd.metadata.name
        for crd in crds.items
        if any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
    }
    expected = {
        name.removesuffix(".yaml").split("_", 1)[1] + "." + name.split("_", 1)[0]
        for source in CRD_SOURCES
        for name in source.files
    }
    assert "pytorchjobs.kubeflow.org" in expected
    assert "clustertrainingruntimes.trainer.kubeflow.org" in expected
    assert "jobs.batch.volcano.sh" in expected
    assert expected <= established


@pytest.mark.parametrize("kind", sorted(JOB_KINDS))
async def test_valid_job_is_accepted_by_the_real_schema(
    kind: str, kube_admin: Any, kube_namespace: str
) -> None:
    group, version, plural, build, replicas_path = JOB_KINDS[kind]
    api = client.CustomObjectsApi(kube_admin)
    name = unique(kind.lower())
    created = await api.create_namespaced_custom_object(
        group, version, kube_namespace, plural, build(name, 3)
    )
    stored = await api.get_namespaced_custom_object(group, version, kube_namespace, plural, name)
    assert created["metadata"]["uid"] == stored["metadata"]["uid"]
    assert dig(stored["spec"], replicas_path) == 3


@pytest.mark.parametrize("kind", sorted(JOB_KINDS))
async def test_replica_count_of_wrong_type_is_rejected_with_422(
    kind: str, kube_admin: Any, kube_namespace: str
) -> None:
    group, version, plural, build, replicas_path = JOB_KINDS[kind]
    api = client.CustomObjectsApi(kube_admin)
    with pytest.raises(ApiException) as rejected:
        await api.create_namespaced_custom_object(
            group, version, kube_namespace, plural, build(unique("bad"), "two")
        )
    assert rejected.value.status == 422
    assert str(replicas_path[-1]) in rejected.value.body
    assert "integer" in rejected.value.body


async def test_pod_runs_succeeds_and_serves_its_log_including_follow(
    kube_cluster: KubeCluster, kube_admin: Any, kube_namespace: str
) -> None:
    core = client.CoreV1Api(kube_admin)
    log = kube_cluster.pod_log(kube_namespace, "trainer")
    log.write("epoch 1 loss=0.9", "epoch 2 loss=0.5")
    annotations = {"kwok.distrun.test/exit-code": "0", "kwok.distrun.test/run-for": "3s"}
    await core.create_namespaced_pod(kube_namespace, pod("trainer", annotations=annotations))

    running = await eventually(
        lambda: core.read_namespaced_pod("trainer", kube_namespace),
        lambda p: p.status.phase in ("Running", "Succeeded"),
        "Running",
    )
    assert running.spec.node_name in ("kwok-node-0", "kwok-gpu-node-1")

    text = await core.read_namespaced_pod_log("trainer", kube_namespace)
    assert text.splitlines() == ["epoch 1 loss=0.9", "epoch 2 loss=0.5"]

    stream = await core.read_namespaced_pod_log(
        "trainer", kube_namespace, follow=True, _preload_content=False
    )
    try:

        async def next_line() -> str:
            raw: bytes = await asyncio.wait_for(stream.content.readline(), WAIT)
            return raw.decode().rstrip("\n")

        assert [await next_line(), await next_line()] == ["epoch 1 loss=0.9", "epoch 2 loss=0.5"]
        log.write("epoch 3 loss=0.2")
        assert await next_line() == "epoch 3 loss=0.2"
    finally:
        stream.close()

    finished = await eventually(
        lambda: core.read_namespaced_pod("trainer", kube_namespace),
        lambda p: p.status.phase == "Succeeded",
        "Succeeded",
    )
    terminated = finished.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (0, "Completed")


async def test_pod_with_nonzero_exit_code_annotation_fails_with_that_code(
    kube_admin: Any, kube_namespace: str
) -> None:
    core = client.CoreV1Api(kube_admin)
    annotations = {"kwok.distrun.test/exit-code": "3", "kwok.distrun.test/message": "CUDA OOM"}
    await core.create_namespaced_pod(kube_namespace, pod("crasher", annotations=annotations))
    failed = await eventually(
        lambda: core.read_namespaced_pod("crasher", kube_namespace),
        lambda p: p.status.phase == "Failed",
        "Failed",
    )
    terminated = failed.status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason, terminated.message) == (3, "Error", "CUDA OOM")


async def test_gpu_request_is_scheduled_on_the_gpu_node_and_too_many_stay_pending(
    kube_admin: Any, kube_namespace: str
) -> None:
    core = client.CoreV1Api(kube_admin)
    await core.create_namespaced_pod(kube_namespace, pod("gpu-2", gpus=2))
    await core.create_namespaced_pod(kube_namespace, pod("gpu-9", gpus=9))
    placed = await eventually(
        lambda: core.read_namespaced_pod("gpu-2", kube_namespace),
        lambda p: p.status.phase == "Running",
        "Running",
    )
    assert placed.spec.node_name == "kwok-gpu-node-1"

    def unschedulable(p: Any) -> bool:
        conditions = p.status.conditions or []
        return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in conditions)

    pending = await eventually(
        lambda: core.read_namespaced_pod("gpu-9", kube_namespace), unschedulable, "Unschedulable"
    )
    assert pending.status.phase == "Pending"
    assert pending.spec.node_name is None


async def test_foreground_deletion_of_a_pytorchjob_collects_its_owned_configmap(
    kube_admin: Any, kube_namespace: str
) -> None:
    core, custom = client.CoreV1Api(kube_admin), client.CustomObjectsApi(kube_admin)
    ns = kube_namespace
    job = await custom.create_namespaced_custom_object(
        "kubeflow.org", "v1", ns, "pytorchjobs", pytorchjob("owner")
    )
    owner = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": "owner",
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    await core.create_namespaced_config_map(
        ns, {"metadata": {"name": "owned", "ownerReferences": [owner]}, "data": {"k": "v"}}
    )
    await core.create_namespaced_config_map(ns, {"metadata": {"name": "bystander"}})

    await custom.delete_namespaced_custom_object(
        "kubeflow.org", "v1", ns, "pytorchjobs", "owner", propagation_policy="Foreground"
    )

    await eventually(
        lambda: gone(lambda: core.read_namespaced_config_map("owned", ns)), bool, "collected"
    )
    await eventually(
        lambda: gone(
            lambda: custom.get_namespaced_custom_object(
                "kubeflow.org", "v1", ns, "pytorchjobs", "owner"
            )
        ),
        bool,
        "deleted",
    )
    assert not await gone(lambda: core.read_namespaced_config_map("bystander", ns))


async def test_alice_may_create_pytorchjobs_in_her_namespace_and_is_forbidden_in_bobs(
    kube_admin: Any, kube_alice: Any
) -> None:
    alice = client.CustomObjectsApi(kube_alice)
    name = unique("alice-job")
    await alice.create_namespaced_custom_object(
        "kubeflow.org", "v1", "alice", "pytorchjobs", pytorchjob(name)
    )
    try:
        with pytest.raises(ApiException) as denied:
            await alice.create_namespaced_custom_object(
                "kubeflow.org", "v1", "bob", "pytorchjobs", pytorchjob(name)
            )
        assert denied.value.status == 403
        with pytest.raises(ApiException) as denied_pods:
            await client.CoreV1Api(kube_alice).list_namespaced_pod("bob")
        assert denied_pods.value.status == 403

        authorization = client.AuthorizationV1Api(kube_admin)

        async def allowed(namespace: str) -> bool:
            attributes = {
                "namespace": namespace,
                "verb": "create",
                "group": "kubeflow.org",
                "resource": "pytorchjobs",
            }
            review = await authorization.create_subject_access_review(
                {"spec": {"user": "alice", "resourceAttributes": attributes}}
            )
            return bool(review.status.allowed)

        assert await allowed("alice") is True
        assert await allowed("bob") is False
    finally:
        await client.CustomObjectsApi(kube_admin).delete_namespaced_custom_object(
            "kubeflow.org", "v1", "alice", "pytorchjobs", name
        )


async def test_pod_watch_with_label_selector_delivers_added_and_modified_events(
    kube_admin: Any, kube_namespace: str
) -> None:
    core = client.CoreV1Api(kube_admin)
    events: list[tuple[str, str, str | None]] = []

    async def watch_until_succeeded() -> None:
        async with watch.Watch().stream(
            core.list_namespaced_pod,
            kube_namespace,
            label_selector="distrun.test/watched=yes",
            timeout_seconds=int(WAIT),
        ) as stream:
            async for event in stream:
                obj = event["object"]
                events.append((event["type"], obj.metadata.name, obj.status.phase))
                if obj.status.phase == "Succeeded":
                    return

    watching = asyncio.create_task(watch_until_succeeded())
    await core.create_namespaced_pod(
        kube_namespace, pod("ignored", labels={"distrun.test/watched": "no"})
    )
    await core.create_namespaced_pod(
        kube_namespace,
        pod(
            "watched",
            labels={"distrun.test/watched": "yes"},
            annotations={"kwok.distrun.test/exit-code": "0"},
        ),
    )
    await asyncio.wait_for(watching, WAIT)

    assert {name for _, name, _ in events} == {"watched"}
    assert events[0][0] == "ADDED"
    assert "MODIFIED" in {kind for kind, _, _ in events}
    assert [phase for _, _, phase in events][-1] == "Succeeded"
    assert "Running" in [phase for _, _, phase in events]


async def test_deleting_a_namespace_removes_it_with_its_running_pods(
    kube_cluster: KubeCluster, kube_admin: Any
) -> None:
    core = client.CoreV1Api(kube_admin)
    namespace = unique("doomed")
    kube_cluster.create_namespace(namespace)
    await core.create_namespaced_pod(namespace, pod("forever"))
    await eventually(
        lambda: core.read_namespaced_pod("forever", namespace),
        lambda p: p.status.phase == "Running",
        "Running",
    )
    await core.delete_namespace(namespace)
    await eventually(lambda: gone(lambda: core.read_namespace(namespace)), bool, "deleted")
