"""Each GPU mode against a real kube-apiserver and kube-scheduler: kwok nodes advertise MIG
slices, time-sliced GPUs, Volcano vGPU and HAMi resources; the Kubeflow engine configured in
each mode makes pods that the scheduler places on the node that has them, and a job that asks
for more than any node has is explained by the GPU resource that is short.

The real Training Operator makes the pods (namespace `real-operator`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest

from distrun.core.errors import SpecError
from distrun.core.job import Job
from distrun.core.spec import JobSpec
from distrun.engines.kube.kubeflow import KubeflowEngine

from .cluster import KubeCluster, node_ready, wait_for
from .waiting import eventually

pytestmark = pytest.mark.kubernetes


# node -> the extended resources it advertises besides CPU and memory
GPU_NODES: dict[str, dict[str, str]] = {
    "kwok-mig-node": {"nvidia.com/mig-1g.5gb": "7", "nvidia.com/mig-3g.20gb": "2"},
    "kwok-shared-node": {"nvidia.com/gpu.shared": "4"},
    "kwok-vgpu-node": {
        "volcano.sh/vgpu-number": "4",
        "volcano.sh/vgpu-memory": "40960",
        "volcano.sh/vgpu-cores": "400",
    },
    "kwok-hami-node": {
        "nvidia.com/gpu": "2",
        "nvidia.com/gpumem": "81920",
        "nvidia.com/gpucores": "200",
    },
}


def node_manifest(name: str, extended: dict[str, str]) -> dict[str, Any]:
    capacity = {"cpu": "32", "memory": "256Gi", "pods": "110", **extended}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"},
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


@pytest.fixture(scope="module")
def gpu_nodes(kube_cluster: KubeCluster) -> Iterator[list[str]]:
    """The four GPU nodes, Ready; deleted after this module so other tests' node counts hold."""
    core = kubernetes.client.CoreV1Api(kube_cluster.admin)
    for name, extended in GPU_NODES.items():
        core.create_node(node_manifest(name, extended))
    try:
        for name in GPU_NODES:
            wait_for(
                lambda name=name: node_ready(core.read_node(name)),
                f"kwok to make node {name} Ready",
                kube_cluster.check_alive,
            )
        yield list(GPU_NODES)
    finally:
        for name in GPU_NODES:
            # A pod still on the node (its job deleted moments ago) would stay Terminating for
            # ever once kwok no longer plays the node's kubelet, and hold its job's foreground
            # deletion in later tests: removed at once, as a node's lost pods are.
            bound = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}")
            for pod in bound.items:
                with contextlib.suppress(kubernetes.client.ApiException):
                    core.delete_namespaced_pod(
                        pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0
                    )
            core.delete_node(name)


def spec(gpu: Any, gpu_memory: str | None = None) -> JobSpec:
    resources = {"gpu": gpu, **({"gpu_memory": gpu_memory} if gpu_memory else {})}
    roles = {"master": {"replicas": 1, "resources": resources}, "worker": {"replicas": 0}}
    return JobSpec.from_dict({"framework": "pytorch", "code": "print('hi')\n", "roles": roles})


async def run_master(
    mode: str, job_spec: JobSpec, api: Any, namespace: str, **options: Any
) -> tuple[KubeflowEngine, Job]:
    engine = KubeflowEngine(api_client=api, namespace=namespace, gpu_mode=mode, **options)
    job = await engine.submit(job_spec, "alice")
    return engine, job


@pytest.mark.parametrize(
    ("mode", "gpu", "gpu_memory", "node", "held"),
    [
        ("mig", "mig-3g.20gb", None, "kwok-mig-node", "nvidia.com/mig-3g.20gb=1"),
        ("shared", 0.5, None, "kwok-shared-node", "nvidia.com/gpu.shared=1"),
        (
            "volcano-vgpu",
            0.25,
            "10Gi",
            "kwok-vgpu-node",
            "volcano.sh/vgpu-cores=25, volcano.sh/vgpu-memory=10240, volcano.sh/vgpu-number=1",
        ),
        (
            "hami",
            0.5,
            "20Gi",
            "kwok-hami-node",
            "nvidia.com/gpu=1, nvidia.com/gpucores=50, nvidia.com/gpumem=20480",
        ),
    ],
)
async def test_a_job_that_fits_is_placed_on_the_node_with_that_resource_and_says_so(
    gpu_nodes: list[str],
    kube_admin: Any,
    operator_namespace: str,
    mode: str,
    gpu: Any,
    gpu_memory: str | None,
    node: str,
    held: str,
) -> None:
    engine, job = await run_master(mode, spec(gpu, gpu_memory), kube_admin, operator_namespace)
    try:
        placed = await eventually(
            lambda: engine.get_job(job.id, "alice"),
            lambda j: j.replicas[0].gpu is not None and "on node" in j.replicas[0].gpu,
            f"the master placed on {node}",
        )
        assert placed.replicas[0].gpu == f"{held} on node {node}"
        info = await engine.info()
        assert info.options["gpus"]["mode"] == mode
    finally:
        await engine.delete(job.id, "alice")
        await engine.close()


@pytest.mark.parametrize(
    ("mode", "gpu", "gpu_memory", "short"),
    [
        ("volcano-vgpu", 0.5, "50Gi", "volcano.sh/vgpu-memory"),
        ("hami", 0.5, "90Gi", "nvidia.com/gpumem"),
    ],
)
async def test_a_job_no_node_can_take_is_explained_by_the_short_gpu_resource(
    gpu_nodes: list[str],
    kube_admin: Any,
    operator_namespace: str,
    mode: str,
    gpu: Any,
    gpu_memory: str | None,
    short: str,
) -> None:
    engine, job = await run_master(mode, spec(gpu, gpu_memory), kube_admin, operator_namespace)
    try:
        pending = await eventually(
            lambda: engine.get_job(job.id, "alice"),
            lambda j: j.reason is not None and "Unschedulable" in j.reason,
            "an Unschedulable reason",
        )
        assert f"Insufficient {short}" in pending.reason
        assert f"[short of GPU resource {short}: no node has enough of it free]" in pending.reason
        assert pending.replicas[0].gpu is not None
        assert pending.replicas[0].gpu.endswith("(not yet placed)")
    finally:
        await engine.delete(job.id, "alice")
        await engine.close()


async def test_a_mig_profile_the_cluster_lacks_is_refused_before_anything_is_created(
    kube_admin: Any, kube_namespace: str
) -> None:
    engine = KubeflowEngine(
        api_client=kube_admin,
        namespace=kube_namespace,
        gpu_mode="mig",
        gpu_mig_profiles=["1g.5gb", "3g.20gb"],
    )
    try:
        with pytest.raises(SpecError, match="its MIG profiles are mig-1g.5gb, mig-3g.20gb"):
            await engine.submit(spec("mig-7g.40gb"), "alice")
        assert await engine.list_jobs("alice") == []
    finally:
        await engine.close()
