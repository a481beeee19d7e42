"""The Kubeflow Training Operator v1 engine: PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob
and MPIJob, chosen by the spec's framework. The operator creates the pods and injects the
framework's variables; status comes from the job's conditions."""

import contextlib
from dataclasses import replace

from distrun.core import jobids
from distrun.core.errors import DistrunError, NotFound
from distrun.core.job import JobState
from distrun.core.spec import JobSpec
from distrun.core.sweep import SweepSpec
from distrun.engines.kube.client import CONFIGMAPS, KubeApi, Obj, Resource, accesses
from distrun.engines.kube.engine import KubeEngine, Phase, conditions_phase
from distrun.engines.kube.katib import EXPERIMENTS, experiment_configmap, katib_experiment
from distrun.engines.kube.manifests.common import Target
from distrun.engines.kube.manifests.configmap import CodeBundle, code_bundle
from distrun.engines.kube.manifests.kubeflow import (
    KINDS,
    LABEL_JOB_NAME,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
    check_fault_tolerance,
    check_restart_policy,
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
    extra_access = accesses(EXPERIMENTS, "create", "delete")  # sweeps handed to Katib

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

    def check_fault_tolerance(self, spec: JobSpec) -> None:
        check_restart_policy(spec)
        check_fault_tolerance(spec)

    def build(self, spec: JobSpec, target: Target) -> tuple[Obj, CodeBundle]:
        bundle = code_bundle(spec, target)
        return kubeflow_job(spec, target, self.options, bundle), bundle

    async def submit_experiment(self, spec: JobSpec, sweep: SweepSpec, owner: str) -> Obj:
        """`sweep` of the job `spec` as a Katib Experiment (katib.py), for clusters with Katib:
        the Experiment, named like a job, then the code ConfigMap its trials mount, owned by
        it (trial pods created before it wait for their volume). If the ConfigMap cannot be
        made, the Experiment goes too. Returns the Experiment as created."""
        api = await self.api()
        namespace = self._namespace(spec, owner)
        target = Target(jobids.new_job_id(spec.name), namespace, owner)
        job, code = self.build(spec, target)
        experiment = katib_experiment(sweep, job, namespace, target.job_id)
        created = await api.create(EXPERIMENTS, namespace, experiment, "create the experiment")
        configmap = experiment_configmap(code.configmap, created)
        try:
            await api.create(CONFIGMAPS, namespace, configmap, "store the experiment's code")
        except DistrunError:
            with contextlib.suppress(DistrunError):
                await api.delete(EXPERIMENTS, namespace, target.job_id, "remove it")
            raise
        return created

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
        """The conditions' phase; a restart here is always of the failed replica, in its pod
        (restartPolicy per replica type), whatever the framework."""
        return replace(conditions_phase(obj, _TERMINAL, _RUNNING), restart_scope="replica")
