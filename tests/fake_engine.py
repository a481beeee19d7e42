"""An in-memory Engine for the server's tests: `submit` creates a job; tests drive it with
`emit(job_id, replica, *texts)`, `set_partial(job_id, replica, text)`, `set_state(...)` and
`finish(job_id)`.

It follows the protocol of engines/protocol.py: owners are enforced (another owner's job is
NotFound), log seqs are gap-free per replica, `follow` is driven by its consumer and ends after
the job is terminal and every line was yielded.
"""

import asyncio
import copy
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from distrun.core.errors import DistrunError, LimitExceeded, NotFound
from distrun.core.job import Job, JobState, ReplicaStatus
from distrun.core.logs import Cursor, JobUpdate, LogBatch, LogEvent, LogLine, PartialUpdate
from distrun.core.spec import JobSpec, Limits
from distrun.engines.protocol import EngineInfo

# Shared by every instance, so ids are unique across engines as real (random) ids are.
_JOB_NUMBERS = itertools.count(1)


@dataclass
class _Entry:
    job: Job
    lines: list[tuple[int, LogLine]] = field(default_factory=list)  # (capture order, line)
    version: int = 0
    partials: dict[str, LogLine] = field(default_factory=dict)  # replica -> unfinished line
    partial_version: int = 0


