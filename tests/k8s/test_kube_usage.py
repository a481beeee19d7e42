"""What each replica of a Kubernetes job uses, as distrun's engine reads it from the real
metrics-server (fixture `kube_metrics`), which scrapes kwok's simulated usage: the test gives a
running pod its CPU and memory in annotations (kwok-metrics.yaml's ClusterResourceUsage), kwok
serves them as a kubelet's resource metrics, metrics-server turns them into PodMetrics behind
`metrics.k8s.io`. And a container the kubelet killed for memory (kwok's `pod-exit` Stage with
reason OOMKilled, exit code 137), said in words with the peak metrics-server gave. The same for
the Trainer v2 and Volcano engines, whose pods the real Trainer + JobSet and Volcano
controllers make (`controllers_cluster`, with its own metrics-server)."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from kubernetes_asyncio import client

from distrun.core.job import JobState
from distrun.core.spec import JobSpec
from distrun.core.usage import UsageReport
from distrun.engines.kube.engine import KubeEngine
from distrun.engines.kube.kubeflow import KubeflowEngine
from distrun.engines.kube.trainer import TrainerEngine
from distrun.engines.kube.volcano import VolcanoEngine

from .cluster import KubeCluster
from .metrics_server import GIB, MIB, USAGE_WAIT, annotate, use
from .real_operator import EXIT_ANNOTATION, running_pods
from .waiting import eventually

pytestmark = pytest.mark.kubernetes

REASON_ANNOTATION = "kwok.distrun.test/reason"

JOB = JobSpec.from_dict(
    {
        "framework": "pytorch",
        "code": "print('hi')\n",
        "roles": {
            "master": {"replicas": 1},
            "worker": {"replicas": 1, "resources": {"memory": "4Gi"}},
        },
    }
)


def has_replicas(*names: str) -> Any:
    def check(report: UsageReport) -> bool:
        return bool(report.samples) and set(report.samples[-1].replicas) == set(names)

    return check


async def test_kwok_usage_served_by_metrics_server_is_each_replicas_cpu_and_memory(
    kube_metrics: None, kubeflow: KubeflowEngine, kube_admin: Any, operator_namespace: str
) -> None:
    job = await kubeflow.submit(JOB, "alice")
    pods = await running_pods(kube_admin, operator_namespace, job.id)
    await use(kube_admin, operator_namespace, pods["master-0"], "1500m", "3Gi")
    await use(kube_admin, operator_namespace, pods["worker-0"], "250m", "512Mi")

    report = await eventually(
        lambda: kubeflow.read_usage(job.id, "alice"),
        has_replicas("master-0", "worker-0"),
        "metrics-server's PodMetrics of both replicas",
        USAGE_WAIT,
    )
    assert report.available and report.reason is None
    replicas = report.samples[-1].replicas
    assert replicas["master-0"].rss_bytes == 3 * GIB
    assert replicas["worker-0"].rss_bytes == 512 * MIB
    # A rate over metrics-server's window between two scrapes of kwok's cumulative CPU time,
    # which kwok integrates when it answers and metrics-server times when it asks: a loaded
    # machine's delays in between shift it (seen here: 149.99 %).
    assert replicas["master-0"].cpu_percent == pytest.approx(150.0, rel=0.05)
    assert replicas["worker-0"].cpu_percent == pytest.approx(25.0, rel=0.05)
    assert report.memory_limits == {"worker-0": 4 * GIB}


async def test_a_replica_killed_for_memory_is_said_in_words_with_its_peak_and_limit(
    kube_metrics: None, kubeflow: KubeflowEngine, kube_admin: Any, operator_namespace: str
) -> None:
    job = await kubeflow.submit(JOB, "alice")
    pods = await running_pods(kube_admin, operator_namespace, job.id)
    await use(kube_admin, operator_namespace, pods["master-0"], "100m", "100Mi")
    await use(kube_admin, operator_namespace, pods["worker-0"], "1", "3900Mi")
    await eventually(  # someone looks while it runs: the engine has the worker's peak
        lambda: kubeflow.read_usage(job.id, "alice"),
        has_replicas("master-0", "worker-0"),
        "metrics-server's PodMetrics of both replicas",
        USAGE_WAIT,
    )

    # kwok's pod-exit Stage ends the container as a kubelet does an OOM kill.
    oom = {EXIT_ANNOTATION: "137", REASON_ANNOTATION: "OOMKilled"}
    await annotate(kube_admin, operator_namespace, pods["worker-0"], oom)
    failed = await eventually(
        lambda: kubeflow.get_job(job.id, "alice"),
        lambda j: j.failed_replica is not None,
        "the failed replica to be named",
    )
    worker = client.CoreV1Api(kube_admin)
    stored = await worker.read_namespaced_pod(pods["worker-0"].metadata.name, operator_namespace)
    terminated = stored.status.container_statuses[0].state.terminated
    assert (terminated.reason, terminated.exit_code) == ("OOMKilled", 137)
    assert failed.state == JobState.FAILED and failed.failed_replica == "worker-0"
    assert failed.reason == "worker-0 killed: out of memory (peak 3.8 GiB of a 4 GiB limit)"
    [replica] = [r for r in failed.replicas if r.name == "worker-0"]
    assert replica.exit_code == 137
    assert replica.reason == "killed: out of memory (peak 3.8 GiB of a 4 GiB limit)"


# -- Trainer v2 and Volcano, on their real controllers -----------------------------------------

# Trainer v2 gives every node the same resources: every role asks for the same.
SAME_LIMITS = JobSpec.from_dict(
    {
        "framework": "pytorch",
        "code": "print('hi')\n",
        "roles": {
            "master": {"replicas": 1, "resources": {"memory": "4Gi"}},
            "worker": {"replicas": 1, "resources": {"memory": "4Gi"}},
        },
    }
)


@pytest.fixture
async def controllers_admin(controllers_cluster: KubeCluster) -> AsyncIterator[Any]:
    async with controllers_cluster.api_client("admin") as api:
        yield api


@pytest.fixture
def controllers_namespace(controllers_cluster: KubeCluster) -> Iterator[str]:
    name = f"usage-{secrets.token_hex(4)}"
    controllers_cluster.create_namespace(name)
    yield name
    controllers_cluster.delete_namespace(name)


@pytest.fixture(params=["trainer", "volcano"])
async def real_engine(
    request: pytest.FixtureRequest, controllers_admin: Any, controllers_namespace: str
) -> AsyncIterator[KubeEngine]:
    """A TrainJob on the real Trainer and JobSet, or a Volcano Job on the real Volcano
    controllers (with its admission webhook), in `controllers_cluster`."""
    request.getfixturevalue(f"{request.param}_controllers")
    engine_class = TrainerEngine if request.param == "trainer" else VolcanoEngine
    engine = engine_class(api_client=controllers_admin, namespace=controllers_namespace)
    yield engine
    await engine.close()


async def replica_pods(engine: KubeEngine, api: Any, namespace: str, job_id: str) -> dict[str, Any]:
    """The job's two pods by replica, once both run, mapped as the engine maps them."""

    async def listed() -> dict[str, Any]:
        core = client.CoreV1Api(api)
        pods = await core.list_namespaced_pod(namespace, label_selector=engine.pod_selector(job_id))
        running = [p for p in pods.items if p.status.phase == "Running"]
        return {
            engine.replica_of(api.sanitize_for_serialization(p), SAME_LIMITS): p for p in running
        }

    return await eventually(listed, lambda found: len(found) == 2, "the controller's pods to run")


