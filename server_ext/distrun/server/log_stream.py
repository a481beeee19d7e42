"""The live log websocket: `GET /distrun/jobs/{id}/logs/stream?since=...&replica=...`.

One task per connection consumes `engine.follow(...)` and waits whenever the socket has not
taken all that was written, so a slow client slows only its own follower and the server holds
at most one batch for it. Lines are sent as soon as they are read, as `runs` messages (each
replica's lines as columns: seq of the first, capture times in epoch milliseconds, texts; JSON
without an object per line); under load each read brings many lines, which go out in frames of
at most `FRAME_MAX_LINES` lines / about `FRAME_MAX_BYTES` bytes. A replica's
unfinished line (a progress bar being redrawn) goes out as a `partial` message whenever it
changes, a few times a second at most.

Versioned by the websocket subprotocol the client offers (Sec-WebSocket-Protocol), as
core/stream_versions.py names them. Version 3 adds `usage` messages: the replicas' sampled
usage (core/usage.py), from seq `usage_since` (a query parameter, 0 by default) on, each sample
once, on a task of their own beside the lines; `end` comes after the last one.
A client that offers none gets version 1, the shape of the first release (`lines`: a row per
line), so that clients built before versions existed keep working; a client that offers only
versions this server does not serve gets its first one selected (a browser fails a handshake
that selects none), then an `error` message naming the versions served and close code 4406.

A job's status goes out as it changes, except its end:
a terminal status is held until the follower has given every line, so that a client never sees
the end before the last line (a job that had ended before the client came included), then
`end`. Closing the socket cancels the task, which closes the follower.
"""

import asyncio
import json
import socket
import weakref
from bisect import bisect_right
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from itertools import accumulate
from typing import TYPE_CHECKING, Any, cast

import orjson
from jupyter_server.auth.decorator import authorized, ws_authenticated
from jupyter_server.base.call_context import CallContext
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.base.websocket import WebSocketMixin
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web
from tornado.iostream import StreamClosedError
from tornado.websocket import WebSocketClosedError, WebSocketHandler

from distrun.core.errors import DistrunError, TooManyOpen
from distrun.core.job import Job
from distrun.core.jobids import check_job_id
from distrun.core.logs import JobUpdate, LineRun, LogBatch, LogEvent, PartialUpdate
from distrun.core.stream_versions import SERVED_PROTOCOLS, V1_LINES, V2_RUNS, V3_USAGE
from distrun.engines.protocol import Engine
from distrun.engines.usage import follow_usage
from distrun.server.handlers import limit_body_size, line_json
from distrun.server.http_errors import WS_CLOSE_INTERNAL_ERROR, error_body, ws_close_code
from distrun.server.params import check_replicas, parse_replicas, parse_since
from distrun.server.usage import parse_usage_since

if TYPE_CHECKING:
    from distrun.server.app import DistrunApp

PROTOCOLS = SERVED_PROTOCOLS
WS_CLOSE_UNSERVED_PROTOCOL = 4406  # 4000 + 406 Not Acceptable

FRAME_MAX_LINES = 2_000
FRAME_MAX_BYTES = 256 * 1024
FOLLOW_MAX_BATCH = 2_000
_LINE_OVERHEAD = 20  # a line's time, quotes and commas around its text


def frames(runs: list[LineRun]) -> list[list[LineRun]]:
    """Runs cut into frames of at most FRAME_MAX_LINES lines and about FRAME_MAX_BYTES (a
    single longer line gets a frame of its own); a run cut in two goes on in the next frame."""
    result: list[list[LineRun]] = []
    frame: list[LineRun] = []
    lines = size = 0
    for run in runs:
        whole = sum(map(len, run.texts)) + _LINE_OVERHEAD * len(run)
        if lines + len(run) <= FRAME_MAX_LINES and size + whole <= FRAME_MAX_BYTES:
            frame.append(run)  # the common case: no sizes to add up line by line
            lines, size = lines + len(run), size + whole
            continue
        # before[k]: the size of the run's first k lines (summed in C: runs are long)
        before = list(accumulate(map(_LINE_OVERHEAD.__add__, map(len, run.texts)), initial=0))
        start = 0
        while start < len(run):
            fits = bisect_right(before, before[start] + FRAME_MAX_BYTES - size, lo=start) - 1
            end = min(start + FRAME_MAX_LINES - lines, fits)
            if end <= start and not frame:
                end = start + 1  # one line over the limit, alone
            if end > start:
                frame.append(_slice(run, start, end))
                lines += end - start
                size += before[end] - before[start]
                start = end
            if start < len(run) or lines >= FRAME_MAX_LINES:
                result.append(frame)
                frame, lines, size = [], 0, 0
    if frame:
        result.append(frame)
    return result


