"""Kubeflow Training Operator v1 jobs (`kubeflow.org/v1`): PyTorchJob, TFJob, XGBoostJob,
PaddleJob, JAXJob, MPIJob.

The operator injects the framework's variables itself, so each role's template carries only
what is the same for all its replicas; the replica's own name comes from the operator's
`replica-index` label through the downward API. The operator's admission webhooks are not part
of the CRD schemas, so `check_webhook_rules` enforces them here before anything is sent.
"""

from typing import Any

from distrun.core.entrypoint import argv
from distrun.core.errors import SpecError
from distrun.core.frameworks import FRAMEWORKS, Framework
from distrun.core.replica_env import PYTORCH_NPROC_PER_NODE
from distrun.core.spec import JobSpec
from distrun.engines.kube.manifests.common import (
    CODE_DIR,
    ClusterOptions,
    Target,
    base_env,
    container_security,
    env_list,
    job_labels,
    kueue_metadata,
    kueue_queue,
    pod_spec_extras,
    priority_class,
    queue,
    resources,
)
from distrun.engines.kube.manifests.configmap import CodeBundle

API_VERSION = "kubeflow.org/v1"
LABEL_JOB_NAME = "training.kubeflow.org/job-name"
LABEL_REPLICA_TYPE = "training.kubeflow.org/replica-type"
LABEL_REPLICA_INDEX = "training.kubeflow.org/replica-index"

# kind -> (plural, the spec's replica-specs key)
KINDS: dict[str, tuple[str, str]] = {
    "PyTorchJob": ("pytorchjobs", "pytorchReplicaSpecs"),
    "TFJob": ("tfjobs", "tfReplicaSpecs"),
    "XGBoostJob": ("xgboostjobs", "xgbReplicaSpecs"),
    "PaddleJob": ("paddlejobs", "paddleReplicaSpecs"),
    "JAXJob": ("jaxjobs", "jaxReplicaSpecs"),
    "MPIJob": ("mpijobs", "mpiReplicaSpecs"),
}
# Replica types whose count the webhooks pin to exactly one.
_EXACTLY_ONE = {"PyTorchJob": "Master", "XGBoostJob": "Master", "MPIJob": "Launcher"}


def kubeflow_framework(spec: JobSpec) -> Framework:
    framework = FRAMEWORKS[spec.framework]
    if framework.kubeflow_kind is None:
        kinds = ", ".join(name for name, fw in FRAMEWORKS.items() if fw.kubeflow_kind)
        raise SpecError(
            f"the Kubeflow Training Operator has no job kind for {spec.framework}; use one of "
            f"{kinds}, or another engine",
            field="framework",
        )
    return framework


def kubeflow_job(
    spec: JobSpec, target: Target, options: ClusterOptions, code: CodeBundle
) -> dict[str, Any]:
    """The operator's job object for `spec`, checked against the webhook rules."""
    framework = kubeflow_framework(spec)
    kind = framework.kubeflow_kind
    assert kind is not None
    check_restart_policy(spec)
    _plural, specs_key = KINDS[kind]
    replica_specs = {
        framework.role(role).kubeflow_name: {
            "replicas": role_spec.replicas,
            "restartPolicy": spec.restart_policy,
            "template": _template(spec, target, options, code, framework, role),
        }
        for role, role_spec in spec.roles.items()
    }
    body: dict[str, Any] = {specs_key: replica_specs, "runPolicy": run_policy(spec, options)}
    if kind == "MPIJob":
        body["slotsPerWorker"] = 1
    if kind == "PyTorchJob":
        body["nprocPerNode"] = PYTORCH_NPROC_PER_NODE  # not the operator's "auto"
    job = {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": kueue_metadata(target, spec, options),
        "spec": body,
    }
    check_webhook_rules(job)
    return job


def run_policy(spec: JobSpec, options: ClusterOptions) -> dict[str, Any]:
    policy: dict[str, Any] = {
        "cleanPodPolicy": spec.clean_pod_policy,
        "backoffLimit": spec.backoff_limit,
    }
    if spec.ttl_seconds_after_finished is not None:
        policy["ttlSecondsAfterFinished"] = spec.ttl_seconds_after_finished
    if spec.active_deadline_seconds is not None:
        policy["activeDeadlineSeconds"] = spec.active_deadline_seconds
    if kueue_queue(spec, options):
        policy["suspend"] = True  # Kueue resumes it once its ClusterQueue admits it
    job_queue = None if options.queue_system == "kueue" else queue(spec, options)
    priority = priority_class(spec, options)
    if job_queue or priority:
        # Gang scheduling (Volcano / scheduler-plugins): all replicas or none.
        scheduling: dict[str, Any] = {"minAvailable": spec.replica_count}
        if job_queue:
            scheduling["queue"] = job_queue
        if priority:
            scheduling["priorityClass"] = priority
        policy["schedulingPolicy"] = scheduling
    return policy


