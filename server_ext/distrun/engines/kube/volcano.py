"""The Volcano engine: a `batch.volcano.sh` Job with one task per role, gang-scheduled by the
Volcano scheduler; the shipped launcher gives each replica the local engine's variables."""

from distrun.core.errors import DistrunError
from distrun.core.frameworks import FRAMEWORKS
from distrun.core.job import Job, JobState
from distrun.core.spec import JobSpec
from distrun.engines.kube.client import KubeApi, Obj, Resource
from distrun.engines.kube.engine import KubeEngine, Phase, k8s_time
from distrun.engines.kube.manifests.common import Target
from distrun.engines.kube.manifests.configmap import CodeBundle
from distrun.engines.kube.manifests.volcano import (
    LABEL_JOB_NAME,
    LABEL_TASK,
    LABEL_TASK_INDEX,
    PLURAL,
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

    def phase(self, obj: Obj) -> Phase:
        state = (obj.get("status") or {}).get("state") or {}
        job_state = _PHASES.get(state.get("phase", ""))
        reason = state.get("message") or state.get("reason") or None
        when = k8s_time(state.get("lastTransitionTime"))
        if job_state is None:
            return Phase(None)
        if job_state.terminal:
            return Phase(job_state, reason, None, when)
        if job_state == JobState.PENDING:
            return Phase(job_state, reason)
        return Phase(job_state)

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
        return reason or await super().waiting_reason(api, obj, job)


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
    blocked = [
        c
        for c in status.get("conditions") or []
        if c.get("type") == "Unschedulable" and c.get("status") == "True"
    ]
    if blocked:
        latest = max(blocked, key=lambda c: c.get("lastTransitionTime") or "")
        message = (latest.get("message") or latest.get("reason") or "").strip()
        if message:
            words += f": {message}"
    return words