def _slice(run: LineRun, start: int, end: int) -> LineRun:
    if (start, end) == (0, len(run)):
        return run
    times, texts = run.times_ms[start:end], run.texts[start:end]
    return LineRun(run.replica, run.first_seq + start, times, texts)


def runs_message(runs: list[LineRun]) -> bytes:
    """The websocket's `runs` message: each replica's lines as columns, in UTF-8 JSON. orjson
    encodes it about 9x faster than json (a lot of a flood's server time was json's); json
    takes a text orjson refuses (a lone surrogate, which no engine's decoding leaves)."""
    body = [
        {"replica": r.replica, "seq": r.first_seq, "times_ms": r.times_ms, "texts": r.texts}
        for r in runs
    ]
    message = {"type": "runs", "runs": body}
    try:
        return orjson.dumps(message)
    except orjson.JSONEncodeError:
        return json.dumps(message).encode()


# The frames of batches still alive, by the batch's id: an engine that hands one batch object to
# every follower at the same cursor (the local engine does) gets it encoded once for them all.
_encoded: dict[int, dict[str, list[bytes]]] = {}


def lines_message(runs: list[LineRun]) -> bytes:
    """Version 1's `lines` message: a row per line, in capture order, its time in seconds."""
    rows = [line_json(line) for line in LogBatch(runs=runs).lines]
    return json.dumps({"type": "lines", "lines": rows}).encode()


def encoded_frames(batch: LogBatch, protocol: str = V2_RUNS) -> list[bytes]:
    """The messages of a batch in `protocol`'s shape, as UTF-8 JSON (sent as text frames);
    encoded once per batch object and shape."""
    encode = lines_message if protocol == V1_LINES else runs_message
    key = id(batch)
    messages = _encoded.get(key, {}).get(protocol)
    if messages is None:
        messages = [encode(frame) for frame in frames(batch.runs)]
        if key not in _encoded:
            _encoded[key] = {}
            # Forgotten with the batch (before its id can be reused).
            weakref.finalize(batch, _encoded.pop, key, None)
        _encoded[key][protocol] = messages
    return messages


