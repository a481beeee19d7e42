"""The Kubeflow Trainer v2 engine: a TrainJob against a (Cluster)TrainingRuntime per framework
(`torch-distributed` for PyTorch). Trainer builds a JobSet whose Indexed Job runs the nodes;
node i is the spec's i-th replica in role order, so `master-0` is node 0."""

import asyncio
import contextlib
import dataclasses
from typing import Any

from distrun.core.errors import Conflict, DistrunError, Forbidden, NotFound, SpecError
from distrun.core.job import Job, JobState
from distrun.core.spec import JobSpec
from distrun.engines.kube.client import KubeApi, Obj, Resource, accesses
from distrun.engines.kube.engine import (
    KubeEngine,
    Phase,
    annotated_count,
    conditions_phase,
    owner_reference,
)
from distrun.engines.kube.manifests.common import Target
from distrun.engines.kube.manifests.configmap import CodeBundle
from distrun.engines.kube.manifests.trainer import (
    ANNOTATION_RESTART_ATTEMPT,
    CLUSTER_RUNTIME_PLURAL,
    DEFAULT_RUNTIMES,
    LABEL_COMPLETION_INDEX,
    LABEL_JOBSET_NAME,
    LABEL_REPLICATED_JOB,
    PATCH_MANAGER,
    PLURAL,
    REPLICATED_JOB,
    RUNTIME_PLURAL,
    check_fault_tolerance,
    restart_runtime,
    restarts_whole_job,
    trainer_bundle,
    trainjob,
)

_TERMINAL = {"Complete": JobState.SUCCEEDED, "Failed": JobState.FAILED}
# Kueue before v0.17 writes a TrainJob back through Trainer v2.0's API types, which have no
# runtimePatches: the update it makes to start the job erases distrun's patch (and Trainer then
# applies a JobSet whose pod template has lost its metadata, which the API server refuses).
PATCH_REMOVED = (
    "the TrainJob lost distrun's runtime patch (code volume, labels, hardened container) "
    "when it was admitted: this cluster's Kueue predates Trainer v2.2's TrainJob API "
    "(Kueue v0.17 or newer is needed with Trainer v2.2 and later)"
)

# The chart grants the read without profiles; with them, only where the administrator says.
RUNTIME_UNREADABLE = (
    "a whole-job restart on Trainer v2 runs on a copy of the job's ClusterTrainingRuntime, "
    "which this server may not read: the administrator can allow it (distrun's chart: "
    "trainer.readClusterRuntimes), or run the job on the volcano or local engine"
)

RESOURCE = Resource("trainer.kubeflow.org", "v1alpha1", PLURAL)
RUNTIMES = Resource("trainer.kubeflow.org", "v1alpha1", RUNTIME_PLURAL)
CLUSTER_RUNTIMES = Resource("trainer.kubeflow.org", "v1alpha1", CLUSTER_RUNTIME_PLURAL)
SUSPEND_WAIT_SECONDS = 10.0


