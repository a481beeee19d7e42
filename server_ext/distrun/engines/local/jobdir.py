"""A local job's directory, `<state_dir>/jobs/<job_id>/`: the contract between the engine and
the job's supervisor. The engine writes `job.json` once; the supervisor replaces `status.json`
atomically on every change; the engine only reads it."""

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from distrun.core.entrypoint import argv as entrypoint_argv
from distrun.core.job import JobState, ReplicaStatus, TimelineEvent
from distrun.core.spec import JobSpec, Limits
from distrun.engines.local.private_files import write_private
from distrun.engines.local.usage_store import usage_path

# Parse a stored spec without the operator's size limits: they were enforced at submit time.
_STORED_SPEC_LIMITS = Limits(
    max_replicas=1_000_000, max_gpus_per_replica=1_000_000, max_payload_bytes=1 << 60
)


class JobFiles:
    """Where a job's files live: `<state_dir>/jobs/<job_id>/`."""

    def __init__(self, job_dir: Path) -> None:
        self.dir = job_dir
        self.job = job_dir / "job.json"  # id, owner, created_at, spec, runtime; written once
        self.status = job_dir / "status.json"  # replaced atomically on every change
        self.supervisor = job_dir / "supervisor.json"  # pid and start time of the supervisor
        self.supervisor_log = job_dir / "supervisor.log"
        self.code = job_dir / "code"
        self.logs = job_dir / "logs"
        self.usage = usage_path(job_dir)  # the replicas' sampled usage (usage_store.py)
        # DISTRUN_CHECKPOINT_DIR: kept across the job's restarts (core/checkpoint_env.py).
        self.checkpoints = job_dir / "checkpoints"
        # DISTRUN_TENSORBOARD_DIR: one directory a replica (core/scalars.py).
        self.tensorboard = job_dir / "tensorboard"


@dataclass
class Runtime:
    """How the supervisor runs replicas; chosen by the engine at submit time."""

    python: str
    entrypoint: str  # "main.py" or "main.ipy"
    grace_seconds: float
    max_log_line_bytes: int
    nice: int = 0  # the least niceness of the supervisor and replicas (older jobs: none)
    # Seconds between two samples of the replicas' usage (usage_sampler.py); 0: none, and no
    # memory limit enforced. Jobs submitted before sampling existed have none.
    usage_interval: float = 0.0
    # Whether a whole-job restart may start in interpreters that imported the job's modules
    # ahead (restart_interpreters.py); jobs submitted before they existed: no.
    restart_ahead: bool = False

    def argv(self) -> list[str]:
        return entrypoint_argv(self.python, self.entrypoint)


@dataclass
class JobStatus:
    """The content of status.json."""

    state: JobState
    replicas: list[ReplicaStatus]
    pids: dict[str, int] = field(default_factory=dict)  # replica -> pid = its process group
    started_at: float | None = None
    finished_at: float | None = None
    reason: str | None = None
    failed_replica: str | None = None
    last_lines: list[str] = field(default_factory=list)
    # True once every replica is reaped and every log line written: nothing will change.
    finalized: bool = False
    attempt: int = 1  # 1, then 2 once the whole job was restarted, ...
    timeline: list[TimelineEvent] = field(default_factory=list)
    # Once the job failed: the replicas' last tracebacks, each told once (TracebackGroup JSON).
    tracebacks: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        for replica in data["replicas"]:
            replica["state"] = replica["state"].value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "JobStatus":
        replicas = [
            ReplicaStatus(**{**replica, "state": JobState(replica["state"])})
            for replica in data["replicas"]
        ]
        timeline = [TimelineEvent.from_json(event) for event in data.get("timeline", [])]
        return cls(
            **{
                **data,
                "state": JobState(data["state"]),
                "replicas": replicas,
                "timeline": timeline,
            }
        )

    @classmethod
    def pending(cls, spec: JobSpec) -> "JobStatus":
        replicas = []
        for name in spec.replica_names():
            role, _, index = name.rpartition("-")
            replicas.append(ReplicaStatus(name=name, role=role, index=int(index)))
        return cls(state=JobState.PENDING, replicas=replicas)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    write_private(tmp, json.dumps(data).encode())
    os.replace(tmp, path)


def interpreter_mark(files: JobFiles) -> str | None:
    """The mark of the replica interpreters the job's supervisor started ahead
    (waiting_interpreters.py), from supervisor.json; None where it started none."""
    try:
        mark = read_json(files.supervisor).get("mark")
    except (OSError, ValueError, TypeError):
        return None
    return mark if isinstance(mark, str) else None


def read_json(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise TypeError(f"{path} does not hold a JSON object")
    return data


def stored_spec(job: dict[str, Any]) -> JobSpec:
    return JobSpec.from_dict(job["spec"], _STORED_SPEC_LIMITS)