@web.stream_request_body
class LogStreamHandler(ExtensionHandlerMixin, WebSocketMixin, WebSocketHandler, JupyterHandler):
    """Streamed, so that `prepare` sees the headers before any body: a handshake has none, and
    one that declares a body is refused before it is read."""

    auth_resource = "distrun"
    _task: "asyncio.Task[None] | None" = None
    # The client has gone: this stream no longer counts against its user's limit, though its
    # follower may still be letting go of what it held (a feed, its watches, its anchors).
    client_gone = False

    @property
    def app(self) -> "DistrunApp":
        return cast("DistrunApp", self.extensionapp)

    def prepare(self, *args: Any, **kwargs: Any) -> Any:
        limit_body_size(self.request, 0)
        return super().prepare(*args, **kwargs)

    def data_received(self, chunk: bytes) -> None:
        """Never called: the body limit is 0."""

    @ws_authenticated
    @authorized
    async def get(self, **path: str) -> None:
        """`path`: the job's id, or the ticket of a submission (server/stream_tickets.py)."""
        self.owner = self.app.owner_of(self.current_user)
        await super().get(**path)

    def select_subprotocol(self, subprotocols: list[str]) -> str | None:
        """The first version offered that is served; none offered: version 1; none served: the
        first offered (refused in words once open)."""
        served = [name for name in subprotocols if name in PROTOCOLS]
        self.protocol = served[0] if served else V1_LINES
        self.unserved = subprotocols if subprotocols and not served else None
        chosen = served or subprotocols
        return chosen[0] if chosen else None

    protocol = V1_LINES
    unserved: list[str] | None = None
    _usage: "asyncio.Task[None] | None" = None

    def open(self, job_id: str | None = None, ticket: str | None = None) -> None:
        super().open()
        # Without it, Nagle's algorithm and delayed ACKs hold small frames back ~40 ms.
        self.set_nodelay(True)
        if self.unserved is not None:
            work = self._refuse_protocol()
        elif ticket is not None:
            work = self._stream_ticketed(ticket)
        else:
            work = self._stream(str(job_id))
        self._task = asyncio.create_task(work)
        self.app.track(self._task, self)

    async def _refuse_protocol(self) -> None:
        offered = ", ".join(self.unserved or [])
        message = (
            f"this server serves the log stream versions {', '.join(PROTOCOLS)}, not {offered}: "
            "use a distrun client of a version this server serves, or upgrade the server"
        )
        await self._close_with_error({"message": message}, WS_CLOSE_UNSERVED_PROTOCOL)

    def on_message(self, message: str | bytes) -> None:
        """The client sends nothing this server needs."""

    def on_close(self) -> None:
        self.client_gone = True
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self._usage is not None:
            self._usage.cancel()
            self._usage = None
        # jupyter_server stops its ping timer only at the next ping, up to `ws_ping_interval`
        # (30 s) later, and keeps it: the timer and the cycle through it kept this closed
        # handler, its request and connection alive that long and then until a full GC.
        if self.ping_callback is not None:
            self.ping_callback.stop()
            self.ping_callback = None
        _forget_in_call_context(self)

    def get_compression_options(self) -> dict[str, Any] | None:
        """permessage-deflate where the server is configured to offer it (off by default), at
        zlib level 1: log lines shrink nearly as much as at tornado's default 6 (6.0x against
        7.1x for Keras-like lines) for a third of the CPU (0.3 against 0.8 us a line)."""
        return {"compression_level": 1} if self.app.log_stream_compression else None

    def socket_nodelay(self) -> bool:
        """Whether TCP_NODELAY is set on this connection's socket (for tests and diagnostics)."""
        connection = self.ws_connection
        stream = getattr(connection, "stream", None)
        if stream is None or stream.socket is None:
            return False
        return bool(stream.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    async def _stream(self, job_id: str) -> None:
        try:
            # No local keeps the job `_open_follower` read: `_relay` swaps it for the engine's copy.
            last = await self._relay(*await self._open_follower(job_id))
            if self._usage is not None:
                await self._usage  # every sample before the end
            if last.state.terminal:  # held back until every line had gone out
                await self._send_status(last)
            await self._send({"type": "end"})
            self.close(1000)
        except DistrunError as err:
            await self._close_with_error(error_body(err), ws_close_code(err))
        except (WebSocketClosedError, StreamClosedError):
            pass  # the client went away; on_close has released everything else
        except Exception:
            self.log.exception("distrun log stream for %s failed", job_id)
            await self._close_with_error({"message": "internal error"}, WS_CLOSE_INTERNAL_ERROR)

    async def _stream_ticketed(self, ticket: str) -> None:
        """The stream of the job this user submits with `ticket`, once submitted."""
        try:
            self._check_stream_limit()
            job_id = await self.app.stream_tickets.job_of(self.owner, ticket)
        except DistrunError as err:
            await self._close_with_error(error_body(err), ws_close_code(err))
            return
        await self._stream(job_id)

    async def _open_follower(self, job_id: str) -> tuple[AsyncIterator[LogEvent], Job]:
        """The engine's follower of the job, after its status has gone out (unless the job has
        ended: that status goes out after its lines)."""
        self._check_stream_limit()
        since = parse_since(self.get_argument("since", None))
        wanted = parse_replicas(self.get_arguments("replica"))
        engine, job = await self.app.registry.find_job(check_job_id(job_id), self.owner)
        check_replicas(job, wanted)
        if not job.state.terminal:
            await self._send_status(job)
        follower = engine.follow(
            job.id, self.owner, since=since, replicas=wanted, max_batch=FOLLOW_MAX_BATCH
        )
        if self.protocol == V3_USAGE:
            usage_since = parse_usage_since(self.get_argument("usage_since", None), "usage_since")
            self._usage = asyncio.create_task(self._relay_usage(engine, job.id, usage_since))
        return follower, job

    async def _relay_usage(self, engine: Engine, job_id: str, since: int) -> None:
        """Sends the job's usage samples as they are taken, until the job is over."""
        async with aclosing(follow_usage(engine, job_id, self.owner, since)) as updates:
            async for update in updates:
                samples = [sample.to_json() for sample in update.samples]
                await self._write(orjson.dumps({"type": "usage", "samples": samples}))

    def _check_stream_limit(self) -> None:
        limit = self.app.max_streams_per_user
        if self.app.streams_of(self.owner) > limit:  # this one counts already
            raise TooManyOpen(
                f"you have {limit} log streams open, as many as this server allows one user; "
                "close some log viewers or cell outputs that follow jobs, then reopen this one"
            )

    async def _relay(self, follower: AsyncIterator[LogEvent], shown: Job) -> Job:
        """Sends the follower's events; returns the job's last status, which is yet to be sent
        if terminal."""
        async with _closing(follower) as events:
            async for event in events:
                if isinstance(event, LogBatch):
                    for message in encoded_frames(event, self.protocol):
                        await self._write(message)
                elif isinstance(event, PartialUpdate):
                    await self._send(
                        {"type": "partial", "lines": [line_json(x) for x in event.lines]}
                    )
                elif isinstance(event, JobUpdate):
                    if event.job != shown and not event.job.state.terminal:
                        await self._send_status(event.job)
                    # The engine's copy, shared by every viewer of the job: a viewer keeps no
                    # job of its own for as long as it follows (less for the GC to scan).
                    shown = event.job
                # Not held while the next one is awaited: a sent batch, its runs and lists
                # (8k objects at 600 viewers) would live on, for every young collection to scan.
                del event
        return shown

    async def _send_status(self, job: Job) -> None:
        await self._send({"type": "status", "job": job.to_json()})

    async def _send(self, message: dict[str, Any]) -> None:
        await self._write(json.dumps(message))

    async def _write(self, message: str | bytes) -> None:
        """Sends `message`, waiting only while the socket has not taken all that was sent.
        tornado wraps every write in a task of its own: awaited, each message cost this
        handler a step more, the loop an iteration more (most of a busy server's websocket
        steps: docs/performance.md)."""
        sent = self.write_message(message)
        stream = getattr(self.ws_connection, "stream", None)
        if stream is None or stream.writing():
            await sent
        else:
            sent.add_done_callback(_retrieve_error)

    async def _close_with_error(self, body: dict[str, Any], code: int) -> None:
        try:
            await self._send({"type": "error", **body})
        except (WebSocketClosedError, StreamClosedError):
            return
        # Close reasons are limited to 123 bytes; the full message went in the frame.
        self.close(code, body["message"].encode()[:120].decode(errors="ignore"))


def _forget_in_call_context(handler: WebSocketHandler) -> None:
    """Takes the handler out of jupyter_server's CallContext map of its request. Timers the
    request made (tornado's and jupyter_server's pings) stay in asyncio's heap after they are
    cancelled, until the loop purges them, and with them the context they were made in: through
    that map, every closed handler would stay alive, with its request and connection, until then."""
    # No public way reaches the map itself; without it (another jupyter_server) nothing breaks,
    # closed handlers just live longer (the tests that free them with the GC off would say so).
    names_var = getattr(CallContext, "_name_value_map", None)
    names = names_var.get(None) if names_var is not None else None
    if names is not None and names.get(CallContext.JUPYTER_HANDLER) is handler:
        del names[CallContext.JUPYTER_HANDLER]


@asynccontextmanager
async def _closing(events: AsyncIterator[LogEvent]) -> AsyncIterator[AsyncIterator[LogEvent]]:
    """Close the engine's follower as soon as the consumer stops, even when it is cancelled
    between two events (an async generator left alone is closed only by the GC)."""
    try:
        yield events
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


def _retrieve_error(sent: "asyncio.Future[None]") -> None:
    """A write not awaited: its error (the client gone) is the next write's, not a warning."""
    if not sent.cancelled():
        sent.exception()
