"""The Volcano engine: a `batch.volcano.sh` Job with one task per role, gang-scheduled by the
Volcano scheduler; the shipped launcher gives each replica the local engine's variables."""

from distrun.core.errors import DistrunError
from distrun.core.frameworks import FRAMEWORKS
from distrun.core.job import Job, JobState
from distrun.core.spec import JobSpec
from distrun.engines.kube.client import KubeApi, Obj, Resource, accesses
from distrun.engines.kube.engine import KubeEngine, Phase, annotated_count, k8s_time
from distrun.engines.kube.gpu_modes import gpu_shortage
from distrun.engines.kube.manifests.common import Target
from distrun.engines.kube.manifests.configmap import CodeBundle
from distrun.engines.kube.manifests.volcano import (
    ANNOTATION_RETRY_COUNT,
    LABEL_JOB_NAME,
    LABEL_TASK,
    LABEL_TASK_INDEX,
    PLURAL,
    check_fault_tolerance,
    volcano_bundle,
    volcano_job,
)

PODGROUPS = Resource("scheduling.volcano.sh", "v1beta1", "podgroups")
_PHASES = {
    "Pending": JobState.PENDING,
    "Running": JobState.RUNNING,
    "Restarting": JobState.RUNNING,
    "Completing": JobState.RUNNING,
    "Terminating": JobState.RUNNING,
    "Aborting": JobState.RUNNING,
    "Completed": JobState.SUCCEEDED,
    "Failed": JobState.FAILED,
    "Terminated": JobState.FAILED,
    "Aborted": JobState.CANCELLED,
}


class VolcanoEngine(KubeEngine):
    name = "volcano"
    description = "Volcano jobs: one task per role, gang-scheduled (all replicas or none)."
    operator = "Volcano (its scheduler and job controller)"
    kinds = ("Job",)
    kueue_manages = False  # Kueue has no integration for Volcano jobs
    resources = (Resource("batch.volcano.sh", "v1alpha1", PLURAL),)
    extra_access = accesses(PODGROUPS, "get")  # why a gang waits

    def check_fault_tolerance(self, spec: JobSpec) -> None:
        check_fault_tolerance(spec)

    def build(self, spec: JobSpec, target: Target) -> tuple[Obj, CodeBundle]:
        bundle = volcano_bundle(spec, target)
        return volcano_job(spec, target, self.options, bundle), bundle

    def pod_selector(self, job_id: str) -> str:
        return f"{LABEL_JOB_NAME}={job_id}"

    def replica_of(self, pod: Obj, spec: JobSpec) -> str | None:
        meta = pod["metadata"]
        labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
        task = labels.get(LABEL_TASK) or annotations.get(LABEL_TASK, "")
        index = labels.get(LABEL_TASK_INDEX) or annotations.get(LABEL_TASK_INDEX, "")
        name = f"{task}-{index}"
        return name if name in spec.replica_names() else None

    def container_name(self, spec: JobSpec) -> str:
        return FRAMEWORKS[spec.framework].container_name

    def pod_attempt(self, pod: Obj) -> int:
        """The job's retryCount when the controller made the pod, plus one."""
        return annotated_count(pod, ANNOTATION_RETRY_COUNT) + 1

    def phase(self, obj: Obj) -> Phase:
        status = obj.get("status") or {}
        state = status.get("state") or {}
        job_state = _PHASES.get(state.get("phase", ""))
        reason = state.get("message") or state.get("reason") or None
        when = k8s_time(state.get("lastTransitionTime"))
        restarts = _restarts(obj, job_state)
        running, restarted = _attempt_times(obj)
        if job_state is None or job_state == JobState.RUNNING:
            reason = None
        finished = when if job_state is not None and job_state.terminal else None
        return Phase(job_state, reason, None, finished, restarts, "job", running, restarted)

    async def waiting_reason(self, api: KubeApi, obj: Obj, job: Job) -> str | None:
        """The PodGroup's word first: Volcano holds a gang that does not fit there (Pending:
        the queue has not admitted it; Inqueue: admitted, not yet placed), pods or not."""
        meta = obj["metadata"]
        name = f"{meta['name']}-{meta.get('uid', '')}"  # the Volcano job controller's naming
        try:
            group = await api.get(PODGROUPS, meta["namespace"], name, "read the PodGroup")
        except DistrunError:
            group = None
        reason = podgroup_reason(group) if group is not None else None
        if reason is not None and group is not None and not _has_cause(group):
            # The scheduler says why in an event when no condition does (a queue over its
            # capability leaves the PodGroup without one).
            cause = await podgroup_event(api, meta["namespace"], name)
            reason += f": {cause}{gpu_shortage(cause)}" if cause else ""
        return reason or await super().waiting_reason(api, obj, job)


