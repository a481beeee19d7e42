"""Volcano jobs (`batch.volcano.sh/v1alpha1` Job): one task per role, gang-scheduled.

`minAvailable` is every replica (all or nothing, as parameter-server jobs need); the `env` and
`svc` plugins give each pod `VC_TASK_INDEX` and a stable host name `{job}-{task}-{index}.{job}`;
a failed or evicted pod restarts the whole job as the spec's restart policy says
(`backoff_limit` times at most, so `maxRetry` is one more; `Never`: none) and the chief or
master task completing completes the job. Every restart is of the whole job (`RestartJob`:
every pod recreated), counted for the job by `maxRetry`, so `%restart=job` and `%maxRestarts`
map onto it; a replica cannot restart alone, nor can torch's elastic agent re-form a gang. Volcano injects no framework variables, and a task's
template is shared by its replicas, so the shipped launcher sets each replica's variables
(computed by `replica_env`, as for the local engine) from its task and `VC_TASK_INDEX`:
one task per role as the plugins expect, no shell, and code that runs unchanged.
"""

from typing import Any

from distrun.core.entrypoint import argv
from distrun.core.errors import SpecError
from distrun.core.frameworks import FRAMEWORKS
from distrun.core.replica_env import replica_addresses, split_replica
from distrun.core.restarts import restart_plan
from distrun.core.spec import JobSpec
from distrun.engines.kube.manifests.common import (
    CODE_DIR,
    ClusterOptions,
    Target,
    attempt_variable,
    base_env,
    checkpoint_mounts,
    checkpoint_volumes,
    container_security,
    env_list,
    job_labels,
    object_metadata,
    pod_spec_extras,
    priority_class,
    queue,
    resources,
)
from distrun.engines.kube.manifests.configmap import LAUNCHER_PATH, CodeBundle, code_bundle
from distrun.engines.kube.manifests.replica_table import support_files

API_VERSION = "batch.volcano.sh/v1alpha1"
PLURAL = "jobs"
SCHEDULER = "volcano"
DEFAULT_QUEUE = "default"
INDEX_VARIABLE = "VC_TASK_INDEX"
LABEL_JOB_NAME = "volcano.sh/job-name"
LABEL_TASK = "volcano.sh/task-spec"
LABEL_TASK_INDEX = "volcano.sh/task-index"
ANNOTATION_RETRY_COUNT = "volcano.sh/job-retry-count"  # the job's retryCount at the pod's making
# The exits the Training Operator's ExitCode policy (and the local engine) retry: signals.
RETRYABLE_EXIT_CODES = range(128, 256)


def task_host(job_id: str, replica: str, spec: JobSpec) -> str:
    role, index = split_replica(spec, replica)
    return f"{job_id}-{role}-{index}.{job_id}"


def volcano_bundle(spec: JobSpec, target: Target) -> CodeBundle:
    port = FRAMEWORKS[spec.framework].default_port
    addresses = replica_addresses(
        spec,
        host_for=lambda name: task_host(target.job_id, name, spec),
        port_for=lambda _name: port,
    )
    groups = {role: [f"{role}-{i}" for i in range(rs.replicas)] for role, rs in spec.roles.items()}
    support = support_files(
        spec, target.job_id, index_variable=INDEX_VARIABLE, groups=groups, addresses=addresses
    )
    return code_bundle(spec, target, support)


def check_fault_tolerance(spec: JobSpec) -> None:
    """What Volcano cannot hold: a replica restarting alone (its policies restart the whole
    job, or a task's every pod) and an elastic group (a gang starts all its pods or none)."""
    if spec.elastic is not None:
        raise SpecError(
            f"%elastic={spec.elastic} cannot run on Volcano: its gang starts every replica or "
            "none, and its restarts recreate the whole job; run elastic jobs on the kubeflow "
            "engine (PyTorchJob elasticPolicy) or the local engine, or drop %elastic here",
            field="elastic",
        )
    if spec.restart == "replica":
        raise SpecError(
            "%restart=replica cannot run on Volcano: a failed pod restarts the whole job there "
            "(RestartJob, every pod recreated); drop %restart (or write %restart=job), or run "
            "on the kubeflow or local engine to restart the failed replica alone",
            field="restart",
        )


