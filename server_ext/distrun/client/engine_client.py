"""The in-process backend: calls an `Engine` directly (by default the local engine over the
same state directory the server uses)."""

import getpass
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from distrun.client.base import (
    ClientError,
    FollowEvent,
    LinesEvent,
    LogPage,
    PartialEvent,
    StatusEvent,
    default_state_dir,
    spec_from_text,
)
from distrun.core.logs import Cursor, JobUpdate, LogBatch, LogLine, PartialUpdate
from distrun.core.spec import JobSpec, Limits
from distrun.engines.protocol import Engine
from distrun.engines.usage import usage_report


class EngineClient:
    """Calls an `Engine` directly; `engine=None` builds the local engine on first use."""

    def __init__(
        self,
        engine: Engine | None = None,
        *,
        owner: str | None = None,
        state_dir: Path | None = None,
        limits: Limits | None = None,
    ) -> None:
        self._engine = engine
        self.owner = owner or getpass.getuser()
        self.state_dir = state_dir or default_state_dir()
        self._limits = limits or Limits()

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            try:
                from distrun.engines.local.engine import LocalEngine
            except ImportError as exc:
                raise ClientError(f"the local engine is not available: {exc}") from None
            # A command submits once and exits: a supervisor waiting for a next job is waste.
            self._engine = LocalEngine(self.state_dir, self._limits, warm_supervisor=False)
        return self._engine

    async def limits(self) -> Limits:
        return self._limits

    async def submit(self, spec: JobSpec) -> dict[str, Any]:
        spec = JobSpec.from_dict(spec.to_dict(), self._limits)
        return (await self.engine.submit(spec, self.owner)).to_json()

    async def submit_cell(
        self, cell: str, overrides: dict[str, Any] | None = None, cwd: str | None = None
    ) -> dict[str, Any]:
        spec = spec_from_text(cell, overrides, cwd or os.getcwd(), self._limits)
        return (await self.engine.submit(spec, self.owner)).to_json()

    async def list_jobs(self) -> list[dict[str, Any]]:
        return [job.to_json() for job in await self.engine.list_jobs(self.owner)]

    async def get_job(self, job_id: str) -> dict[str, Any]:
        return (await self.engine.get_job(job_id, self.owner)).to_json()

    async def cancel(self, job_id: str) -> dict[str, Any]:
        return (await self.engine.cancel(job_id, self.owner)).to_json()

    async def delete(self, job_id: str) -> None:
        await self.engine.delete(job_id, self.owner)

    async def logs(
        self, job_id: str, replicas: list[str] | None = None, tail: int | None = None
    ) -> LogPage:
        # The engine reads forward from a cursor; a tail keeps the last N per replica.
        cursor: Cursor = {}
        lines: list[LogLine] = []
        selected = set(replicas) if replicas else None
        while True:
            batch = await self.engine.read_logs(
                job_id, self.owner, since=dict(cursor), replicas=selected
            )
            if not batch:
                break
            for line in batch:
                cursor[line.replica] = line.seq + 1
            lines += batch
            if tail is not None:
                lines = keep_tail(lines, tail)
        unfinished = await self.engine.read_partials(job_id, self.owner, replicas=selected)
        return LogPage(lines, cursor, [p for p in unfinished if p.seq >= cursor.get(p.replica, 0)])

    async def follow(
        self, job_id: str, since: Cursor | None = None, replicas: list[str] | None = None
    ) -> AsyncIterator[FollowEvent]:
        selected = set(replicas) if replicas else None
        events = self.engine.follow(job_id, self.owner, since=since, replicas=selected)
        async for event in events:
            if isinstance(event, LogBatch):
                yield LinesEvent(event.lines)
            elif isinstance(event, PartialUpdate):
                yield PartialEvent(event.lines)
            elif isinstance(event, JobUpdate):
                yield StatusEvent(event.job.to_json())

    async def usage(self, job_id: str, since: int = 0) -> dict[str, Any]:
        return (await usage_report(self.engine, job_id, self.owner, since)).to_json()

    async def close(self) -> None:
        if self._engine is not None:
            await self._engine.close()


def keep_tail(lines: list[LogLine], tail: int) -> list[LogLine]:
    """The last `tail` lines of each replica, in the original order."""
    counts: dict[str, int] = {}
    kept: list[LogLine] = []
    for line in reversed(lines):
        if counts.get(line.replica, 0) < tail:
            counts[line.replica] = counts.get(line.replica, 0) + 1
            kept.append(line)
    kept.reverse()
    return kept
