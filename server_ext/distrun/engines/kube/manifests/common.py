"""What every Kubernetes object distrun creates shares: identity labels, the owner, the options
an operator configures, and the pieces of a pod template. Pure functions of their arguments."""

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from distrun.core.checkpoint_env import CHECKPOINT_DIR_ENV, RESTART_ENV
from distrun.core.errors import SpecError
from distrun.core.frameworks import FRAMEWORKS
from distrun.core.spec import JobSpec, Resources
from distrun.engines.kube.gpu_modes import GpuMode, gpu_resources

LABEL_NAME = "app.kubernetes.io/name"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_OWNER = "distrun.io/owner"
ANNOTATION_OWNER = "distrun.io/owner"  # the exact user name; authorization compares this
ANNOTATION_SPEC = "distrun.io/spec"
APP = "distrun"
# The spec is kept on the job object so any server can answer from the API server alone; the
# code is dropped from it when it would crowd the 256 KiB annotation budget (the ConfigMap has it).
MAX_SPEC_ANNOTATION_BYTES = 128 * 1024

CODE_VOLUME = "distrun-code"
CODE_DIR = "/distrun/code"
CHECKPOINT_VOLUME = "distrun-checkpoints"
CHECKPOINTS_DIR = "/distrun/checkpoints"  # the claim's root; each job has its own directory

_DNS1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_NOT_LABEL_VALUE_RE = re.compile(r"[^A-Za-z0-9_.-]+")
MAX_OBJECT_NAME = 40  # distrun.core.jobids.MAX_JOB_ID_LENGTH: room for replica suffixes

KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@dataclass(frozen=True)
class ClusterOptions:
    """What the operator of a distrun server configures for its Kubernetes engines."""

    images: dict[str, str] = field(default_factory=dict)  # framework -> image; else the default
    python: str = "python"  # the interpreter inside the image
    image_pull_secrets: tuple[str, ...] = ()
    service_account: str | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    default_queue: str | None = None
    default_priority_class: str | None = None
    # Queues and PriorityClasses users may name; None: the default one only.
    allowed_queues: tuple[str, ...] | None = None
    allowed_priority_classes: tuple[str, ...] | None = None
    cluster_domain: str | None = None
    # Replicas' hardening: runAsNonRoot where the images allow it (the frameworks' default
    # images run as root); the API token mounted only where jobs call the API themselves.
    run_as_non_root: bool = False
    automount_service_account_token: bool = False
    # Who queues jobs that name a queue: None or "volcano" (gang scheduling in that Volcano
    # queue), or "kueue" (the LocalQueue of that name; the job is created suspended).
    queue_system: str | None = None
    # How GPU requests become extended resources on this cluster (whole, mig, shared, ...).
    gpu: GpuMode = field(default_factory=GpuMode)

    def image(self, spec: JobSpec) -> str:
        return (
            spec.image
            or self.images.get(spec.framework)
            or FRAMEWORKS[spec.framework].default_image
        )


@dataclass(frozen=True)
class Target:
    """Where a job goes and whose it is."""

    job_id: str
    namespace: str
    owner: str

    def __post_init__(self) -> None:
        if not _DNS1035_RE.match(self.job_id) or len(self.job_id) > MAX_OBJECT_NAME:
            raise SpecError(
                f"job id {self.job_id!r} must be a DNS-1035 label of at most {MAX_OBJECT_NAME} "
                "characters (lower-case letters, digits and '-', starting with a letter)"
            )
        if not self.owner:
            raise SpecError("a job needs an owner")


def owner_label(owner: str) -> str:
    """A label value standing for `owner`: readable, at most 63 characters, and with a hash of
    the exact name so that "a.b" and "a_b" differ. It selects; it never authorizes."""
    readable = _NOT_LABEL_VALUE_RE.sub("-", owner).strip("-_.")[:40].strip("-_.") or "user"
    digest = hashlib.sha256(owner.encode()).hexdigest()[:10]
    return f"{readable}-{digest}"


def job_labels(job_id: str, owner: str) -> dict[str, str]:
    return {
        LABEL_NAME: APP,
        LABEL_MANAGED_BY: APP,
        LABEL_INSTANCE: job_id,
        LABEL_OWNER: owner_label(owner),
    }


def owner_selector(owner: str) -> str:
    return f"{LABEL_MANAGED_BY}={APP},{LABEL_OWNER}={owner_label(owner)}"


def job_annotations(spec: JobSpec, owner: str) -> dict[str, str]:
    return {ANNOTATION_OWNER: owner, ANNOTATION_SPEC: spec_annotation(spec)}


def spec_annotation(spec: JobSpec) -> str:
    """The spec as JSON, without the shipped files' contents (they are in the ConfigMap)."""
    data = spec.to_dict()
    data["files"] = {path: "" for path in spec.files}
    text = json.dumps(data, separators=(",", ":"))
    if len(text.encode()) > MAX_SPEC_ANNOTATION_BYTES:
        data["code"] = ""
        text = json.dumps(data, separators=(",", ":"))
    return text


def object_metadata(target: Target, spec: JobSpec) -> dict[str, Any]:
    return {
        "name": target.job_id,
        "namespace": target.namespace,
        "labels": job_labels(target.job_id, target.owner),
        "annotations": job_annotations(spec, target.owner),
    }


def escape_env_value(value: str) -> str:
    """A literal for a container's env: the kubelet expands `$(VAR)` in values, `$$` is `$`."""
    return value.replace("$", "$$")


