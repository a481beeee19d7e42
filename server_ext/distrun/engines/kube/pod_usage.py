"""What each replica of a Kubernetes job uses, read from the cluster's `metrics.k8s.io` API
(metrics-server's PodMetrics: CPU and memory per container, as `kubectl top pod` shows).

Read only while someone looks (a REST call, a followed log stream), and shared: one LIST of
the namespace's PodMetrics at most once an interval (`NamespaceMetrics`), whatever the number
of jobs or viewers there, so a namespace of 1,200 pods costs one request per interval, not one
per job. Each job keeps a bounded series of the snapshots it was shown (`JobUsage`), numbered
as the local engine numbers its samples (core/usage.py).
"""

import asyncio
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from distrun.core.errors import DistrunError, NotFound
from distrun.core.quantities import quantity_value
from distrun.core.spec import JobSpec
from distrun.core.usage import (
    ReplicaUsage,
    UsageReport,
    UsageSample,
    gpu_replicas,
    memory_limits,
    peak_rss,
)
from distrun.engines.kube.client import KubeApi, Obj, Resource

POD_METRICS = Resource("metrics.k8s.io", "v1beta1", "pods")
POLL_SECONDS = 15.0  # metrics-server's own resolution (--metric-resolution, 15 s by default)
KEPT_SAMPLES = 720  # per job: three hours at POLL_SECONDS
KEPT_JOBS = 512  # series kept in memory, the least recently read dropped first
NOT_INSTALLED = "metrics-server is not installed in this cluster: no usage"

GPU_NOT_REPORTED = "GPU: not reported by metrics.k8s.io"

ReplicaOf = Callable[[Obj], str | None]


def gpu_notes(spec: JobSpec) -> list[str]:
    """What the report cannot say of the replicas that requested a GPU: metrics-server has no
    GPU figures (NVIDIA's DCGM exporter does, read through Prometheus; docs/observability.md)."""
    replicas = gpu_replicas(spec)
    if not replicas:
        return []
    note = (
        f"{GPU_NOT_REPORTED} for {', '.join(replicas)}, which requested a GPU: the cluster "
        "reports GPU use through NVIDIA's DCGM exporter and Prometheus, which distrun does "
        "not read yet"
    )
    return [note]


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    """Whether `labels` hold every `key=value` of an equality selector (the engines' own)."""
    for part in filter(None, selector.split(",")):
        key, _, value = part.partition("=")
        if labels.get(key) != value:
            return False
    return True


def replica_usage(item: Obj) -> ReplicaUsage:
    """A PodMetrics object as a replica's usage: CPU in percent of one core and memory (the
    containers' working sets), summed over the pod's containers."""
    cpu = memory = 0.0
    containers = item.get("containers") or []
    for container in containers:
        usage = container.get("usage") or {}
        cpu += float(quantity_value(str(usage.get("cpu", "0"))))
        memory += float(quantity_value(str(usage.get("memory", "0"))))
    return ReplicaUsage(cpu * 100, int(memory), processes=0)


class NamespaceMetrics:
    """A namespace's PodMetrics, listed when asked and at most once an interval; concurrent
    askers share one request."""

    def __init__(self, namespace: str, interval: float) -> None:
        self.namespace, self.interval = namespace, interval
        self.items: list[Obj] = []
        self.error: str | None = None
        self.generation = 0  # one more at each listing
        self.time = 0.0  # epoch seconds of the listing
        self._taken = -float("inf")  # monotonic
        self._listing: asyncio.Task[None] | None = None

    async def fresh(self, api: KubeApi) -> None:
        if time.monotonic() - self._taken < self.interval:
            return
        if self._listing is None:
            self._listing = asyncio.create_task(self._list(api))
        await asyncio.shield(self._listing)

    async def _list(self, api: KubeApi) -> None:
        try:
            listed = await api.list(POD_METRICS, self.namespace, "", "read the pods' usage")
            self.items, self.error = list(listed.get("items") or []), None
        except NotFound:
            self.items, self.error = [], NOT_INSTALLED
        except DistrunError as error:
            self.items, self.error = [], f"metrics-server does not answer: {error}"
        finally:
            self._listing = None
            self._taken, self.time = time.monotonic(), time.time()
            self.generation += 1


class JobUsage:
    """One job's series: a sample per namespace listing it was shown that had its pods."""

    def __init__(self) -> None:
        self.samples: deque[UsageSample] = deque(maxlen=KEPT_SAMPLES)
        self.next_seq = 0
        self.seen = 0  # the namespace listing last taken in

    def take(self, metrics: NamespaceMetrics, selector: str, replica_of: ReplicaOf) -> None:
        if metrics.generation == self.seen:
            return
        self.seen = metrics.generation
        replicas: dict[str, ReplicaUsage] = {}
        for item in metrics.items:
            labels = (item.get("metadata") or {}).get("labels") or {}
            replica = replica_of(item) if selector_matches(selector, labels) else None
            if replica is not None:
                replicas[replica] = replica_usage(item)
        if replicas:
            self.samples.append(UsageSample(self.next_seq, metrics.time, replicas))
            self.next_seq += 1


class PodUsage:
    """The engine's usage reader: namespaces' listings and jobs' series."""

    def __init__(self, interval: float = POLL_SECONDS) -> None:
        self.interval = interval
        self._namespaces: dict[str, NamespaceMetrics] = {}
        self._jobs: OrderedDict[tuple[str, str], JobUsage] = OrderedDict()

    async def report(
        self,
        api: KubeApi,
        namespace: str,
        job_id: str,
        spec: JobSpec,
        selector: str,
        replica_of: Callable[[Obj, JobSpec], str | None],
        since: int,
    ) -> UsageReport:
        metrics = self._namespaces.get(namespace)
        if metrics is None:
            metrics = self._namespaces[namespace] = NamespaceMetrics(namespace, self.interval)
        await metrics.fresh(api)
        notes = gpu_notes(spec)
        if metrics.error is not None:
            return UsageReport(False, metrics.error, notes=notes)
        series = self._series(namespace, job_id)
        series.take(metrics, selector, lambda item: replica_of(item, spec))
        samples = [sample for sample in series.samples if sample.seq >= since]
        return UsageReport(True, None, self.interval, samples, memory_limits(spec), notes)

    def peaks(self, namespace: str, job_id: str) -> dict[str, int]:
        """Each replica's largest working set in the job's series; empty when nobody read
        the job's usage while it ran (there is no series to take it from)."""
        series = self._jobs.get((namespace, job_id))
        if series is None:
            return {}
        samples = list(series.samples)
        names = {name for sample in samples for name in sample.replicas}
        return {name: peak for name in names if (peak := peak_rss(samples, name)) is not None}

    def _series(self, namespace: str, job_id: str) -> JobUsage:
        key = (namespace, job_id)
        series = self._jobs.pop(key, None) or JobUsage()
        self._jobs[key] = series
        while len(self._jobs) > KEPT_JOBS:
            self._jobs.popitem(last=False)
        return series
