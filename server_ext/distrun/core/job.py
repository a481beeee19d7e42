"""A job as every engine reports it: its state, its replicas' states, and the spec it runs."""

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

from distrun.core.spec import JobSpec
from distrun.core.tracebacks import TracebackGroup


class JobState(str, enum.Enum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)


@dataclass
class ReplicaStatus:
    name: str  # "worker-0"
    role: str  # "worker"
    index: int
    state: JobState = JobState.PENDING
    exit_code: int | None = None
    restarts: int = 0
    started_at: float | None = None  # epoch seconds
    finished_at: float | None = None
    reason: str | None = None  # why it is pending or why it failed, in words
    gpu: str | None = None  # the device(s) or share it got, in words; None: no GPU


@dataclass
class TimelineEvent:
    """One moment in a job's life: submitted, started (an attempt), failed, restarting,
    resumed (from a checkpoint's step, when the code reports it) or ended."""

    time: float  # epoch seconds
    kind: str
    attempt: int  # 1 for the first run of the job
    text: str  # in words, for people
    replica: str | None = None  # the replica that failed
    exit_code: int | None = None  # the failed replica's exit code; negative: a signal
    signal: str | None = None  # "SIGKILL", where a signal ended it
    oom: bool = False  # the kernel's OOM killer ended it
    step: int | None = None  # the checkpoint's step training resumed from

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TimelineEvent":
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        return cls(**known)


@dataclass
class Job:
    id: str  # unique per engine, a DNS-1035 label: usable in URLs and Kubernetes names
    name: str
    owner: str
    engine: str
    framework: str
    state: JobState
    created_at: float
    replicas: list[ReplicaStatus]
    spec: JobSpec
    started_at: float | None = None
    finished_at: float | None = None
    reason: str | None = None  # in words: why pending, which replica failed and how
    failed_replica: str | None = None
    last_lines: list[str] = field(default_factory=list)  # the failing replica's last lines
    attempt: int = 1  # which run of the job this is: 1, then 2 after its first restart, ...
    max_restarts: int = 0  # how many restarts the job may have in all
    restart_scope: str | None = None  # "job", "replica" or None (core/restarts.py)
    timeline: list[TimelineEvent] = field(default_factory=list)
    # The replicas' last Python tracebacks once the job failed, each told once (core/tracebacks)
    tracebacks: list[TracebackGroup] = field(default_factory=list)

    @property
    def last_failure(self) -> TimelineEvent | None:
        """Why the newest failed attempt (or replica) ended, or None."""
        failures = [event for event in self.timeline if event.kind == "failed"]
        return failures[-1] if failures else None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        for replica in data["replicas"]:
            replica["state"] = replica["state"].value
        data["replicas_running"] = sum(r.state == JobState.RUNNING for r in self.replicas)
        failure = self.last_failure
        data["last_failure"] = asdict(failure) if failure is not None else None
        return data