def env_list(env: dict[str, str]) -> list[dict[str, Any]]:
    return [{"name": name, "value": escape_env_value(value)} for name, value in env.items()]


def base_env(spec: JobSpec, job_id: str) -> dict[str, str]:
    """What every replica's container starts with, before per-replica and operator variables:
    the same precedence as `replica_env` (PYTHONUNBUFFERED, then the user's env)."""
    env = {"PYTHONUNBUFFERED": "1"}
    env.update(spec.env)
    env["DISTRUN_JOB_ID"] = job_id
    if spec.checkpoint_volume is not None:
        # The job's own directory in the claim (distrun.checkpoint.save creates it), the same
        # for every attempt, as the local engine's; a job resuming an earlier one continues
        # that one's directory (copying it would need a pod of its own before the replicas).
        env[CHECKPOINT_DIR_ENV] = f"{CHECKPOINTS_DIR}/{spec.resume_from or job_id}"
    return env


def attempt_variable(annotation: str) -> dict[str, Any]:
    """DISTRUN_RESTART, as on the local engine (0 for the job's first run, 1 after its first
    restart, ...), from the pod annotation in which the controller that restarts the whole job
    writes its count into every pod it makes (read through the downward API)."""
    path = f"metadata.annotations['{annotation}']"
    return {"name": RESTART_ENV, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def checkpoint_volumes(spec: JobSpec) -> list[dict[str, Any]]:
    """The pod's volume for the user's checkpoint claim, if the spec names one."""
    if spec.checkpoint_volume is None:
        return []
    claim = {"claimName": spec.checkpoint_volume}
    return [{"name": CHECKPOINT_VOLUME, "persistentVolumeClaim": claim}]


def checkpoint_mounts(spec: JobSpec) -> list[dict[str, Any]]:
    """Where the container sees the checkpoint claim (its root: the job's directory is made
    by the replica, as its own user, not by the kubelet as root)."""
    if spec.checkpoint_volume is None:
        return []
    return [{"name": CHECKPOINT_VOLUME, "mountPath": CHECKPOINTS_DIR}]


def resources(res: Resources, gpu: GpuMode, role: str) -> dict[str, Any]:
    """Requests equal limits: what the user asks for is what the replica gets. GPUs as the
    engine's GPU mode has them; a request the mode cannot express is a SpecError."""
    amounts: dict[str, str] = {}
    if res.cpu is not None:
        amounts["cpu"] = res.cpu
    if res.memory is not None:
        amounts["memory"] = res.memory
    amounts.update(gpu_resources(res.gpu_request, gpu, f"roles.{role}.resources.gpu"))
    if not amounts:
        return {}
    return {"requests": dict(amounts), "limits": dict(amounts)}


# Every replica container: no privilege escalation, no capabilities, the runtime's seccomp
# profile (what Pod Security's "restricted" level asks, but for running as non-root).
HARDENED_CONTAINER: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}


def container_security(options: ClusterOptions) -> dict[str, Any]:
    context = dict(HARDENED_CONTAINER)
    if options.run_as_non_root:
        context["runAsNonRoot"] = True
    return context


def pod_spec_extras(options: ClusterOptions, *, whole_pod_spec: bool = True) -> dict[str, Any]:
    """Pod-level settings from the operator's configuration (`whole_pod_spec`: the kind takes a
    whole PodSpec, not a patch of some of its fields)."""
    extras: dict[str, Any] = {}
    if whole_pod_spec:
        extras["automountServiceAccountToken"] = options.automount_service_account_token
    if options.image_pull_secrets:
        extras["imagePullSecrets"] = [{"name": name} for name in options.image_pull_secrets]
    if options.service_account:
        extras["serviceAccountName"] = options.service_account
    if options.node_selector:
        extras["nodeSelector"] = dict(options.node_selector)
    if options.tolerations:
        extras["tolerations"] = [dict(toleration) for toleration in options.tolerations]
    return extras


def queue(spec: JobSpec, options: ClusterOptions) -> str | None:
    """The job's queue: the default one, or one of the administrator's allowed queues."""
    return _allowed("queue", spec.queue, options.default_queue, options.allowed_queues)


def kueue_queue(spec: JobSpec, options: ClusterOptions) -> str | None:
    """The LocalQueue a job goes to when Kueue queues this engine's jobs."""
    return queue(spec, options) if options.queue_system == "kueue" else None


def kueue_metadata(target: Target, spec: JobSpec, options: ClusterOptions) -> dict[str, Any]:
    """The job's metadata, labelled for Kueue when it queues the job."""
    metadata = object_metadata(target, spec)
    local_queue = kueue_queue(spec, options)
    if local_queue:
        metadata["labels"][KUEUE_QUEUE_LABEL] = local_queue
    return metadata


def priority_class(spec: JobSpec, options: ClusterOptions) -> str | None:
    return _allowed(
        "priority_class",
        spec.priority_class,
        options.default_priority_class,
        options.allowed_priority_classes,
    )


def _allowed(
    what: str, asked: str | None, default: str | None, allowed: tuple[str, ...] | None
) -> str | None:
    if asked is None or asked == default:
        return default
    choices = allowed if allowed is not None else ((default,) if default else ())
    if asked not in choices:
        offer = ", ".join(choices) if choices else f"none: leave {what} out"
        raise SpecError(
            f"{what} {asked!r} is not one this server lets you use; you may use {offer}",
            field=what,
        )
    return asked
