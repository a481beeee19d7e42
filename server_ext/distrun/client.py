"""A small async client for distrun jobs, with two backends behind one interface.

`ServerClient` speaks the REST + websocket API of a running jupyter_server (token auth);
`EngineClient` calls an `Engine` in-process (by default the local engine over the same state
directory the server uses). The CLI and the kernel magic use either through `Client`.

Following a job's logs over the websocket survives disconnects: `resumable_stream` reconnects
with `since` = the last seq received + 1 per replica, drops anything already seen, and gives
up with a clear error after a bounded number of consecutive failed attempts.
"""

import asyncio
import base64
import getpass
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlencode, urlsplit, urlunsplit

from .engines.base import Cursor, Engine, JobUpdate, LogBatch, LogLine
from .errors import (
    Conflict,
    DistrunError,
    EngineError,
    Forbidden,
    LimitExceeded,
    NotFound,
    SpecError,
)
from .spec import JobSpec, Limits, check_relative_path


class ClientError(DistrunError):
    """The client could not reach the server or understand its answer; the message says why."""

    status = 503


@dataclass(frozen=True)
class LinesEvent:
    lines: list[LogLine]


@dataclass(frozen=True)
class StatusEvent:
    job: dict[str, Any]  # Job JSON


FollowEvent = LinesEvent | StatusEvent


@dataclass(frozen=True)
class LogPage:
    lines: list[LogLine]
    next: Cursor  # where to resume following after these lines


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

    async def close(self) -> None: ...


def default_state_dir() -> Path:
    """The local engine's state directory, the same default the server extension uses."""
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "distrun"


def spec_from_text(
    text: str, overrides: dict[str, Any] | None, cwd: str | Path, limits: Limits
) -> JobSpec:
    """Parse a cell (header + code), ship the files its header names, validate the whole."""
    from .magics import spec_from_cell

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


# --- the in-process backend ---------------------------------------------------------------


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
                from .engines.local import LocalEngine
            except ImportError as exc:
                raise ClientError(f"the local engine is not available: {exc}") from None
            self._engine = LocalEngine(self.state_dir, self._limits)
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
        return LogPage(lines, cursor)

    async def follow(
        self, job_id: str, since: Cursor | None = None, replicas: list[str] | None = None
    ) -> AsyncIterator[FollowEvent]:
        selected = set(replicas) if replicas else None
        events = self.engine.follow(job_id, self.owner, since=since, replicas=selected)
        async for event in events:
            if isinstance(event, LogBatch):
                yield LinesEvent(event.lines)
            elif isinstance(event, JobUpdate):
                yield StatusEvent(event.job.to_json())

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


# --- resuming a log stream ------------------------------------------------------------------


class StreamDisconnected(Exception):
    """The stream broke for a reason worth retrying (connection refused, reset, 5xx)."""


class MessageStream(Protocol):
    """One connection's messages: `read` returns None once the connection is closed."""

    async def read(self) -> str | None: ...

    @property
    def close_code(self) -> int | None: ...

    def close(self) -> None: ...


OpenStream = Callable[[Cursor], Awaitable[MessageStream]]


@dataclass(frozen=True)
class RetryPolicy:
    # Consecutive failed connections before giving up: about 30 s, enough for a server restart.
    attempts: int = 10
    first_delay: float = 0.25
    max_delay: float = 5.0

    def delay(self, failures: int) -> float:
        return float(min(self.first_delay * 2 ** (failures - 1), self.max_delay))


