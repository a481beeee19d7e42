"""The Kubeflow Training Operator v1 engine: PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob
and MPIJob, chosen by the spec's framework. The operator creates the pods and injects the
framework's variables; status comes from the job's conditions."""

from distrun.core.errors import NotFound
from distrun.core.job import JobState
from distrun.core.spec import JobSpec
from distrun.engines.kube.client import CONFIGMAPS, KubeApi, Obj, Resource
from distrun.engines.kube.engine import KubeEngine, Phase, conditions_phase
from distrun.engines.kube.manifests.common import Target
from distrun.engines.kube.manifests.configmap import CodeBundle, code_bundle
from distrun.engines.kube.manifests.kubeflow import (
    KINDS,
    LABEL_JOB_NAME,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
    kubeflow_framework,
    kubeflow_job,
)

_TERMINAL = {"Succeeded": JobState.SUCCEEDED, "Failed": JobState.FAILED}
_RUNNING = ("Running", "Restarting")


class KubeflowEngine(KubeEngine):
    name = "kubeflow"
    description = "Kubeflow Training Operator v1 jobs (PyTorchJob, TFJob, MPIJob, ...)."
    operator = "the Kubeflow Training Operator v1 (v1.9 or later)"
    kinds = tuple(KINDS)
    resources = tuple(Resource("kubeflow.org", "v1", plural) for plural, _key in KINDS.values())

    def resource_for(self, spec: JobSpec) -> Resource:
        kind = kubeflow_framework(spec).kubeflow_kind
        assert kind is not None
        return self.resources[self.kinds.index(kind)]

    async def candidates(self, api: KubeApi, namespace: str, job_id: str) -> tuple[Resource, ...]:
        """The job's kind, read from its ConfigMap's owner reference (one call instead of six);
        every kind while the ConfigMap does not exist yet."""
        try:
            configmap = await api.get(CONFIGMAPS, namespace, job_id, "read the job's code")
        except NotFound:
            return self.resources
        for reference in configmap["metadata"].get("ownerReferences") or []:
            if reference.get("kind") in self.kinds:
                return (self.resources[self.kinds.index(reference["kind"])],)
        return self.resources

    def build(self, spec: JobSpec, target: Target) -> tuple[Obj, CodeBundle]:
        bundle = code_bundle(spec, target)
        return kubeflow_job(spec, target, self.options, bundle), bundle

    def pod_selector(self, job_id: str) -> str:
        return f"{LABEL_JOB_NAME}={job_id}"

    def replica_of(self, pod: Obj, spec: JobSpec) -> str | None:
        labels = pod["metadata"].get("labels") or {}
        role = labels.get(LABEL_REPLICA_TYPE, "")
        index = labels.get(LABEL_REPLICA_INDEX, "0")
        name = f"{role.lower()}-{index}"
        return name if name in spec.replica_names() else None

    def container_name(self, spec: JobSpec) -> str:
        return kubeflow_framework(spec).container_name

    def phase(self, obj: Obj) -> Phase:
        return conditions_phase(obj, _TERMINAL, _RUNNING)