class FakeEngine:
    def __init__(self, name: str = "local", limits: Limits | None = None) -> None:
        self.name = name
        self.limits = limits or Limits()
        self.closed = False
        self.active_followers = 0
        self.lines_followed: list[int] = []  # per follower ever started: lines yielded so far
        self.fail_with: DistrunError | None = None  # raised by the next call, then cleared
        # Set: a follower that ends waits for it before it has let go (a slow cleanup).
        self.followers_let_go: asyncio.Event | None = None
        self._entries: dict[str, _Entry] = {}
        self._order = itertools.count()
        self._changed = asyncio.Event()

    # --- test helpers -------------------------------------------------------------------
    def job(self, job_id: str) -> Job:
        return self._entries[job_id].job

    def emit(self, job_id: str, replica: str, *texts: str) -> None:
        entry = self._entries[job_id]
        seq = sum(1 for _, line in entry.lines if line.replica == replica)
        for offset, text in enumerate(texts):
            line = LogLine(replica, seq + offset, time.time(), text)
            entry.lines.append((next(self._order), line))
        self._wake()

    def set_partial(self, job_id: str, replica: str, text: str) -> None:
        """The replica's unfinished line, with the seq its next line will have ("": none)."""
        entry = self._entries[job_id]
        seq = sum(1 for _, line in entry.lines if line.replica == replica)
        if text:
            entry.partials[replica] = LogLine(replica, seq, time.time(), text)
        else:
            entry.partials.pop(replica, None)
        entry.partial_version += 1
        self._wake()

    def set_state(self, job_id: str, state: JobState, reason: str | None = None) -> None:
        entry = self._entries[job_id]
        entry.job.state = state
        entry.job.reason = reason
        for replica in entry.job.replicas:
            replica.state = state
        if state is JobState.RUNNING:
            entry.job.started_at = time.time()
        if state.terminal:
            entry.job.finished_at = time.time()
        entry.version += 1
        self._wake()

    def finish(self, job_id: str, state: JobState = JobState.SUCCEEDED) -> None:
        self.set_state(job_id, state)

    # --- the Engine protocol ------------------------------------------------------------
    async def info(self) -> EngineInfo:
        self._maybe_fail()
        return EngineInfo(name=self.name, description="in-memory test engine", available=True)

    async def submit(self, spec: JobSpec, owner: str) -> Job:
        self._maybe_fail()
        unfinished = [e for e in self._entries.values() if e.job.owner == owner]
        if sum(not e.job.state.terminal for e in unfinished) >= self.limits.max_jobs_per_user:
            raise LimitExceeded(f"{owner} already has {self.limits.max_jobs_per_user} jobs")
        job_id = f"{spec.name}-{next(_JOB_NUMBERS):05d}"
        replicas = [
            ReplicaStatus(name=name, role=name.rsplit("-", 1)[0], index=int(name.rsplit("-", 1)[1]))
            for name in spec.replica_names()
        ]
        job = Job(
            id=job_id,
            name=spec.name,
            owner=owner,
            engine=self.name,
            framework=spec.framework,
            state=JobState.PENDING,
            created_at=time.time(),
            replicas=replicas,
            spec=spec,
        )
        self._entries[job_id] = _Entry(job)
        return copy.deepcopy(job)

    async def list_jobs(self, owner: str) -> list[Job]:
        self._maybe_fail()
        jobs = [copy.deepcopy(e.job) for e in self._entries.values() if e.job.owner == owner]
        return sorted(jobs, key=lambda job: job.created_at, reverse=True)

    async def get_job(self, job_id: str, owner: str) -> Job:
        self._maybe_fail()
        return copy.deepcopy(self._owned(job_id, owner).job)

    async def cancel(self, job_id: str, owner: str) -> Job:
        entry = self._owned(job_id, owner)
        if not entry.job.state.terminal:
            self.set_state(job_id, JobState.CANCELLED, reason="cancelled by the user")
        return copy.deepcopy(entry.job)

    async def delete(self, job_id: str, owner: str) -> None:
        self._owned(job_id, owner)
        del self._entries[job_id]
        self._wake()

    async def read_logs(
        self,
        job_id: str,
        owner: str,
        *,
        since: Cursor | None = None,
        replicas: set[str] | None = None,
        limit: int = 10_000,
    ) -> list[LogLine]:
        return self._after(self._owned(job_id, owner), since or {}, replicas, limit)

    async def read_partials(
        self, job_id: str, owner: str, *, replicas: set[str] | None = None
    ) -> list[LogLine]:
        entry = self._owned(job_id, owner)
        return [p for r, p in entry.partials.items() if replicas is None or r in replicas]

    async def follow(
        self,
        job_id: str,
        owner: str,
        *,
        since: Cursor | None = None,
        replicas: set[str] | None = None,
        max_batch: int = 5_000,
    ) -> AsyncIterator[LogEvent]:
        self._owned(job_id, owner)
        cursor = dict(since or {})
        seen_version = seen_partials = -1
        self.active_followers += 1
        follower = len(self.lines_followed)
        self.lines_followed.append(0)
        try:
            while True:
                changed = self._changed
                entry = self._owned(job_id, owner)
                if entry.version != seen_version:
                    seen_version = entry.version
                    yield JobUpdate(copy.deepcopy(entry.job))
                lines = self._after(entry, cursor, replicas, max_batch)
                if lines:
                    for line in lines:
                        cursor[line.replica] = line.seq + 1
                    self.lines_followed[follower] += len(lines)
                    yield LogBatch(lines)
                    continue
                if entry.partial_version != seen_partials:
                    seen_partials = entry.partial_version
                    shown = [
                        p for r, p in entry.partials.items() if replicas is None or r in replicas
                    ]
                    if shown:
                        yield PartialUpdate(shown)
                if entry.job.state.terminal:
                    return
                await changed.wait()
        finally:
            if self.followers_let_go is not None:
                await self.followers_let_go.wait()
            self.active_followers -= 1

    async def close(self) -> None:
        self.closed = True

    # --- internals ----------------------------------------------------------------------
    def _owned(self, job_id: str, owner: str) -> _Entry:
        entry = self._entries.get(job_id)
        if entry is None or entry.job.owner != owner:
            raise NotFound(f"no job {job_id!r}")
        return entry

    def _after(
        self, entry: _Entry, since: Cursor, replicas: set[str] | None, limit: int
    ) -> list[LogLine]:
        selected = [
            line
            for _, line in entry.lines
            if (replicas is None or line.replica in replicas)
            and line.seq >= since.get(line.replica, 0)
        ]
        return selected[:limit]

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _maybe_fail(self) -> None:
        if self.fail_with is not None:
            error, self.fail_with = self.fail_with, None
            raise error