def volcano_job(
    spec: JobSpec, target: Target, options: ClusterOptions, code: CodeBundle
) -> dict[str, Any]:
    check_fault_tolerance(spec)
    framework = FRAMEWORKS[spec.framework]
    plan = restart_plan(spec)
    tasks = []
    for role in framework.role_names:  # the framework's order: chief/master first
        if role not in spec.roles:
            continue
        task: dict[str, Any] = {
            "name": role,
            "replicas": spec.roles[role].replicas,
            "template": _template(spec, target, options, code, role),
        }
        if role in framework.completion_roles:
            task["policies"] = [{"event": "TaskCompleted", "action": "CompleteJob"}]
        tasks.append(task)
    body: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "minAvailable": spec.replica_count,
        "queue": queue(spec, options) or DEFAULT_QUEUE,
        # Volcano counts the failure that ends the job as a retry (it fails a job once its
        # retry count reaches maxRetry), and its admission webhook turns 0 into 3. The count is
        # the job's, as `%maxRestarts` (else `%backoffLimit`) asks.
        "maxRetry": (plan.limit if plan.scope else spec.backoff_limit) + 1,
        "plugins": {"env": [], "svc": []},
        "policies": restart_policies(plan.policy if plan.scope else "Never"),
        "tasks": tasks,
    }
    priority = priority_class(spec, options)
    if priority:
        body["priorityClassName"] = priority
    if spec.ttl_seconds_after_finished is not None:
        body["ttlSecondsAfterFinished"] = spec.ttl_seconds_after_finished
    return {
        "apiVersion": API_VERSION,
        "kind": "Job",
        "metadata": object_metadata(target, spec),
        "spec": body,
    }


def restart_policies(restart_policy: str) -> list[dict[str, Any]]:
    """The job's lifecycle policies for the spec's restart policy, as the local engine restarts:
    Never ends the job at the first failure (TerminateJob keeps the failed pod and its exit);
    OnFailure and Always restart after any failure; ExitCode after an exit of 128 or more (a
    signal) or an eviction, and ends the job at any other exit. Volcano restarts the whole job,
    each time counted against maxRetry; the first matching policy decides."""
    if restart_policy == "Never":
        return [{"events": ["PodEvicted", "PodFailed"], "action": "TerminateJob"}]
    if restart_policy == "ExitCode":
        return [
            *({"exitCode": code, "action": "RestartJob"} for code in RETRYABLE_EXIT_CODES),
            {"events": ["PodEvicted"], "action": "RestartJob"},
            {"events": ["PodFailed"], "action": "TerminateJob"},
        ]
    return [{"events": ["PodEvicted", "PodFailed"], "action": "RestartJob"}]


def _template(
    spec: JobSpec, target: Target, options: ClusterOptions, code: CodeBundle, role: str
) -> dict[str, Any]:
    framework = FRAMEWORKS[spec.framework]
    env = {**base_env(spec, target.job_id), "DISTRUN_ROLE": role, "DISTRUN_GROUP": role}
    container: dict[str, Any] = {
        "name": framework.container_name,
        "image": options.image(spec),
        "command": [options.python, LAUNCHER_PATH, *argv(options.python, code.entrypoint)],
        "workingDir": CODE_DIR,
        "env": [*env_list(env), attempt_variable(ANNOTATION_RETRY_COUNT)],
        "ports": [{"name": framework.port_name[:15], "containerPort": framework.default_port}],
        "volumeMounts": [code.mount, *checkpoint_mounts(spec)],
        "securityContext": container_security(options),
    }
    res = resources(spec.roles[role].resources, options.gpu, role)
    if res:
        container["resources"] = res
    pod_spec: dict[str, Any] = {
        # Volcano's policies restart, counted against maxRetry: a container the kubelet
        # restarted in its pod (OnFailure) would restart without limit, unseen by Volcano.
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [code.volume, *checkpoint_volumes(spec)],
        **pod_spec_extras(options),
    }
    if spec.active_deadline_seconds is not None:
        pod_spec["activeDeadlineSeconds"] = spec.active_deadline_seconds
    return {"metadata": {"labels": job_labels(target.job_id, target.owner)}, "spec": pod_spec}
