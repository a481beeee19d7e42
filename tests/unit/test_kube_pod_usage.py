"""engines/kube/pod_usage.py against a scripted metrics.k8s.io: PodMetrics mapped to replicas as
the Kubeflow engine maps pods, one LIST per namespace and interval shared by every job there,
and metrics-server's absence said in words. The tier's tests/k8s/test_server_kube.py checks
the absence against the real API server."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from distrun.core.errors import EngineError, NotFound
from distrun.core.job import JobState
from distrun.core.spec import JobSpec
from distrun.engines.kube.client import Obj, Resource
from distrun.engines.kube.engine import KubeEngine
from distrun.engines.kube.kubeflow import KubeflowEngine
from distrun.engines.kube.manifests.kubeflow import (
    LABEL_JOB_NAME,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
)
from distrun.engines.kube.pod_usage import NOT_INSTALLED, POD_METRICS, PodUsage
from distrun.engines.kube.trainer import TrainerEngine
from distrun.engines.kube.volcano import VolcanoEngine

SPEC = JobSpec.from_dict(
    {
        "framework": "pytorch",
        "code": "x = 1\n",
        "roles": {
            "master": {"replicas": 1},
            "worker": {"replicas": 2, "resources": {"memory": "4Gi"}},
        },
    }
)


def pod_metrics(job: str, role: str, index: int, cpu: str, memory: str) -> Obj:
    labels = {LABEL_JOB_NAME: job, LABEL_REPLICA_TYPE: role, LABEL_REPLICA_INDEX: str(index)}
    usage = {"cpu": cpu, "memory": memory}
    return {
        "metadata": {"name": f"{job}-{role.lower()}-{index}", "labels": labels},
        "containers": [{"name": "pytorch", "usage": usage}],
    }


class MetricsApi:
    """Answers every LIST of PodMetrics with `items`, or raises `error`; counts the calls."""

    def __init__(self, items: list[Obj], error: Exception | None = None) -> None:
        self.items, self.error = items, error
        self.lists: list[tuple[Resource, str]] = []

    async def list(self, res: Resource, namespace: str, selector: str, what: str) -> Obj:
        self.lists.append((res, namespace))
        if self.error is not None:
            raise self.error
        return {"items": self.items}


async def report(usage: PodUsage, api: Any, job: str, since: int = 0) -> Any:
    engine = KubeflowEngine()
    selector = engine.pod_selector(job)
    return await usage.report(api, "team", job, SPEC, selector, engine.replica_of, since)


async def test_pod_metrics_become_each_replicas_cpu_and_memory() -> None:
    api = MetricsApi(
        [
            pod_metrics("a", "Master", 0, "1500m", "512Mi"),
            pod_metrics("a", "Worker", 1, "250000000n", "1Gi"),
            pod_metrics("b", "Worker", 0, "2", "64Mi"),  # another job's pod
        ]
    )
    result = await report(PodUsage(interval=60), api, "a")
    assert result.available and result.reason is None and result.interval_seconds == 60
    [sample] = result.samples
    assert sample.seq == 0 and set(sample.replicas) == {"master-0", "worker-1"}
    assert sample.replicas["master-0"].cpu_percent == 150.0
    assert sample.replicas["master-0"].rss_bytes == 512 * 2**20
    assert sample.replicas["worker-1"].cpu_percent == 25.0
    assert result.memory_limits == {"worker-0": 4 * 2**30, "worker-1": 4 * 2**30}
    assert api.lists == [(POD_METRICS, "team")]


async def test_one_list_per_namespace_and_interval_whatever_the_jobs() -> None:
    api = MetricsApi([pod_metrics(job, "Worker", 0, "1", "1Mi") for job in ("a", "b", "c")])
    usage = PodUsage(interval=60)
    for job in ("a", "b", "c", "a"):
        assert len((await report(usage, api, job)).samples) == 1
    assert len(api.lists) == 1  # within the interval, every job reads the same listing


async def test_a_new_listing_adds_a_sample_and_since_resumes_after_it() -> None:
    api = MetricsApi([pod_metrics("a", "Worker", 0, "1", "1Mi")])
    usage = PodUsage(interval=0)  # every call lists again
    await report(usage, api, "a")
    api.items = [pod_metrics("a", "Worker", 0, "2", "2Mi")]
    result = await report(usage, api, "a", since=1)
    assert [s.seq for s in result.samples] == [1]
    assert result.samples[0].replicas["worker-0"].rss_bytes == 2 * 2**20
    assert [s.seq for s in (await report(usage, api, "a")).samples] == [0, 1, 2]  # a third


async def test_peaks_are_each_replicas_largest_working_set_in_the_series_read() -> None:
    api = MetricsApi([pod_metrics("a", "Worker", 0, "1", "3Gi")])
    usage = PodUsage(interval=0)
    assert usage.peaks("team", "a") == {}  # nobody read it: no series, no peak
    await report(usage, api, "a")
    api.items = [
        pod_metrics("a", "Worker", 0, "1", "1Gi"),
        pod_metrics("a", "Master", 0, "1", "2Mi"),
    ]
    await report(usage, api, "a")
    assert usage.peaks("team", "a") == {"worker-0": 3 * 2**30, "master-0": 2 * 2**20}
    assert usage.peaks("team", "b") == {} and usage.peaks("other", "a") == {}


async def test_without_metrics_server_the_report_says_so() -> None:
    api = MetricsApi([], NotFound("cannot read the pods' usage: the server could not find it"))
    result = await report(PodUsage(), api, "a")
    assert not result.available and result.reason == NOT_INSTALLED
    assert result.reason == "metrics-server is not installed in this cluster: no usage"


async def test_an_unavailable_metrics_server_is_named_with_the_error() -> None:
    api = MetricsApi([], EngineError("cannot read the pods' usage: the API server answered 503"))
    result = await report(PodUsage(), api, "a")
    assert not result.available and result.reason is not None
    assert result.reason.startswith("metrics-server does not answer:") and "503" in result.reason


class FakeFeed:
    """What follow_usage reads of a job's feed: its API, namespace, spec and state."""

    def __init__(self, api: MetricsApi) -> None:
        self.api, self.namespace, self.spec = api, "team", SPEC
        self.gone = False
        self.job = SimpleNamespace(state=JobState.RUNNING)


