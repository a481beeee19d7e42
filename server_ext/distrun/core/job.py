"""A job as every engine reports it: its state, its replicas' states, and the spec it runs."""

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

from distrun.core.spec import JobSpec


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
