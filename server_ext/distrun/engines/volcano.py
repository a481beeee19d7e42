"""The Volcano engine: a `batch.volcano.sh` Job with one task per role, gang-scheduled by the
Volcano scheduler; the shipped launcher gives each replica the local engine's variables."""

from ..errors import DistrunError
from ..frameworks import FRAMEWORKS
from ..manifests.common import Target
from ..manifests.configmap import CodeBundle
from ..manifests.volcano import (
    LABEL_JOB_NAME,
    LABEL_TASK,
    LABEL_TASK_INDEX,
    PLURAL,
    volcano_bundle,
    volcano_job,
)
from ..spec import JobSpec
from .base import JobState
from .kube_client import KubeApi, Obj, Resource
from .kube_engine import KubeEngine, Phase, k8s_time

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
    kinds = ("Job",)
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

    async def waiting_reason(self, api: KubeApi, obj: Obj) -> str | None:
        """The PodGroup's word first: Volcano keeps a gang that does not fit Pending there."""
        meta = obj["metadata"]
        name = f"{meta['name']}-{meta.get('uid', '')}"
        try:
            group = await api.get(PODGROUPS, meta["namespace"], name, "read the PodGroup")
        except DistrunError:
            return await super().waiting_reason(api, obj)
        for condition in (group.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
                return f"waiting for gang resources: {condition.get('message', '').strip()}"
        return await super().waiting_reason(api, obj)