class TrainerEngine(KubeEngine):
    name = "trainer"
    description = "Kubeflow Trainer v2 TrainJobs against a training runtime."
    operator = "Kubeflow Trainer v2 and its training runtimes"
    kinds = ("TrainJob",)
    resources = (RESOURCE,)
    # Trainer v2.3.0 reconciles a TrainJob that waits for its dependents (Foreground deletion)
    # and applies its JobSet again as the garbage collector deletes it: new pods keep coming.
    # Deleted in the Background, the TrainJob goes at once and its JobSet, Jobs, pods and
    # ConfigMaps follow it. Even then a reconcile from Trainer's cache, not yet told of the
    # deletion, can apply the JobSet once more (pods seen starting after a cancel): so the
    # TrainJob is suspended first (`before_removal`).
    deletion_propagation = "Background"
    # patch: suspended before a cancel; a whole-job restart's own runtime (read from the
    # configured one, namespaced or cluster-wide), owned by its TrainJob.
    extra_access = (
        *accesses(RESOURCE, "patch"),
        *accesses(RUNTIMES, "get", "create", "patch", "delete"),
        *accesses(CLUSTER_RUNTIMES, "get"),
    )

    def __init__(
        self,
        *,
        runtimes: dict[str, str] | None = None,
        runtime_kind: str = "ClusterTrainingRuntime",
        **kwargs: Any,
    ) -> None:
        """`runtimes` maps a framework to the runtime its jobs use (default: torch-distributed,
        jax-distributed, xgboost-distributed); `runtime_kind` is ClusterTrainingRuntime or
        TrainingRuntime (namespaced). Other arguments as for every Kubernetes engine."""
        super().__init__(**kwargs)
        self.runtimes = dict(DEFAULT_RUNTIMES if runtimes is None else runtimes)
        self.runtime_kind = runtime_kind

    async def before_removal(self, api: KubeApi, obj: Obj) -> None:
        """Suspends a running TrainJob and waits (a few seconds at most) until Trainer says it
        is: Trainer applies the JobSet suspended before it sets that condition, so from then
        on its cache holds the suspended TrainJob, and a reconcile after the deletion can only
        apply a JobSet that starts no pod."""
        if obj.get("metadata", {}).get("deletionTimestamp") or _suspended(obj):
            return
        namespace, job_id = obj["metadata"]["namespace"], obj["metadata"]["name"]
        suspend = [{"op": "add", "path": "/spec/suspend", "value": True}]
        try:
            await api.patch(RESOURCE, namespace, job_id, suspend, "suspend the job to cancel it")
        except (NotFound, Conflict, SpecError):
            return  # gone, finished or refused: the deletion does the rest
        deadline = asyncio.get_running_loop().time() + SUSPEND_WAIT_SECONDS
        while asyncio.get_running_loop().time() < deadline:
            try:
                current = await api.get(RESOURCE, namespace, job_id, "read the job")
            except NotFound:
                return
            if _suspended(current):
                return
            await asyncio.sleep(0.2)

    def check_fault_tolerance(self, spec: JobSpec) -> None:
        check_fault_tolerance(spec)

    def build(self, spec: JobSpec, target: Target) -> tuple[Obj, CodeBundle]:
        runtime = self._runtime(spec)
        bundle = trainer_bundle(spec, target)
        job = trainjob(
            spec, target, self.options, bundle, runtime=runtime, runtime_kind=self.runtime_kind
        )
        return job, bundle

    async def prepare_job(self, api: KubeApi, spec: JobSpec, target: Target) -> list[str]:
        """A whole-job restart's runtime, copied from the configured one."""
        if not restarts_whole_job(spec):
            return []
        name, what = self._runtime(spec), "read the training runtime to restart the job with"
        if self.runtime_kind == "TrainingRuntime":
            base = await api.get(RUNTIMES, target.namespace, name, what)
        else:
            try:
                base = await api.get_cluster(CLUSTER_RUNTIMES, name, what)
            except Forbidden as error:
                raise Forbidden(f"{error}; {RUNTIME_UNREADABLE}") from None
        runtime = restart_runtime(spec, target, base)
        await api.create(RUNTIMES, target.namespace, runtime, "create the job's training runtime")
        return [runtime["metadata"]["name"]]

    async def adopt_prepared(self, api: KubeApi, job: Obj, prepared: list[str]) -> None:
        owned = [
            {"op": "add", "path": "/metadata/ownerReferences", "value": [owner_reference(job)]}
        ]
        for name in prepared:
            await api.patch(
                RUNTIMES, job["metadata"]["namespace"], name, owned, "hand the runtime to the job"
            )

    async def remove_prepared(self, api: KubeApi, namespace: str, prepared: list[str]) -> None:
        for name in prepared:
            with contextlib.suppress(DistrunError):
                await api.delete(
                    RUNTIMES, namespace, name, "remove the job's runtime", "Background"
                )

    def _runtime(self, spec: JobSpec) -> str:
        runtime = self.runtimes.get(spec.framework)
        if runtime is None:
            raise SpecError(
                f"this server has no Trainer runtime for {spec.framework}; frameworks with one: "
                f"{', '.join(sorted(self.runtimes)) or 'none'}",
                field="framework",
            )
        return runtime

    def pod_selector(self, job_id: str) -> str:
        return f"{LABEL_JOBSET_NAME}={job_id},{LABEL_REPLICATED_JOB}={REPLICATED_JOB}"

    def replica_of(self, pod: Obj, spec: JobSpec) -> str | None:
        meta = pod["metadata"]
        index = (meta.get("labels") or {}).get(LABEL_COMPLETION_INDEX) or (
            meta.get("annotations") or {}
        ).get(LABEL_COMPLETION_INDEX, "")
        names = spec.replica_names()
        # The pod's labels are the user's to write (through the job's template): an index is
        # ASCII digits, few enough to be a replica's ("²".isdigit() holds; int() refuses it).
        if not (isinstance(index, str) and index.isascii() and index.isdigit()):
            return None
        return names[int(index)] if len(index) <= 6 and int(index) < len(names) else None

    def container_name(self, spec: JobSpec) -> str:
        return REPLICATED_JOB

    def pod_attempt(self, pod: Obj) -> int:
        """JobSet's restart count when it made the pod, plus one."""
        return annotated_count(pod, ANNOTATION_RESTART_ATTEMPT) + 1

    def phase_with_pods(self, obj: Obj, spec: JobSpec, pods: dict[str, Obj]) -> Phase:
        """A whole-job restart's count is JobSet's, which labels every pod it makes."""
        phase = self.phase(obj)
        if not restarts_whole_job(spec):
            return phase
        restarts = max((self.pod_attempt(pod) for pod in pods.values()), default=1) - 1
        return dataclasses.replace(phase, restarts=restarts, restart_scope="job")

    async def waiting_reason(self, api: KubeApi, obj: Obj, job: Job) -> str | None:
        if not _has_distruns_patch(obj):
            return PATCH_REMOVED  # what the JobSet's refusal or Kueue's admission cannot say
        return await super().waiting_reason(api, obj, job)

    def phase(self, obj: Obj) -> Phase:
        phase = conditions_phase(obj, _TERMINAL, ())
        conditions = (obj.get("status") or {}).get("conditions") or []
        suspended = any(
            c.get("type") == "Suspended" and c.get("status") == "True" for c in conditions
        )
        ended = phase.state is not None and phase.state.terminal
        if not ended and not _has_distruns_patch(obj):
            return Phase(JobState.PENDING, PATCH_REMOVED, phase.started_at)
        if phase.state is None and suspended:
            return Phase(JobState.PENDING, "suspended", phase.started_at)
        return phase


def _has_distruns_patch(obj: Obj) -> bool:
    patches = (obj.get("spec") or {}).get("runtimePatches") or []
    return any(isinstance(p, dict) and p.get("manager") == PATCH_MANAGER for p in patches)


def _suspended(obj: Obj) -> bool:
    """Whether Trainer has taken the TrainJob's suspension in (its Suspended condition)."""
    return any(
        c.get("type") == "Suspended" and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )
