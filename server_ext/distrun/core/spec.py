"""The job spec: one validated model of what a user asks to run, shared by every engine.

`JobSpec.from_dict` is the single edge where untrusted input becomes a spec; everything past it
may assume a valid spec. Messages name the field and say what to write instead.
"""

import base64
import binascii
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from distrun.core.errors import LimitExceeded, SpecError
from distrun.core.frameworks import FRAMEWORKS
from distrun.core.gpus import (
    GpuAmount,
    GpuRequest,
    gpu_request,
    parse_gpu,
    parse_gpu_fallback,
    parse_gpu_memory,
)
from distrun.core.jobids import JOB_ID_RE
from distrun.core.quantities import (
    CPU_WRITE,
    MEMORY_WRITE,
    QuantityError,
    check_cpu,
    check_memory,
)

RESTART_POLICIES = ("Never", "OnFailure", "Always", "ExitCode")
# What a failure restarts: every replica of the job ("job"), or the one that failed ("replica").
RESTART_SCOPES = ("job", "replica")
CLEAN_POD_POLICIES = ("None", "Running", "All")
ENGINE_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}\Z")
JOB_NAME_RE = re.compile(r"^[a-z]([-a-z0-9]{0,30}[a-z0-9])?\Z")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
IMAGE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,254}\Z")
MAX_NAME_LENGTH = 32
RESOURCE_FIELDS = ("cpu", "memory", "gpu", "gpu_memory")
ELASTIC_RE = re.compile(r"^([0-9]{1,3}):([0-9]{1,3})\Z")
ELASTIC_FRAMEWORKS = ("pytorch",)


@dataclass(frozen=True)
class Limits:
    """Operator-set limits, enforced at the edge with a clear 4xx."""

    max_replicas: int = 64
    max_gpus_per_replica: int = 16
    max_payload_bytes: int = 1_000_000  # code + shipped files; a ConfigMap holds at most 1 MiB
    max_jobs_per_user: int = 20  # jobs not yet finished
    max_log_line_bytes: int = 2 * 1024 * 1024


@dataclass
class Resources:
    cpu: str | None = None  # Kubernetes quantity: "2", "500m"
    memory: str | None = None  # Kubernetes quantity: "4Gi"
    gpu: GpuAmount = 0  # whole devices, a share of one (0.5) or a MIG profile ("mig-1g.5gb")
    gpu_memory: str | None = None  # of one device: "10Gi"

    @property
    def gpu_request(self) -> GpuRequest:
        return gpu_request(self.gpu, self.gpu_memory)


@dataclass
class RoleSpec:
    replicas: int
    resources: Resources = field(default_factory=Resources)


