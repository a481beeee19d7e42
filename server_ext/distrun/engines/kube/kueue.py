"""Queueing through Kueue (`kueue.x-k8s.io`): a job labelled with a LocalQueue is created
suspended and runs once its ClusterQueue admits it; Kueue tracks it in a Workload.

distrun creates such jobs itself suspended (so they wait even where Kueue's webhook is not
installed) and reads the Workload to say, in words, why a job waits or was preempted. Kueue
reports no queue position in a Workload (only through its optional visibility API), so none is
shown. Kueue manages Training Operator jobs and TrainJobs, not Volcano jobs.
"""

from distrun.core.errors import DistrunError, SpecError
from distrun.engines.kube.client import KubeApi, Obj, Resource
from distrun.engines.kube.manifests.common import KUEUE_QUEUE_LABEL

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
WORKLOADS = Resource("kueue.x-k8s.io", "v1beta1", "workloads")
QUEUE_SYSTEMS = ("volcano", "kueue")


def check_queue_system(system: str | None, engine: str, manageable: bool) -> str | None:
    """The engine's queue system, refused where Kueue cannot manage the engine's kind."""
    if system is not None and system not in QUEUE_SYSTEMS:
        raise SpecError(
            f"queue_system {system!r} is not known; write one of {', '.join(QUEUE_SYSTEMS)}"
        )
    if system == "kueue" and not manageable:
        raise SpecError(f"Kueue does not manage the {engine} engine's jobs; use Volcano queues")
    return system


def queue_of(obj: Obj) -> str | None:
    """The LocalQueue a job was submitted to, if Kueue manages it."""
    return ((obj.get("metadata") or {}).get("labels") or {}).get(KUEUE_QUEUE_LABEL)


async def workload_reason(api: KubeApi, obj: Obj) -> str | None:
    """Why a Kueue-managed job waits, from its Workload; None once Kueue admitted it."""
    queue = queue_of(obj)
    if queue is None:
        return None
    meta = obj["metadata"]
    selector = f"{JOB_UID_LABEL}={meta.get('uid', '')}"
    try:
        listed = await api.list(WORKLOADS, meta["namespace"], selector, "read the job's Workload")
    except DistrunError:
        return None
    workloads = listed.get("items") or []
    if not workloads:
        return f"waiting for Kueue to queue it in LocalQueue {queue} (is Kueue running?)"
    return describe_workload(queue, workloads[0])


def describe_workload(queue: str, workload: Obj) -> str | None:
    conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}

    def true(kind: str) -> Obj | None:
        condition = conditions.get(kind)
        return condition if condition and condition.get("status") == "True" else None

    if true("Finished"):
        return None
    preempted, evicted = true("Preempted"), true("Evicted")
    if evicted and not true("QuotaReserved"):
        why = (preempted or evicted).get("message") or evicted.get("reason") or "evicted"
        verb = "preempted" if preempted or evicted.get("reason") == "Preempted" else "evicted"
        return f"{verb} by Kueue ({why}); waiting in LocalQueue {queue} to be admitted again"
    if true("Admitted"):
        return None
    reserved = conditions.get("QuotaReserved")
    if true("QuotaReserved"):
        cluster_queue = ((workload.get("status") or {}).get("admission") or {}).get(
            "clusterQueue", "its ClusterQueue"
        )
        return f"quota reserved in ClusterQueue {cluster_queue}; waiting for admission checks"
    message = (reserved or {}).get("message")
    if message:
        return f"waiting in Kueue LocalQueue {queue}: {message}"
    return f"waiting in Kueue LocalQueue {queue} for quota"
