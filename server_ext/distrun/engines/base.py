"""The interface every engine implements, and the job, replica and log models they return.

An engine turns a `JobSpec` into running replicas and answers for them afterwards from what it
holds (files on disk for the local engine, the API server for Kubernetes), never from memory
that a restart would lose. `owner` is the authenticated user's name; an engine raises
`NotFound` for a job that exists but belongs to someone else.
"""

import enum
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

from ..spec import JobSpec


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

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        for replica in data["replicas"]:
            replica["state"] = replica["state"].value
        data["replicas_running"] = sum(r.state == JobState.RUNNING for r in self.replicas)
        return data


@dataclass(frozen=True)
class LogLine:
    replica: str
    seq: int  # 0-based, per replica, gap-free and never reused
    time: float  # epoch seconds when the line was captured
    text: str  # without the trailing newline; invalid UTF-8 replaced by U+FFFD


@dataclass(frozen=True)
class LogBatch:
    lines: list[LogLine]


@dataclass(frozen=True)
class JobUpdate:
    job: Job


LogEvent = LogBatch | JobUpdate

# Where a reader resumes: replica name -> the next seq it wants. Missing replicas start at 0.
Cursor = dict[str, int]


@dataclass(frozen=True)
class EngineInfo:
    name: str
    description: str
    available: bool  # False: configured but not reachable; `reason` says why
    reason: str | None = None
    namespaces: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Engine(Protocol):
    name: str

    async def info(self) -> EngineInfo: ...

    async def submit(self, spec: JobSpec, owner: str) -> Job: ...

    async def list_jobs(self, owner: str) -> list[Job]:
        """The owner's jobs, newest first."""
        ...

    async def get_job(self, job_id: str, owner: str) -> Job: ...

    async def cancel(self, job_id: str, owner: str) -> Job:
        """Stop every replica; idempotent on a finished job."""
        ...

    async def delete(self, job_id: str, owner: str) -> None:
        """Forget the job and its logs; a running job is cancelled first."""
        ...

    async def read_logs(
        self,
        job_id: str,
        owner: str,
        *,
        since: Cursor | None = None,
        replicas: set[str] | None = None,
        limit: int = 10_000,
    ) -> list[LogLine]:
        """Up to `limit` lines after `since`, ordered by capture time across replicas."""
        ...

    def follow(
        self,
        job_id: str,
        owner: str,
        *,
        since: Cursor | None = None,
        replicas: set[str] | None = None,
        max_batch: int = 5_000,
    ) -> AsyncIterator[LogEvent]:
        """Every line after `since`, then new ones as they come, with a JobUpdate on each change
        of status. Reading is driven by the consumer: a slow consumer slows only itself and the
        engine buffers nothing for it. Ends after the job is terminal and every line is sent."""
        ...

    async def close(self) -> None:
        """Release watches and tasks; jobs keep running."""
        ...
