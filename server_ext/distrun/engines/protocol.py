"""The interface every engine implements.

An engine turns a `JobSpec` into running replicas and answers for them afterwards from what it
holds (files on disk for the local engine, the API server for Kubernetes), never from memory
that a restart would lose. `owner` is the authenticated user's name; an engine raises
`NotFound` for a job that exists but belongs to someone else.
"""

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from distrun.core.job import Job
from distrun.core.logs import Cursor, LogEvent, LogLine
from distrun.core.scalars import ScalarsReport
from distrun.core.spec import JobSpec
from distrun.core.sweep import SweepSpec
from distrun.core.usage import UsageReport, UsageUpdate


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

    async def read_partials(
        self, job_id: str, owner: str, *, replicas: set[str] | None = None
    ) -> list[LogLine]:
        """Each replica's unfinished line as it stands (replicas with none are left out)."""
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
        of status and a PartialUpdate when a replica's unfinished line changes. Reading is
        driven by the consumer: a slow consumer slows only itself and the engine buffers
        nothing for it. Ends after the job is terminal and every line is sent."""
        ...

    async def close(self) -> None:
        """Release watches and tasks; jobs keep running."""
        ...


@runtime_checkable
class ExperimentEngine(Protocol):
    """An engine that can hand a whole sweep to the cluster's own experiment controller
    (Katib) instead of distrun's runner driving its trials."""

    name: str

    async def submit_experiment(
        self, spec: JobSpec, sweep: SweepSpec, owner: str
    ) -> dict[str, Any]:
        """Creates the experiment; returns it as created."""
        ...


@runtime_checkable
class UsageEngine(Protocol):
    """An engine that samples what each replica uses (CPU, memory, GPUs) while a job runs."""

    name: str

    async def read_usage(self, job_id: str, owner: str, *, since: int = 0) -> UsageReport:
        """The samples from seq `since` on that the engine still keeps, and what it can say of
        them (`available` False, with the reason, where it does not sample this job)."""
        ...

    def follow_usage(
        self, job_id: str, owner: str, *, since: int = 0
    ) -> AsyncIterator[UsageUpdate]:
        """The samples from seq `since` on, then new ones as they are taken; ends once the job
        is over and every sample is given."""
        ...


@runtime_checkable
class ScalarsEngine(Protocol):
    """An engine whose replicas' TensorBoard directories it can read (core/scalars.py)."""

    name: str

    async def read_scalars(self, job_id: str, owner: str) -> ScalarsReport:
        """Every replica's scalar series written so far."""
        ...

    async def tensorboard_dir(self, job_id: str, owner: str) -> Path:
        """The directory holding every replica's DISTRUN_TENSORBOARD_DIR."""
        ...
