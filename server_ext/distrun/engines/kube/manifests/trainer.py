"""Kubeflow Trainer v2 (`trainer.kubeflow.org/v1alpha1`): a TrainJob against a named
(Cluster)TrainingRuntime such as `torch-distributed`.

Every runtime distrun knows runs one replicated job, `node`, of `numNodes` identical pods
(Indexed Jobs under a JobSet), so the replicas are the spec's replicas in role order
(`master-0` is node 0) and each finds itself through `JOB_COMPLETION_INDEX` and the shipped
launcher. The code volume reaches the pods through a runtime patch (the v2.3.0 API's
`runtimePatches`, the only way a TrainJob adds volumes).
"""

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
    if runtime_kind not in ("ClusterTrainingRuntime", "TrainingRuntime"):
        raise SpecError(
            f"runtime kind {runtime_kind!r} is neither ClusterTrainingRuntime nor TrainingRuntime"
        )
    check_fault_tolerance(spec)
    trainer: dict[str, Any] = {
        "image": options.image(spec),
        "command": [options.python, LAUNCHER_PATH, *_user_argv(options, code)],
        "numNodes": spec.replica_count,
        "env": [
            *env_list({**base_env(spec, target.job_id), "DISTRUN_GROUP": REPLICATED_JOB}),
            attempt_variable(ANNOTATION_RESTART_ATTEMPT),
        ],
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
    whole-job restart (JobSet's failurePolicy.maxRestarts restarts the whole group, but it sits
    in the training runtime's JobSet template: a TrainJob's runtimePatches reach only labels,
    annotations and the replicated jobs' templates). Then the restart policy."""
    if spec.elastic is not None:
        raise SpecError(
            f"%elastic={spec.elastic} cannot run on Trainer v2: its torch runtime has no "
            "elastic settings and a TrainJob runs a fixed numNodes; run elastic jobs on the "
            "kubeflow engine (PyTorchJob elasticPolicy) or the local engine",
            field="elastic",
        )
    if spec.restart == "job" or spec.max_restarts is not None:
        raise SpecError(
            "%restart=job and %maxRestarts cannot be set from a TrainJob: the whole-job restart "
            "(JobSet failurePolicy.maxRestarts) belongs to the training runtime, which a "
            "TrainJob cannot patch; run on the volcano or local engine, which restart the "
            "whole job as asked",
            field="restart" if spec.restart == "job" else "max_restarts",
        )
    check_restart_policy(spec)


def check_restart_policy(spec: JobSpec) -> None:
    """A TrainJob (v2.3.0) cannot say how its nodes restart: its runtimePatches reach only
    metadata, volumes, containers and a few pod fields, while the pods' restartPolicy, the child
    Job's backoffLimit and the JobSet's failurePolicy come from the runtime (Trainer sets none of
    them, so JobSet's webhook makes the pods OnFailure and Kubernetes gives the Job backoffLimit
    6). Refuse a spec that asks for restarts rather than run it with the runtime's count."""
    if restart_plan(spec).scope is not None:
        raise SpecError(
            f"restart_policy {spec.restart_policy} is not held on Trainer v2: a TrainJob cannot "
            "set its nodes' restartPolicy or backoffLimit (its training runtime decides them); "
            "write %restartPolicy=Never here, or run on the Training Operator, Volcano or local "
            "engine, which restart as asked",
            field="restart_policy",
        )


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
