"""Following a job's logs over the websocket across disconnects: `resumable_stream` reconnects
with `since` = the last seq received + 1 per replica, drops anything already seen, and gives up
with a clear error after a bounded number of consecutive failed attempts."""

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from distrun.client.base import ClientError, FollowEvent, LinesEvent, PartialEvent, StatusEvent
from distrun.core.errors import NotFound, SpecError
from distrun.core.logs import Cursor, LineRun, LogBatch, LogLine


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
        if kind in ("runs", "lines"):  # version 2's columns, or version 1's rows
            rows = rows_of_runs(message.get("runs", [])) if kind == "runs" else message["lines"]
            fresh = fresh_lines(rows, cursor)
            if fresh:
                yield LinesEvent(fresh)
        elif kind == "partial":
            unfinished = after_cursor(message.get("lines", []), cursor)
            if unfinished:
                yield PartialEvent(unfinished)
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


def fresh_lines(rows: list[list[Any]], cursor: Cursor) -> list[LogLine]:
    """The rows not seen yet, as LogLines; advances `cursor` past each one."""
    fresh = []
    for replica, seq, when, text in rows:
        if seq < cursor.get(replica, 0):
            continue  # already delivered before a reconnect
        cursor[replica] = seq + 1
        fresh.append(LogLine(replica, seq, when, text))
    return fresh


def rows_of_runs(runs: list[dict[str, Any]]) -> list[list[Any]]:
    """A `runs` message's lines as `[replica, seq, time, text]` rows, in capture order."""
    try:
        batch = LogBatch(
            runs=[LineRun(r["replica"], r["seq"], r["times_ms"], r["texts"]) for r in runs]
        )
        lines = batch.lines
    except (KeyError, TypeError, ValueError):
        raise ClientError(f"the server sent a malformed runs message: {runs!r:.80}") from None
    return [[line.replica, line.seq, line.time, line.text] for line in lines]


def after_cursor(rows: list[list[Any]], cursor: Cursor) -> list[LogLine]:
    """The unfinished lines for lines not received yet (the cursor does not move)."""
    return [
        LogLine(replica, seq, when, text)
        for replica, seq, when, text in rows
        if seq >= cursor.get(replica, 0)
    ]


def format_cursor(cursor: Cursor) -> str:
    return ",".join(f"{replica}:{seq}" for replica, seq in sorted(cursor.items()))
