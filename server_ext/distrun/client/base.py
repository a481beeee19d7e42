"""What the CLI and the kernel magic need of distrun, whichever backend serves it: the `Client`
interface, its events and errors, and reading a cell (header + code + shipped files) into a spec.

`ServerClient` (server_client.py) speaks the REST + websocket API of a running jupyter_server;
`EngineClient` (engine_client.py) calls an engine in-process; `client_from_env` (connect.py)
picks one.
"""

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from distrun.core.errors import DistrunError, SpecError
from distrun.core.logs import Cursor, LogLine
from distrun.core.spec import JobSpec, Limits, check_relative_path


class ClientError(DistrunError):
    """The client could not reach the server or understand its answer; the message says why."""

    status = 503


@dataclass(frozen=True)
class LinesEvent:
    lines: list[LogLine]


@dataclass(frozen=True)
class StatusEvent:
    job: dict[str, Any]  # Job JSON


@dataclass(frozen=True)
class PartialEvent:
    """Replicas' unfinished lines as a terminal shows them now (see core.logs.PartialUpdate):
    each replaced by the finished line of its seq; an empty text takes one back."""

    lines: list[LogLine]


FollowEvent = LinesEvent | StatusEvent | PartialEvent


@dataclass(frozen=True)
class LogPage:
    lines: list[LogLine]
    next: Cursor  # where to resume following after these lines
    partial: list[LogLine] = field(default_factory=list)  # the unfinished lines after them


class Client(Protocol):
    async def limits(self) -> Limits: ...

    async def submit(self, spec: JobSpec) -> dict[str, Any]: ...

    async def submit_cell(
        self, cell: str, overrides: dict[str, Any] | None = None, cwd: str | None = None
    ) -> dict[str, Any]: ...

    async def list_jobs(self) -> list[dict[str, Any]]: ...

    async def get_job(self, job_id: str) -> dict[str, Any]: ...

    async def cancel(self, job_id: str) -> dict[str, Any]: ...

    async def delete(self, job_id: str) -> None: ...

    async def logs(
        self, job_id: str, replicas: list[str] | None = None, tail: int | None = None
    ) -> LogPage: ...

    def follow(
        self, job_id: str, since: Cursor | None = None, replicas: list[str] | None = None
    ) -> AsyncIterator[FollowEvent]: ...

    async def usage(self, job_id: str, since: int = 0) -> dict[str, Any]:
        """The job's sampled usage, as `GET /distrun/jobs/{id}/usage` answers (UsageReport)."""
        ...

    async def close(self) -> None: ...


def default_state_dir() -> Path:
    """The local engine's state directory, the same default the server extension uses."""
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "distrun"


def spec_from_text(
    text: str, overrides: dict[str, Any] | None, cwd: str | Path, limits: Limits
) -> JobSpec:
    """Parse a cell (header + code), ship the files its header names, validate the whole."""
    from distrun.core.header import spec_from_cell

    parsed: tuple[JobSpec, list[str]] = spec_from_cell(text, overrides, limits)
    spec, file_refs = parsed
    if not file_refs:
        return spec
    data = spec.to_dict()
    data["files"] = {**data["files"], **read_files(file_refs, Path(cwd))}
    return JobSpec.from_dict(data, limits)  # again: the shipped files count against the limit


def read_files(file_refs: list[str], cwd: Path) -> dict[str, str]:
    """Relative path -> base64 content, each file read from inside `cwd`."""
    root = cwd.resolve()
    files: dict[str, str] = {}
    for ref in file_refs:
        check_relative_path(ref)
        path = (root / ref).resolve()
        if not path.is_relative_to(root):
            raise SpecError(
                f"file {ref!r} resolves outside {root}; ship files below it", field="files"
            )
        try:
            files[ref] = base64.b64encode(path.read_bytes()).decode()
        except OSError as exc:
            raise SpecError(f"cannot read file {ref!r}: {exc.strerror}", field="files") from None
    return files