def _restarts(obj: Obj, state: JobState | None) -> int:
    """How often the job restarted: RestartJob recreates every pod (new uids, each container's
    restartCount back at 0), so the job's retryCount says it, except that the failure that
    ends a job (retryCount reaching maxRetry) counts as a retry and restarted nothing."""
    retries = int((obj.get("status") or {}).get("retryCount") or 0)
    max_retry = int((obj.get("spec") or {}).get("maxRetry") or 0)
    if state == JobState.FAILED and max_retry and retries >= max_retry:
        return max_retry - 1
    return retries


def _attempt_times(obj: Obj) -> tuple[float | None, float | None]:
    """When the current attempt began running and when the job last restarted, from the
    controller's conditions (it keeps only the latest time of each phase: a Running before the
    latest Restarting was an earlier attempt's)."""
    latest: dict[str, float] = {}
    for condition in (obj.get("status") or {}).get("conditions") or []:
        when = k8s_time(condition.get("lastTransitionTime"))
        if when is not None and isinstance(condition.get("status"), str):
            latest[condition["status"]] = when
    restarted = latest.get("Restarting")
    running = latest.get("Running")
    if running is not None and restarted is not None and running < restarted:
        running = None
    return running, restarted


async def podgroup_event(api: KubeApi, namespace: str, name: str) -> str | None:
    """The latest Unschedulable event's message on the PodGroup `name`, if any."""
    selector = f"involvedObject.kind=PodGroup,involvedObject.name={name}"
    try:
        events = await api.list_events(namespace, selector, "read the PodGroup's events")
    except DistrunError:
        return None
    blocked = [e for e in events.get("items", []) if e.get("reason") == "Unschedulable"]
    if not blocked:
        return None
    latest = max(blocked, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
    return (latest.get("message") or "").strip() or None


def _unschedulable(group: Obj) -> list[Obj]:
    conditions = (group.get("status") or {}).get("conditions") or []
    return [c for c in conditions if c.get("type") == "Unschedulable" and c.get("status") == "True"]


def _has_cause(group: Obj) -> bool:
    return any((c.get("message") or c.get("reason") or "").strip() for c in _unschedulable(group))


def podgroup_reason(group: Obj) -> str | None:
    """Why a gang waits, in words, from its PodGroup; None once it is placed."""
    spec, status = group.get("spec") or {}, group.get("status") or {}
    queue = spec.get("queue") or "default"
    members = spec.get("minMember")
    gang = f"all {members} replicas" if members else "the whole gang"
    phase = status.get("phase") or "Pending"
    if phase == "Pending":
        words = f"waiting for queue {queue} to admit {gang} (gang scheduling)"
    elif phase == "Inqueue":
        words = f"admitted to queue {queue}; waiting until {gang} can be placed at once"
    else:
        return None
    blocked = _unschedulable(group)
    if blocked:
        latest = max(blocked, key=lambda c: c.get("lastTransitionTime") or "")
        message = (latest.get("message") or latest.get("reason") or "").strip()
        if message:
            words += f": {message}{gpu_shortage(message)}"
    return words
