"""Kubeflow Trainer v2 (`trainer.kubeflow.org/v1alpha1`): a TrainJob against a named
(Cluster)TrainingRuntime such as `torch-distributed`.

Every runtime distrun knows runs one replicated job, `node`, of `numNodes` identical pods
(Indexed Jobs under a JobSet), so the replicas are the spec's replicas in role order
(`master-0` is node 0) and each finds itself through `JOB_COMPLETION_INDEX` and the shipped
launcher. The code volume reaches the pods through a runtime patch (the v2.3.0 API's
`runtimePatches`, the only way a TrainJob adds volumes).

A whole-job restart (`%restart=job`) is JobSet's `failurePolicy.maxRestarts`, which lives in the
runtime's JobSet template, out of a TrainJob's reach: such a job runs on a TrainingRuntime of its
own in its namespace, a copy of the configured runtime whose JobSet restarts the whole group
(`restart_runtime`), owned by the TrainJob once it exists.
"""

import copy
from dataclasses import astuple
from typing import Any

from distrun.core.entrypoint import argv
from distrun.core.errors import SpecError
from distrun.core.replica_env import PYTORCH_NPROC_PER_NODE, replica_addresses
from distrun.core.restarts import restart_plan
from distrun.core.spec import JobSpec
from distrun.engines.kube.manifests.common import (
    ClusterOptions,
    Target,
    attempt_variable,
    base_env,
    checkpoint_mounts,
    checkpoint_volumes,
    container_security,
    env_list,
    job_labels,
    kueue_metadata,
    kueue_queue,
    pod_spec_extras,
    resources,
)
from distrun.engines.kube.manifests.configmap import LAUNCHER_PATH, CodeBundle, code_bundle
from distrun.engines.kube.manifests.replica_table import support_files

API_VERSION = "trainer.kubeflow.org/v1alpha1"
PLURAL = "trainjobs"
REPLICATED_JOB = "node"  # constants.Node: the trainer's replicated job and container name
TRAINER_PORT = 29500  # constants.ContainerTrainerPort
INDEX_VARIABLE = "JOB_COMPLETION_INDEX"
PATCH_MANAGER = "distrun.io/engine"
LABEL_JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
LABEL_REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
LABEL_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# JobSet writes its status.restarts into every pod it makes (constants.RestartsKey): a restart
# of the whole group by the runtime's failurePolicy, the only restart a TrainJob gets.
ANNOTATION_RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
RUNTIME_PLURAL = "trainingruntimes"
CLUSTER_RUNTIME_PLURAL = "clustertrainingruntimes"
DEFAULT_RUNTIMES = {
    "pytorch": "torch-distributed",
    "jax": "jax-distributed",
    "xgboost": "xgboost-distributed",
}


def node_host(job_id: str, node: int) -> str:
    """A node's stable name: JobSet's `{jobset}-{replicatedJob}-{jobIndex}-{podIndex}.{subdomain}`
    (torch.go writes PET_MASTER_ADDR as `{job}-node-0-0.{job}`)."""
    return f"{job_id}-{REPLICATED_JOB}-0-{node}.{job_id}"


def trainer_bundle(spec: JobSpec, target: Target) -> CodeBundle:
    order = spec.replica_names()
    addresses = replica_addresses(
        spec,
        host_for=lambda name: node_host(target.job_id, order.index(name)),
        port_for=lambda _name: TRAINER_PORT,
    )
    support = support_files(
        spec,
        target.job_id,
        index_variable=INDEX_VARIABLE,
        groups={REPLICATED_JOB: order},
        addresses=addresses,
    )
    return code_bundle(spec, target, support)


def trainjob(
    spec: JobSpec,
    target: Target,
    options: ClusterOptions,
    code: CodeBundle,
    *,
    runtime: str,
    runtime_kind: str = "ClusterTrainingRuntime",
) -> dict[str, Any]:
    """The TrainJob; a whole-job restart runs on the job's own runtime (`restart_runtime`)."""
    if runtime_kind not in ("ClusterTrainingRuntime", "TrainingRuntime"):
        raise SpecError(
            f"runtime kind {runtime_kind!r} is neither ClusterTrainingRuntime nor TrainingRuntime"
        )
    check_fault_tolerance(spec)
    if restarts_whole_job(spec):
        runtime, runtime_kind = target.job_id, "TrainingRuntime"
    env = env_list({**base_env(spec, target.job_id), "DISTRUN_GROUP": REPLICATED_JOB})
    trainer: dict[str, Any] = {
        "image": options.image(spec),
        "command": [options.python, LAUNCHER_PATH, *_user_argv(options, code)],
        "numNodes": spec.replica_count,
        "env": [*env, attempt_variable(ANNOTATION_RESTART_ATTEMPT)],
    }
    if spec.framework == "pytorch":
        # Trainer's "auto" is one process per GPU, else per requested CPU: one per replica, as
        # on every engine.
        trainer["numProcPerNode"] = int(PYTORCH_NPROC_PER_NODE)
    res = resources(_node_resources(spec), options.gpu, next(iter(spec.roles)))
    if res:
        trainer["resourcesPerNode"] = res
    body: dict[str, Any] = {
        "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": runtime_kind, "name": runtime},
        "trainer": trainer,
        "runtimePatches": [
            {"manager": PATCH_MANAGER, "trainingRuntimeSpec": _patch(spec, target, options, code)}
        ],
    }
    if spec.active_deadline_seconds is not None:
        body["activeDeadlineSeconds"] = spec.active_deadline_seconds
    if kueue_queue(spec, options):
        body["suspend"] = True  # Kueue resumes it once its ClusterQueue admits it
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": kueue_metadata(target, spec, options),
        "spec": body,
    }