@dataclass
class JobSpec:
    framework: str
    roles: dict[str, RoleSpec]
    code: str
    name: str = "job"
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    # Working-directory files shipped beside the code: relative path -> base64 content.
    files: dict[str, str] = field(default_factory=dict)
    engine: str | None = None  # None: the server's default engine
    namespace: str | None = None  # None: the engine's configured namespace for this user
    restart_policy: str = "Never"
    backoff_limit: int = 0
    # None: "job" for a synchronous framework, else "replica" (core/restarts.py).
    restart: str | None = None
    # Whole-job restarts allowed (counted for the job, not per replica); None: backoff_limit.
    max_restarts: int | None = None
    # "MIN:MAX": the replicas run under torch's elastic agent, which goes on with as few as MIN
    # of them and takes back up to MAX (docs/fault-tolerance.md). None: a fixed world.
    elastic: str | None = None
    # On a cluster: the PersistentVolumeClaim, in the job's namespace, that holds the job's
    # checkpoint directory (DISTRUN_CHECKPOINT_DIR, one directory per job in it). The local
    # engine keeps checkpoints under the job's state whatever it says.
    checkpoint_volume: str | None = None
    # An earlier job of the same owner on the same engine whose checkpoints this one starts
    # from ("Run again, resuming"): copied into its own directory locally, its directory on
    # the checkpoint volume continued on a cluster (docs/fault-tolerance.md).
    resume_from: str | None = None
    active_deadline_seconds: int | None = None
    # A replica that writes no output within this many seconds of starting is killed as hung
    # at start-up (then the restart policy applies). None: no such check.
    startup_timeout_seconds: int | None = None
    # What happens to the pods when the job ends: "Running" stops those still running (a master
    # that failed leaves no worker holding a GPU) and keeps finished ones for their logs.
    clean_pod_policy: str = "Running"
    ttl_seconds_after_finished: int | None = None
    queue: str | None = None
    priority_class: str | None = None
    # Where the machine has no GPU: None refuses a job that asks for one; "cpu" runs it there.
    gpu_fallback: str | None = None

    @property
    def elastic_range(self) -> tuple[int, int] | None:
        """(MIN, MAX) of `elastic`; None for a fixed world."""
        match = ELASTIC_RE.match(self.elastic or "")
        return (int(match[1]), int(match[2])) if match else None

    @property
    def replica_count(self) -> int:
        return sum(role.replicas for role in self.roles.values())

    def replica_names(self) -> list[str]:
        """Every replica's name in the framework's role order: "master-0", "worker-0", ..."""
        names = []
        for role in FRAMEWORKS[self.framework].role_names:
            if role in self.roles:
                names += [f"{role}-{i}" for i in range(self.roles[role].replicas)]
        return names

    def payload_bytes(self) -> int:
        return len(self.code.encode()) + sum(len(v) * 3 // 4 for v in self.files.values())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any, limits: Limits | None = None) -> "JobSpec":
        return parse_spec(data, limits or Limits())


def default_roles(framework: str) -> dict[str, RoleSpec]:
    fw = FRAMEWORKS[framework]
    return {r.name: RoleSpec(r.default_replicas) for r in fw.roles if r.default_replicas > 0}


def parse_spec(data: Any, limits: Limits) -> JobSpec:
    if not isinstance(data, dict):
        raise SpecError("the job spec must be a JSON object")
    known = set(JobSpec.__dataclass_fields__)
    unknown = sorted(set(data) - known)
    if unknown:
        raise SpecError(
            f"unknown field(s) {', '.join(unknown)}; known fields are {', '.join(sorted(known))}",
            field=unknown[0],
        )
    framework = _framework(data.get("framework"))
    spec = JobSpec(
        framework=framework,
        roles=_roles(data.get("roles"), framework, limits),
        code=_string(data, "code", required=True, allow_empty=True),
        name=_job_name(data.get("name", "job")),
        image=_optional_match(data, "image", IMAGE_RE, "an image reference like python:3.11"),
        env=_env(data.get("env", {})),
        files=_files(data.get("files", {})),
        engine=_optional_match(data, "engine", ENGINE_NAME_RE, "an engine name like local"),
        namespace=_optional_match(data, "namespace", NAMESPACE_RE, "a Kubernetes namespace"),
        restart_policy=_choice(data, "restart_policy", RESTART_POLICIES, "Never"),
        backoff_limit=_int(data, "backoff_limit", 0, 0, 100),
        restart=_optional_choice(data, "restart", RESTART_SCOPES),
        max_restarts=_optional_int(data, "max_restarts", 0, 100),
        elastic=_optional_string(data, "elastic"),
        checkpoint_volume=_optional_match(
            data, "checkpoint_volume", NAMESPACE_RE, "a PersistentVolumeClaim name like ckpt"
        ),
        resume_from=_optional_match(data, "resume_from", JOB_ID_RE, "a job id like train-ab12c"),
        active_deadline_seconds=_optional_int(data, "active_deadline_seconds", 1, 30 * 86400),
        startup_timeout_seconds=_optional_int(data, "startup_timeout_seconds", 1, 86400),
        clean_pod_policy=_choice(data, "clean_pod_policy", CLEAN_POD_POLICIES, "Running"),
        ttl_seconds_after_finished=_optional_int(
            data, "ttl_seconds_after_finished", 0, 365 * 86400
        ),
        queue=_optional_match(data, "queue", NAMESPACE_RE, "a queue name like default"),
        priority_class=_optional_match(
            data, "priority_class", NAMESPACE_RE, "a PriorityClass name"
        ),
        gpu_fallback=parse_gpu_fallback(data.get("gpu_fallback")),
    )
    _check_elastic(spec)
    if spec.payload_bytes() > limits.max_payload_bytes:
        raise LimitExceeded(
            f"the code and shipped files are {spec.payload_bytes():,} bytes, over the limit of "
            f"{limits.max_payload_bytes:,}; ship large data through a volume or object storage"
        )
    return spec


def _optional_string(data: dict[str, Any], key: str) -> str | None:
    if data.get(key) is None:
        return None
    return _string(data, key, required=True, allow_empty=False)


def _check_elastic(spec: JobSpec) -> None:
    """`elastic` is MIN:MAX with 1 <= MIN <= replicas <= MAX, for a framework whose elastic
    agent distrun runs, and not with a whole-job restart."""
    if spec.elastic is None:
        return
    match = ELASTIC_RE.match(spec.elastic)
    if match is None:
        raise SpecError(
            f"elastic {spec.elastic!r} is not MIN:MAX; write the least and the most workers "
            "the job runs with, like 2:4",
            field="elastic",
        )
    low, high = int(match[1]), int(match[2])
    if not 1 <= low <= high:
        raise SpecError(
            f"elastic {spec.elastic!r}: MIN must be 1 or more and at most MAX, like 2:4",
            field="elastic",
        )
    if spec.framework not in ELASTIC_FRAMEWORKS:
        raise SpecError(
            f"elastic runs torch's elastic agent: framework {spec.framework} cannot; write "
            "framework pytorch or drop elastic",
            field="elastic",
        )
    if not low <= spec.replica_count <= high:
        raise SpecError(
            f"elastic {spec.elastic} but the job starts {spec.replica_count} replicas; start "
            f"between {low} and {high}",
            field="elastic",
        )
    if spec.restart == "job":
        raise SpecError(
            "an elastic job goes on without a failed replica and takes it back when it "
            "restarts: it does not restart as a whole; drop restart=job",
            field="restart",
        )


def _framework(value: Any) -> str:
    if value is None:
        raise SpecError(f"framework is required: one of {', '.join(FRAMEWORKS)}", field="framework")
    if not isinstance(value, str) or value not in FRAMEWORKS:
        raise SpecError(
            f"unknown framework {value!r}; write one of {', '.join(FRAMEWORKS)}", field="framework"
        )
    return str(value)


def _roles(value: Any, framework: str, limits: Limits) -> dict[str, RoleSpec]:
    fw = FRAMEWORKS[framework]
    if value is None:
        return default_roles(framework)
    if not isinstance(value, dict):
        raise SpecError('roles must be an object like {"worker": {"replicas": 2}}', field="roles")
    roles: dict[str, RoleSpec] = {}
    for name, role_data in value.items():
        if name not in fw.role_names:
            raise SpecError(
                f"{framework} has no role {name!r}; its roles are {', '.join(fw.role_names)}",
                field=f"roles.{name}",
            )
        roles[name] = _role(name, role_data, limits)
    for role in fw.roles:
        # A required role the user did not mention gets its default ("%worker=2" on PyTorch
        # implies the one master the operator requires); an explicit 0 is still an error.
        if role.name not in roles and role.min_replicas > 0:
            roles[role.name] = RoleSpec(max(role.default_replicas, role.min_replicas))
    for role in fw.roles:
        count = roles[role.name].replicas if role.name in roles else 0
        if count < role.min_replicas:
            raise SpecError(
                f"{framework} needs at least {role.min_replicas} {role.name} replica(s)",
                field=f"roles.{role.name}",
            )
        if role.max_replicas is not None and count > role.max_replicas:
            raise SpecError(
                f"{framework} allows at most {role.max_replicas} {role.name} replica(s), not {count}",
                field=f"roles.{role.name}",
            )
    roles = {name: spec for name, spec in roles.items() if spec.replicas > 0}
    total = sum(r.replicas for r in roles.values())
    if total == 0:
        raise SpecError("the job has no replicas; ask for at least one", field="roles")
    if total > limits.max_replicas:
        raise LimitExceeded(
            f"the job asks for {total} replicas, over the limit of {limits.max_replicas}"
        )
    return roles


def _role(name: str, data: Any, limits: Limits) -> RoleSpec:
    where = f"roles.{name}"
    if not isinstance(data, dict):
        raise SpecError(f'{where} must be an object like {{"replicas": 2}}', field=where)
    unknown = sorted(set(data) - {"replicas", "resources"})
    if unknown:
        raise SpecError(f"{where} has unknown field(s) {', '.join(unknown)}", field=where)
    replicas = _int(data, "replicas", None, 0, limits.max_replicas, where=where)
    res = data.get("resources") or {}
    if not isinstance(res, dict) or set(res) - set(RESOURCE_FIELDS):
        raise SpecError(
            f"{where}.resources takes {', '.join(RESOURCE_FIELDS)}", field=f"{where}.resources"
        )
    cpu = _optional_quantity(res, "cpu", check_cpu, CPU_WRITE, where=where)
    memory = _optional_quantity(res, "memory", check_memory, MEMORY_WRITE, where=where)
    place = f"{where}.resources"
    gpu = parse_gpu(res.get("gpu", 0), limits.max_gpus_per_replica, f"{place}.gpu")
    gpu_memory = parse_gpu_memory(res.get("gpu_memory"), f"{place}.gpu_memory")
    return RoleSpec(replicas, Resources(cpu=cpu, memory=memory, gpu=gpu, gpu_memory=gpu_memory))


def _job_name(value: Any) -> str:
    if not isinstance(value, str) or not JOB_NAME_RE.match(value):
        raise SpecError(
            f"job name {value!r} is not valid; use at most {MAX_NAME_LENGTH} lower-case letters, "
            "digits and '-', starting with a letter",
            field="name",
        )
    return value


def _env(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SpecError("env must be an object of NAME: value strings", field="env")
    for key, val in value.items():
        if not isinstance(key, str) or not ENV_NAME_RE.match(key):
            raise SpecError(f"env name {key!r} is not a valid variable name", field="env")
        if not isinstance(val, str) or "\x00" in val:
            raise SpecError(f"env {key} must be a string without NUL bytes", field="env")
    return dict(value)


def _files(value: Any) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SpecError("files must be an object of relative path: base64 content", field="files")
    for path, content in value.items():
        check_relative_path(path)
        if not isinstance(content, str):
            raise SpecError(f"file {path!r} must have base64 content", field="files")
        try:
            base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise SpecError(f"file {path!r} is not valid base64", field="files") from None
    return dict(value)


def check_relative_path(path: Any) -> str:
    """A shipped file's path: relative, inside the working directory, no odd characters."""
    ok = (
        isinstance(path, str)
        and 0 < len(path) <= 255
        and not path.startswith(("/", "\\"))
        and "\x00" not in path
        and "\\" not in path
        and all(part not in ("", ".", "..") for part in path.split("/"))
    )
    if not ok:
        raise SpecError(
            f"file path {path!r} must be relative and stay inside the working directory "
            "(no '..', no leading '/')",
            field="files",
        )
    return str(path)


def _string(data: dict[str, Any], key: str, *, required: bool, allow_empty: bool) -> str:
    value = data.get(key)
    if value is None and required:
        raise SpecError(f"{key} is required", field=key)
    if not isinstance(value, str) or (not allow_empty and not value):
        raise SpecError(f"{key} must be a string", field=key)
    return value


def _optional_match(
    data: dict[str, Any], key: str, pattern: re.Pattern[str], what: str, where: str = ""
) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not pattern.match(value):
        name = f"{where}.{key}" if where else key
        raise SpecError(f"{name} {value!r} is not valid; write {what}", field=name)
    return value


def _optional_quantity(
    data: dict[str, Any], key: str, check: Callable[[str], str], what: str, where: str
) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    name = f"{where}.{key}"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**20:
        value = str(value)
    if not isinstance(value, str):
        raise SpecError(f"{name} must be a string: {what}", field=name)
    try:
        return check(value)
    except QuantityError as error:
        raise SpecError(f"{name} {quoted(value)} {error}; write {what}", field=name) from None


def quoted(value: str, room: int = 40) -> str:
    """`value` quoted, cut to `room` characters with its length when longer."""
    if len(value) <= room:
        return repr(value)
    return f"{value[:room]!r}... ({len(value)} characters)"


def _int(
    data: dict[str, Any],
    key: str,
    default: int | None,
    low: int,
    high: int,
    where: str = "",
) -> int:
    name = f"{where}.{key}" if where else key
    value = data.get(key, default)
    if value is None:
        raise SpecError(f"{name} is required", field=name)
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(f"{name} must be a whole number, not {value!r}", field=name)
    if not low <= value <= high:
        raise SpecError(f"{name} must be between {low} and {high}, not {value}", field=name)
    return value


def _optional_int(data: dict[str, Any], key: str, low: int, high: int) -> int | None:
    if data.get(key) is None:
        return None
    return _int(data, key, None, low, high)


def _optional_choice(data: dict[str, Any], key: str, choices: tuple[str, ...]) -> str | None:
    if data.get(key) is None:
        return None
    return _choice(data, key, choices, choices[0])


def _choice(data: dict[str, Any], key: str, choices: tuple[str, ...], default: str) -> str:
    value = data.get(key, default)
    if value not in choices:
        raise SpecError(
            f"{key} {value!r} is not valid; write one of {', '.join(choices)}", field=key
        )
    return str(value)