def _template(
    spec: JobSpec,
    target: Target,
    options: ClusterOptions,
    code: CodeBundle,
    framework: Framework,
    role: str,
) -> dict[str, Any]:
    env = env_list({**base_env(spec, target.job_id), "DISTRUN_ROLE": role})
    if framework.role(role).max_replicas == 1:
        # The MPI launcher carries no replica-index label; a single replica is index 0 anyway.
        env.append({"name": "DISTRUN_REPLICA_INDEX", "value": "0"})
    else:
        label = f"metadata.labels['{LABEL_REPLICA_INDEX}']"
        env.append(
            {"name": "DISTRUN_REPLICA_INDEX", "valueFrom": {"fieldRef": {"fieldPath": label}}}
        )
    env.append({"name": "DISTRUN_REPLICA", "value": "$(DISTRUN_ROLE)-$(DISTRUN_REPLICA_INDEX)"})
    container: dict[str, Any] = {
        "name": framework.container_name,
        "image": options.image(spec),
        "command": argv(options.python, code.entrypoint),
        "workingDir": CODE_DIR,
        "env": env,
        "ports": [{"name": framework.port_name, "containerPort": framework.default_port}],
        "volumeMounts": [code.mount],
        "securityContext": container_security(options),
    }
    res = resources(spec.roles[role].resources, options.gpu, role)
    if res:
        container["resources"] = res
    return {
        "metadata": {"labels": job_labels(target.job_id, target.owner)},
        "spec": {"containers": [container], "volumes": [code.volume], **pod_spec_extras(options)},
    }


def check_restart_policy(spec: JobSpec) -> None:
    """The policies the operator holds to `backoff_limit` as the local engine does. With
    ExitCode it deletes and re-creates a pod that exited with a retryable code (128 and above)
    without counting it (core.PastBackoffLimit counts only the restarts of running
    containers), so such a job would restart for ever."""
    if spec.restart_policy == "ExitCode":
        raise SpecError(
            "the Kubeflow Training Operator restarts an ExitCode failure (exit 128 and above) "
            "without limit, whatever backoff_limit says; use restart_policy OnFailure, or the "
            "local or Volcano engine",
            field="restart_policy",
        )


def check_webhook_rules(job: dict[str, Any]) -> None:
    """The Training Operator's validating webhooks (pkg/webhooks/*, mpi_validation.go, v1.9.4):
    a DNS-1035 name, known replica types, a container of the kind's name with an image in each,
    exactly one PyTorch/XGBoost master and one MPI launcher, no negative replica counts."""
    kind = job.get("kind")
    if kind not in KINDS:
        raise SpecError(f"unknown Kubeflow job kind {kind!r}; known: {', '.join(KINDS)}")
    framework = next(fw for fw in FRAMEWORKS.values() if fw.kubeflow_kind == kind)
    specs = job["spec"].get(KINDS[kind][1]) or {}
    if not specs:
        raise SpecError(f"a {kind} needs at least one replica type")
    allowed = {role.kubeflow_name for role in framework.roles}
    for replica_type, replica_spec in specs.items():
        where = f"{KINDS[kind][1]}.{replica_type}"
        if replica_type not in allowed:
            raise SpecError(
                f"{where}: {kind} has no replica type {replica_type!r}; use "
                f"{', '.join(sorted(allowed))}"
            )
        containers = replica_spec.get("template", {}).get("spec", {}).get("containers") or []
        if not any(c.get("name") == framework.container_name for c in containers):
            raise SpecError(f"{where}: needs a container named {framework.container_name!r}")
        if not all(c.get("image") for c in containers):
            raise SpecError(f"{where}: every container needs an image")
        replicas = replica_spec.get("replicas")
        if _EXACTLY_ONE.get(kind) == replica_type and replicas != 1:
            raise SpecError(f"{where}: a {kind} needs exactly one {replica_type}, not {replicas}")
        if replicas is not None and replicas < 0:
            raise SpecError(f"{where}: replicas cannot be negative")
    if kind == "MPIJob" and "Launcher" not in specs:
        raise SpecError("an MPIJob needs exactly one Launcher")
    if kind == "PyTorchJob" and "Master" not in specs:
        raise SpecError("a PyTorchJob needs exactly one Master (no elastic policy is set)")