async def resumable_stream(
    open_stream: OpenStream,
    job_id: str,
    since: Cursor | None = None,
    policy: RetryPolicy = RetryPolicy(),
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> AsyncIterator[FollowEvent]:
    """Events of the contract's log stream until `end`, reconnecting transparently."""
    cursor: Cursor = dict(since or {})
    failures = 0
    last_problem = ""
    while True:
        if failures:
            if failures >= policy.attempts:
                raise ClientError(
                    f"lost the log stream of job {job_id} after {failures} attempts "
                    f"({last_problem}); is the server still running?"
                )
            await sleep(policy.delay(failures))
        try:
            stream = await open_stream(dict(cursor))
        except StreamDisconnected as exc:
            failures += 1
            last_problem = str(exc)
            continue
        try:
            async for event in _stream_events(stream, cursor):
                failures = 0
                yield event
            return  # the server said `end`: every line was delivered
        except StreamDisconnected as exc:
            last_problem = str(exc)
        finally:
            stream.close()
        failures += 1


async def _stream_events(stream: MessageStream, cursor: Cursor) -> AsyncIterator[FollowEvent]:
    """One connection's events until `end`; raises StreamDisconnected if it breaks before."""
    error_message: str | None = None
    while True:
        raw = await stream.read()
        if raw is None:
            break
        message = _decode(raw)
        kind = message.get("type")
        if kind == "lines":
            fresh = _fresh_lines(message.get("lines", []), cursor)
            if fresh:
                yield LinesEvent(fresh)
        elif kind == "status":
            yield StatusEvent(message["job"])
        elif kind == "end":
            return
        elif kind == "error":
            error_message = str(message.get("message", "unknown error"))
    code = stream.close_code
    if error_message is not None or (code is not None and 4000 <= code < 5000):
        text = error_message or f"the server closed the log stream with code {code}"
        if code == 4404:
            raise NotFound(text)
        if code == 4400:
            raise SpecError(text)
        raise ClientError(text)
    raise StreamDisconnected(f"connection closed (code {code}) before the job ended")


def _decode(raw: str) -> dict[str, Any]:
    try:
        message = json.loads(raw)
    except ValueError:
        raise ClientError(f"the log stream sent a message that is not JSON: {raw[:80]!r}") from None
    if not isinstance(message, dict):
        raise ClientError(f"the server sent an unexpected log stream message: {raw[:80]!r}")
    return message


def _fresh_lines(rows: list[list[Any]], cursor: Cursor) -> list[LogLine]:
    """The rows not seen yet, as LogLines; advances `cursor` past each one."""
    fresh = []
    for replica, seq, when, text in rows:
        if seq < cursor.get(replica, 0):
            continue  # already delivered before a reconnect
        cursor[replica] = seq + 1
        fresh.append(LogLine(replica, seq, when, text))
    return fresh


def format_cursor(cursor: Cursor) -> str:
    return ",".join(f"{replica}:{seq}" for replica, seq in sorted(cursor.items()))


# --- the REST + websocket backend -----------------------------------------------------------

_ERRORS_BY_STATUS: dict[int, type[DistrunError]] = {
    400: SpecError,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: LimitExceeded,
    502: EngineError,
}


def error_from_response(status: int, body: bytes, what: str) -> DistrunError:
    """The domain error a response stands for, with the server's message."""
    try:
        payload = json.loads(body or b"{}")
    except ValueError:
        payload = {}
    if not isinstance(payload, dict):
        payload = {}
    message = str(payload.get("message") or payload.get("reason") or f"HTTP {status} for {what}")
    if status == 401 or (status == 403 and message == "Forbidden"):
        # jupyter_server's own refusal of a missing or wrong token, not a distrun Forbidden
        return ClientError(
            f"the server refused the request (HTTP {status}); check --token / DISTRUN_TOKEN"
        )
    if status == 400:
        line = payload.get("line")
        if isinstance(line, int):
            # SpecError puts "line N: " in front itself; the server's message may have it already
            message = message.removeprefix(f"line {line}: ")
        else:
            line = None
        field = payload.get("field") if isinstance(payload.get("field"), str) else None
        return SpecError(message, line=line, field=field)
    error_type = _ERRORS_BY_STATUS.get(status, ClientError)
    return error_type(message)


class _WebSocketStream:
    def __init__(self, connection: Any) -> None:
        self._connection = connection

    async def read(self) -> str | None:
        message = await self._connection.read_message()
        if isinstance(message, bytes):
            return message.decode("utf-8", errors="replace")
        return message  # type: ignore[no-any-return]

    @property
    def close_code(self) -> int | None:
        return self._connection.close_code  # type: ignore[no-any-return]

    def close(self) -> None:
        self._connection.close()


class ServerClient:
    """The REST + websocket API of a jupyter_server running the distrun extension."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        request_timeout: float = 120.0,
        retry: RetryPolicy = RetryPolicy(),
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ClientError(f"server URL {url!r} is not valid; write http://host:port/")
        path = parts.path if parts.path.endswith("/") else parts.path + "/"
        self.base_url = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        self.token = token
        self.request_timeout = request_timeout
        self.retry = retry

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"token {self.token}"
        return headers

    def _url(self, path: str, query: list[tuple[str, str]] | None = None) -> str:
        url = self.base_url + path
        return f"{url}?{urlencode(query)}" if query else url

    async def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
    ) -> Any:
        from tornado.httpclient import AsyncHTTPClient, HTTPRequest

        headers = self._headers()
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        request = HTTPRequest(
            self._url(path, query),
            method=method,
            headers=headers,
            body=data,
            request_timeout=self.request_timeout,
            allow_nonstandard_methods=True,
        )
        what = f"{method} {path}"
        try:
            response = await AsyncHTTPClient().fetch(request, raise_error=False)
        except OSError as exc:
            raise ClientError(f"cannot reach the server at {self.base_url}: {exc}") from None
        if response.code == 599:
            raise ClientError(f"cannot reach the server at {self.base_url}: {response.error}")
        if response.code >= 400:
            raise error_from_response(response.code, response.body, what)
        if response.code == 204 or not response.body:
            return None
        try:
            return json.loads(response.body)
        except ValueError:
            raise ClientError(f"the server's answer to {what} is not JSON") from None

    @staticmethod
    def _job_path(job_id: str, suffix: str = "") -> str:
        from tornado.escape import url_escape

        return f"distrun/jobs/{url_escape(job_id, plus=False)}{suffix}"

    async def limits(self) -> Limits:
        info = await self._request("GET", "distrun/engines")
        given = info.get("limits", {}) if isinstance(info, dict) else {}
        known = {f.name for f in fields(Limits)}
        return Limits(**{k: v for k, v in given.items() if k in known and isinstance(v, int)})

    async def submit(self, spec: JobSpec) -> dict[str, Any]:
        job: dict[str, Any] = await self._request("POST", "distrun/jobs", {"spec": spec.to_dict()})
        return job

    async def submit_cell(
        self, cell: str, overrides: dict[str, Any] | None = None, cwd: str | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"cell": cell}
        if overrides:
            body["overrides"] = overrides
        if cwd is not None:
            body["cwd"] = cwd
        job: dict[str, Any] = await self._request("POST", "distrun/jobs", body)
        return job

    async def list_jobs(self) -> list[dict[str, Any]]:
        answer = await self._request("GET", "distrun/jobs")
        jobs: list[dict[str, Any]] = answer["jobs"]
        return jobs

    async def get_job(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = await self._request("GET", self._job_path(job_id))
        return job

    async def cancel(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = await self._request("POST", self._job_path(job_id, "/cancel"), {})
        return job

    async def delete(self, job_id: str) -> None:
        await self._request("DELETE", self._job_path(job_id))

    async def logs(
        self, job_id: str, replicas: list[str] | None = None, tail: int | None = None
    ) -> LogPage:
        query = [("format", "json")] + [("replica", r) for r in replicas or []]
        if tail is not None:
            query.append(("tail", str(tail)))
        cursor: Cursor = {}
        lines: list[LogLine] = []
        while True:
            page_query = query + ([("since", format_cursor(cursor))] if cursor else [])
            answer = await self._request("GET", self._job_path(job_id, "/logs"), query=page_query)
            fresh = _fresh_lines(answer.get("lines", []), cursor)
            lines += fresh
            cursor.update(answer.get("next") or {})
            if not fresh or tail is not None:
                return LogPage(lines, cursor)

    async def _open_stream(
        self, job_id: str, cursor: Cursor, replicas: list[str] | None
    ) -> MessageStream:
        from tornado.httpclient import HTTPClientError, HTTPRequest
        from tornado.websocket import websocket_connect

        query = [("replica", r) for r in replicas or []]
        if cursor:
            query.append(("since", format_cursor(cursor)))
        url = self._url(self._job_path(job_id, "/logs/stream"), query)
        scheme, rest = url.split(":", 1)
        request = HTTPRequest(
            ("wss" if scheme == "https" else "ws") + ":" + rest,
            headers=self._headers(),
            connect_timeout=20.0,
        )
        try:
            connection = await websocket_connect(request)
        except HTTPClientError as exc:
            if exc.code >= 500 or exc.code == 599:
                raise StreamDisconnected(f"HTTP {exc.code}") from None
            body = exc.response.body if exc.response is not None else b""
            raise error_from_response(exc.code, body, f"the log stream of {job_id}") from None
        except OSError as exc:
            raise StreamDisconnected(str(exc) or type(exc).__name__) from None
        return _WebSocketStream(connection)

    def follow(
        self, job_id: str, since: Cursor | None = None, replicas: list[str] | None = None
    ) -> AsyncIterator[FollowEvent]:
        async def open_stream(cursor: Cursor) -> MessageStream:
            return await self._open_stream(job_id, cursor, replicas)

        return resumable_stream(open_stream, job_id, since, self.retry)

    async def close(self) -> None:
        return None


def client_from_env(
    url: str | None = None,
    token: str | None = None,
    state_dir: Path | None = None,
    environ: dict[str, str] | None = None,
) -> Client:
    """A server client when a URL is given or in the environment, else the local engine."""
    env = os.environ if environ is None else environ
    url = url or env.get("DISTRUN_URL") or env.get("JUPYTER_SERVER_URL")
    if url:
        token = token or env.get("DISTRUN_TOKEN") or env.get("JUPYTER_TOKEN")
        return ServerClient(url, token)
    return EngineClient(state_dir=state_dir)
