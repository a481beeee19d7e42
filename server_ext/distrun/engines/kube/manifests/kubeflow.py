"""Kubeflow Training Operator v1 jobs (`kubeflow.org/v1`): PyTorchJob, TFJob, XGBoostJob,
PaddleJob, JAXJob, MPIJob.

The operator injects the framework's variables itself, so each role's template carries only
what is the same for all its replicas; the replica's own name comes from the operator's
`replica-index` label through the downward API. The operator's admission webhooks are not part
of the CRD schemas, so `check_webhook_rules` enforces them here before anything is sent.

The operator restarts each replica alone (`restartPolicy` per replica type, `backoffLimit`
summed over the replicas' restarts): it cannot restart a whole job, so `%restart=job` is
refused in words. `%elastic=MIN:MAX` maps onto the PyTorchJob's `elasticPolicy`: every replica
runs torch's elastic agent, which the operator configures through `PET_*` variables, meeting at
a c10d rendezvous on master-0.
"""

from typing import Any

from distrun.core.checkpoint_env import RESTART_ENV
from distrun.core.elastic_agent import AGENT_ENV, RDZV_CONF
from distrun.core.entrypoint import argv
from distrun.core.errors import SpecError
from distrun.core.frameworks import FRAMEWORKS, Framework
from distrun.core.replica_env import PYTORCH_NPROC_PER_NODE
from distrun.core.restarts import RestartPlan, restart_plan
from distrun.core.spec import JobSpec
from distrun.engines.kube.manifests.common import (
    CODE_DIR,
    ClusterOptions,
    Target,
    base_env,
    checkpoint_mounts,
    checkpoint_volumes,
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
    check_fault_tolerance(spec)
    plan = restart_plan(spec)
    _plural, specs_key = KINDS[kind]
    replica_specs = {
        framework.role(role).kubeflow_name: {
            "replicas": role_spec.replicas,
            "restartPolicy": plan.policy if plan.scope else "Never",
            "template": _template(spec, target, options, code, framework, role),
        }
        for role, role_spec in spec.roles.items()
    }
    body: dict[str, Any] = {specs_key: replica_specs, "runPolicy": run_policy(spec, options)}
    if kind == "MPIJob":
        body["slotsPerWorker"] = 1
    if kind == "PyTorchJob":
        body["nprocPerNode"] = PYTORCH_NPROC_PER_NODE  # not the operator's "auto"
    if spec.elastic_range is not None:
        body["elasticPolicy"] = elastic_policy(spec, target, framework, plan)
    job = {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": kueue_metadata(target, spec, options),
        "spec": body,
    }
    check_webhook_rules(job)
    return job


def check_fault_tolerance(spec: JobSpec) -> None:
    """What the operator cannot hold: a whole-job restart, and a job-level count of restarts of
    a synchronous job (it would restart the failed replica alone, which its peers cannot use)
    unless the user says that is what they want."""
    if spec.restart == "job":
        raise SpecError(
            "%restart=job cannot run on the Kubeflow Training Operator: it restarts each "
            "failed replica alone (its peers keep waiting in their collective); run on the "
            "volcano engine (RestartJob) or the local engine to restart the whole job, or "
            "write %restart=replica to restart the failed replica alone here",
            field="restart",
        )
    if spec.max_restarts is not None and restart_plan(spec).scope == "job":
        raise SpecError(
            f"%maxRestarts asks for whole-job restarts of a {spec.framework} job, which the "
            "Kubeflow Training Operator cannot do (it restarts each failed replica alone); "
            "write %restart=replica with it to accept that, or run on the volcano or local "
            "engine",
            field="max_restarts",
        )


def elastic_policy(
    spec: JobSpec, target: Target, framework: Framework, plan: RestartPlan
) -> dict[str, Any]:
    """The PyTorchJob's elasticPolicy for `%elastic=MIN:MAX`: the operator passes each field
    to torch's agent as a `PET_*` variable (PET_NNODES=MIN:MAX, PET_RDZV_ENDPOINT, ...). The
    rendezvous is on master-0 (the operator's default, worker-0, would leave a job whose
    workers all failed without one); the agents re-form as often as the job may restart."""
    low, high = spec.elastic_range or (0, 0)
    return {
        "minReplicas": low,
        "maxReplicas": high,
        "rdzvBackend": "c10d",
        "rdzvHost": f"{target.job_id}-master-0",
        "rdzvPort": framework.default_port,
        "rdzvId": target.job_id,
        "rdzvConf": [{"key": key, "value": value} for key, value in RDZV_CONF.items()],
        "maxRestarts": plan.limit,
    }


def run_policy(spec: JobSpec, options: ClusterOptions) -> dict[str, Any]:
    plan = restart_plan(spec)
    policy: dict[str, Any] = {
        "cleanPodPolicy": spec.clean_pod_policy,
        # The operator sums every replica's restarts against it: a count for the job.
        "backoffLimit": plan.limit if plan.scope else spec.backoff_limit,
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
    extra = {**AGENT_ENV, **spec.env} if spec.elastic is not None else {}
    # The operator restarts a failed replica in its pod, never the job: the job's run stays
    # the first, as on the local engine under %restart=replica.
    first_run = {RESTART_ENV: "0"}
    env = env_list({**base_env(spec, target.job_id), **extra, **first_run, "DISTRUN_ROLE": role})
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
        "command": _command(spec, options, code),
        "workingDir": CODE_DIR,
        "env": env,
        "ports": [{"name": framework.port_name, "containerPort": framework.default_port}],
        "volumeMounts": [code.mount, *checkpoint_mounts(spec)],
        "securityContext": container_security(options),
    }
    res = resources(spec.roles[role].resources, options.gpu, role)
    if res:
        container["resources"] = res
    return {
        "metadata": {"labels": job_labels(target.job_id, target.owner)},
        "spec": {
            "containers": [container],
            "volumes": [code.volume, *checkpoint_volumes(spec)],
            **pod_spec_extras(options),
        },
    }


def _command(spec: JobSpec, options: ClusterOptions, code: CodeBundle) -> list[str]:
    """The replica's command; with `%elastic`, torch's agent running it (the agent reads its
    settings from the operator's PET_* variables; `--no-python` runs the same command line as
    without, `main.py` or IPython's `main.ipy`)."""
    command = argv(options.python, code.entrypoint)
    if spec.elastic is None:
        return command
    return [options.python, "-m", "torch.distributed.run", "--no-python", *command]


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