def check_fault_tolerance(spec: JobSpec) -> None:
    """What a TrainJob (v2.3.0) cannot ask of its runtime: torch's elastic agent (the torch
    runtime's ML policy has no elastic settings; the TrainJob only its fixed numNodes) and a
    restart of single replicas (JobSet restarts the whole group; a replica restarted alone leaves
    its peers waiting in their collective anyway), nor a restart by exit code (JobSet's
    failurePolicy sees jobs fail, not exit codes)."""
    if spec.elastic is not None:
        raise SpecError(
            f"%elastic={spec.elastic} cannot run on Trainer v2: its torch runtime has no "
            "elastic settings and a TrainJob runs a fixed numNodes; run elastic jobs on the "
            "kubeflow engine (PyTorchJob elasticPolicy) or the local engine",
            field="elastic",
        )
    plan = restart_plan(spec)
    if plan.scope == "replica":
        raise SpecError(
            "a restart of single replicas (%restart=replica, or restarts of a framework that "
            "is not synchronous) is not held on Trainer v2: its JobSet restarts the whole "
            "group; write %restart=job, or run on the Training Operator or local engine",
            field="restart",
        )
    if plan.scope == "job" and plan.policy == "ExitCode":
        raise SpecError(
            f"restart_policy {spec.restart_policy} is not held on Trainer v2: its JobSet "
            "restarts the whole group whatever a replica's exit code; write "
            "%restartPolicy=OnFailure (or %restart=job alone), or run on the Volcano or local "
            "engine, which restart by exit code",
            field="restart_policy",
        )


def restarts_whole_job(spec: JobSpec) -> bool:
    return restart_plan(spec).scope == "job"


def restart_runtime(spec: JobSpec, target: Target, base: dict[str, Any]) -> dict[str, Any]:
    """The job's own TrainingRuntime: a copy of the configured runtime `base` whose JobSet
    restarts the whole group up to the plan's limit. Each child Job fails at its pod's first
    failure (backoffLimit 0, restartPolicy Never), so a failed replica is never restarted in
    place while its peers wait in a collective; JobSet then recreates every Job."""
    runtime_spec = copy.deepcopy(base.get("spec") or {})
    jobset = runtime_spec.setdefault("template", {}).setdefault("spec", {})
    jobset["failurePolicy"] = {"maxRestarts": restart_plan(spec).limit}
    for replicated_job in jobset.get("replicatedJobs") or []:
        job_spec = replicated_job.setdefault("template", {}).setdefault("spec", {})
        job_spec["backoffLimit"] = 0
        job_spec.setdefault("template", {}).setdefault("spec", {})["restartPolicy"] = "Never"
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainingRuntime",
        "metadata": {
            "name": target.job_id,
            "namespace": target.namespace,
            "labels": job_labels(target.job_id, target.owner),
        },
        "spec": runtime_spec,
    }


def _user_argv(options: ClusterOptions, code: CodeBundle) -> list[str]:
    return argv(options.python, code.entrypoint)


def _node_resources(spec: JobSpec) -> Any:
    """Trainer v2 gives every node the same resources, so every role must ask for the same."""
    distinct = {astuple(r.resources) for r in spec.roles.values()}
    if len(distinct) > 1:
        raise SpecError(
            "Trainer v2 gives every node the same resources; ask for the same cpu, memory, gpu "
            f"and gpuMemory in every role ({', '.join(spec.roles)})",
            field="roles",
        )
    return next(iter(spec.roles.values())).resources


def _patch(
    spec: JobSpec, target: Target, options: ClusterOptions, code: CodeBundle
) -> dict[str, Any]:
    pod_spec = {
        "volumes": [code.volume, *checkpoint_volumes(spec)],
        "containers": [
            {
                "name": REPLICATED_JOB,
                "volumeMounts": [code.mount, *checkpoint_mounts(spec)],
                "securityContext": container_security(options),
            }
        ],
        **pod_spec_extras(options, whole_pod_spec=False),
    }
    pod_template = {
        "metadata": {"labels": job_labels(target.job_id, target.owner)},
        "spec": pod_spec,
    }
    replicated_job = {"name": REPLICATED_JOB, "template": {"spec": {"template": pod_template}}}
    return {"template": {"spec": {"replicatedJobs": [replicated_job]}}}