async def test_trainer_and_volcano_replicas_usage_and_an_oom_kill_through_metrics_server(
    controllers_metrics: None, real_engine: KubeEngine, controllers_admin: Any,
    controllers_namespace: str,
) -> None:  # fmt: skip
    api, namespace = controllers_admin, controllers_namespace
    job = await real_engine.submit(SAME_LIMITS, "alice")
    pods = await replica_pods(real_engine, api, namespace, job.id)
    assert set(pods) == {"master-0", "worker-0"}
    await use(api, namespace, pods["master-0"], "1500m", "3Gi")
    await use(api, namespace, pods["worker-0"], "250m", "3900Mi")

    report = await eventually(
        lambda: real_engine.read_usage(job.id, "alice"),
        has_replicas("master-0", "worker-0"),
        "metrics-server's PodMetrics of both replicas",
        USAGE_WAIT,
    )
    assert report.available and report.reason is None and report.notes == []
    replicas = report.samples[-1].replicas
    assert replicas["master-0"].rss_bytes == 3 * GIB
    assert replicas["worker-0"].rss_bytes == 3900 * MIB
    assert replicas["master-0"].cpu_percent == pytest.approx(150.0, rel=0.05)
    assert replicas["worker-0"].cpu_percent == pytest.approx(25.0, rel=0.05)
    assert report.memory_limits == {"master-0": 4 * GIB, "worker-0": 4 * GIB}

    # kwok's pod-exit Stage ends the worker's container as a kubelet does an OOM kill.
    oom = {EXIT_ANNOTATION: "137", REASON_ANNOTATION: "OOMKilled"}
    await annotate(api, namespace, pods["worker-0"], oom)
    words = "worker-0 killed: out of memory (peak 3.8 GiB of a 4 GiB limit)"
    seen = await eventually(
        lambda: real_engine.get_job(job.id, "alice"),
        lambda j: any(e.kind == "failed" for e in j.timeline),
        "the worker's failure in the job's timeline",
    )
    [failure] = [e for e in seen.timeline if e.kind == "failed"]
    assert (failure.replica, failure.exit_code, failure.oom) == ("worker-0", 137, True)
    assert failure.signal == "SIGKILL" and failure.text == words
    if isinstance(real_engine, VolcanoEngine):
        # distrun's Volcano Job fails with its first failed replica (maxRetry as the spec's).
        failed = await eventually(
            lambda: real_engine.get_job(job.id, "alice"),
            lambda j: j.state.terminal,
            "the job to end",
        )
        assert failed.state == JobState.FAILED and failed.failed_replica == "worker-0"
        assert failed.reason == words
        [replica] = [r for r in failed.replicas if r.name == "worker-0"]
        assert replica.exit_code == 137
        assert replica.reason == "killed: out of memory (peak 3.8 GiB of a 4 GiB limit)"
    # On Trainer v2.3.0 the torch runtime's Job (pods OnFailure, backoffLimit 6: the runtime's,
    # which a TrainJob cannot set, manifests/trainer.py) starts the node again: the job runs on,
    # and the kill is in its timeline, in words.
    await real_engine.delete(job.id, "alice")