async def test_following_yields_each_new_sample_and_ends_after_the_job() -> None:
    api = MetricsApi([pod_metrics("a", "Worker", 0, "1", "1Mi")])
    engine = KubeflowEngine()
    engine._usage = PodUsage(interval=0)
    feed = FakeFeed(api)
    left: list[object] = []

    async def join(job_id: str, owner: str) -> FakeFeed:
        return feed

    async def leave(joined: object) -> None:
        left.append(joined)

    engine._join_feed = join  # type: ignore[assignment]
    engine._leave_feed = leave  # type: ignore[assignment]
    seqs: list[int] = []
    async for update in engine.follow_usage("a", "alice"):
        seqs += [sample.seq for sample in update.samples]
        if len(seqs) == 2:
            feed.job.state = JobState.SUCCEEDED  # one more read after the end, then none
    assert seqs == [0, 1, 2] and left == [feed]
    await engine.close()


async def test_following_without_metrics_server_ends_at_once() -> None:
    engine = KubeflowEngine()
    feed = FakeFeed(MetricsApi([], NotFound("not served")))

    async def join(job_id: str, owner: str) -> FakeFeed:
        return feed

    async def leave(joined: object) -> None:
        pass

    engine._join_feed = join  # type: ignore[assignment]
    engine._leave_feed = leave  # type: ignore[assignment]
    assert [update async for update in engine.follow_usage("a", "alice")] == []
    await engine.close()


GPU_SPEC = JobSpec.from_dict(
    {
        "framework": "pytorch",
        "code": "x = 1\n",
        "roles": {
            "master": {"replicas": 1},
            "worker": {"replicas": 2, "resources": {"gpu": 1, "memory": "4Gi"}},
        },
    }
)


@pytest.mark.parametrize("engine_class", [KubeflowEngine, TrainerEngine, VolcanoEngine])
@pytest.mark.parametrize("error", [None, NotFound("not served")])
async def test_each_engine_says_a_requested_gpu_is_not_reported(
    engine_class: type[KubeEngine], error: Exception | None
) -> None:
    engine = engine_class()
    engine._usage = PodUsage(interval=60)
    result = await engine._usage_of(MetricsApi([], error), "team", "a", GPU_SPEC, 0)  # type: ignore[arg-type]
    assert result.notes == [
        (
            "GPU: not reported by metrics.k8s.io for worker-0, worker-1, which requested a "
            "GPU: the cluster reports GPU use through NVIDIA's DCGM exporter and Prometheus, "
            "which distrun does not read yet"
        )
    ]
    assert result.to_json()["notes"] == result.notes
    assert result.available is (error is None)
    await engine.close()


async def test_a_job_without_a_gpu_has_no_gpu_note() -> None:
    result = await report(PodUsage(interval=60), MetricsApi([]), "a")
    assert result.notes == [] and result.to_json()["notes"] == []
