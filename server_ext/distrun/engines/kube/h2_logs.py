"""Followed logs multiplexed over HTTP/2: up to STREAMS_PER_CONNECTION replicas' log streams
share one TLS connection to the API server, as client-go's do, instead of a connection each.

A server following 1,200 replicas otherwise holds 1,200 TLS sessions (their OpenSSL state,
asyncio transports and aiohttp connections) and makes a socket read and a TLS record per line;
over HTTP/2 a socket read carries the lines of every stream that wrote meanwhile.

Not httpx/httpcore: their HTTP/2 connection reads the socket from whichever request holds its
read lock, so a line for one stream waits until the requests queued on the lock before it have
each read the socket once more (with a hundred quiet log streams, until a hundred more frames
come), and aiohttp has no HTTP/2. `h2` (the protocol as a state machine, without I/O) does the
framing, the flow control and HPACK; this module is the asyncio protocol that feeds it and
hands each stream's data to its reader. Each stream's window is its reader's buffer: the API
server sends no more than `window` bytes a stream ahead of its reader.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.exceptions
import h2.settings

from distrun.engines.kube.loop_local import LoopLocal

STREAMS_PER_CONNECTION = 100
# What one loop iteration hands h2, of every connection's reads together (ReadPacer): a read
# brings every stream's lines since the last (a hundred streams' after a pause of the loop),
# and h2 is pure Python, ~25 us a frame, each frame then a follower's step. Between slices the
# loop runs its other callbacks and timers; a connection with bytes still to hand is paused
# meanwhile, so its socket's bytes wait in the kernel.
READ_SLICE = 16 * 1024
IDLE_SECONDS = 30.0  # a connection left without streams closes after this
CONNECT_SECONDS = 30.0


class NoHttp2(ConnectionError):
    """The API server did not agree to HTTP/2 (ALPN): follow logs over HTTP/1.1."""


@dataclass(frozen=True)
class Endpoint:
    """Where and how to reach the API server: `base_path` is the host URL's path (a proxy's
    prefix), `headers` the request headers (credentials included) as of now."""

    host: str
    port: int
    authority: str
    base_path: str
    ssl_context: ssl.SSLContext
    server_hostname: str | None
    headers: Callable[[], Awaitable[dict[str, str]]]


def endpoint_from(configuration: Any, headers: Callable[[], Awaitable[dict[str, str]]]) -> Endpoint:
    """The Endpoint of a kubernetes_asyncio Configuration, its TLS set up as
    kubernetes_asyncio's REST client sets it up, offering HTTP/2 alone. Raises NoHttp2 for what
    HTTP/2 is not tried over here: plain HTTP and a proxy."""
    url = urlsplit(configuration.host)
    if url.scheme != "https" or configuration.proxy:
        raise NoHttp2(f"{url.scheme} through a proxy" if configuration.proxy else url.scheme)
    context = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, keyfile=configuration.key_file)
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if getattr(configuration, "disable_strict_ssl_verification", False):
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    context.set_alpn_protocols(["h2"])
    port = url.port or 443
    return Endpoint(
        host=url.hostname or "",
        port=port,
        authority=url.netloc.rpartition("@")[2],
        base_path=url.path.rstrip("/"),
        ssl_context=context,
        server_hostname=getattr(configuration, "tls_server_name", None) or None,
        headers=headers,
    )


def log_path(base_path: str, namespace: str, pod: str, query: dict[str, str]) -> str:
    return (
        f"{base_path}/api/v1/namespaces/{quote(namespace, safe='')}/pods/"
        f"{quote(pod, safe='')}/log?{urlencode(query)}"
    )


class Response:
    """One stream's response, with the part of aiohttp's ClientResponse that the log readers
    use: `status`, `reason`, `content.iter_any()`, `read()`, `close()` and `release()`."""

    def __init__(self, connection: _Connection, stream_id: int) -> None:
        self._connection = connection
        self.stream_id = stream_id
        self.status = 0
        self.reason = ""
        self._headers: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._chunks: collections.deque[tuple[bytes, int]] = collections.deque()
        self._taken = 0  # bytes taken and not yet given back to the window
        self._waiter: asyncio.Future[None] | None = None
        self._ended = False
        self._error: BaseException | None = None

    @property
    def content(self) -> Response:
        return self

    async def iter_any(self) -> AsyncIterator[bytes]:
        """The body's chunks as they arrive; each is let go to the API server's window once
        taken. Raises ConnectionError when the stream or its connection broke off."""
        while True:
            while self._chunks:
                data, flow = self._chunks.popleft()
                # The window is given back a quarter at a time, not a frame (a line) at a time.
                self._taken += flow
                if self._taken >= self._connection.window // 4:
                    self._connection.acknowledge(self.stream_id, self._taken)
                    self._taken = 0
                if data:
                    yield data
            if self._error is not None:
                raise self._error
            if self._ended:
                return
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self.iter_any()])

    async def started(self) -> None:
        """Returns once the response's headers came; raises ConnectionError if it broke off."""
        await self._headers

    def close(self) -> None:
        if not self._ended and self._error is None:
            self._connection.cancel(self.stream_id)
        self._end(None)
        # What it was sent and never gave back is the connection's window too: without this,
        # each stream that ends would leave the connection that much less, until it stalled.
        untaken = self._taken + sum(flow for _, flow in self._chunks)
        self._chunks.clear()
        self._taken = 0
        self._connection.acknowledge(self.stream_id, untaken)

    release = close

    # --- what the connection tells it ---

    def _started(self, headers: list[tuple[bytes, bytes]]) -> None:
        for name, value in headers:
            if name == b":status":
                self.status = int(value)
                with contextlib.suppress(ValueError):
                    self.reason = HTTPStatus(self.status).phrase
        if not self._headers.done():
            self._headers.set_result(None)

    def _data(self, data: bytes, flow: int) -> None:
        self._chunks.append((data, flow))
        self._wake()

    def _end(self, error: BaseException | None) -> None:
        if self._ended or self._error is not None:
            return
        if error is None:
            self._ended = True
        else:
            self._error = error
        if not self._headers.done():
            self._headers.set_exception(error or ConnectionError("the stream ended unanswered"))
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


class _Connection(asyncio.Protocol):
    """One HTTP/2 connection and its streams."""

    def __init__(self, window: int) -> None:
        config = h2.config.H2Configuration(client_side=True, header_encoding=None)
        self._h2 = h2.connection.H2Connection(config=config)
        self.window = window
        self._transport: asyncio.Transport | None = None
        self._streams: dict[int, Response] = {}
        self._closing = False
        self._idle: asyncio.TimerHandle | None = None
        self._flush_soon: asyncio.Handle | None = None
        self._unread = bytearray()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def usable(self) -> bool:
        return not self._closing and self._transport is not None and not self.lost.done()

    @property
    def stream_count(self) -> int:
        return len(self._streams)

    def has_room(self) -> bool:
        # h2's own count (open_outbound_streams) walks every stream: the streams kept here
        # are those open.
        allowed = min(STREAMS_PER_CONNECTION, self._h2.remote_settings.max_concurrent_streams)
        return self.usable and len(self._streams) < allowed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._h2.local_settings = h2.settings.Settings(
            client=True,
            initial_values={
                h2.settings.SettingCodes.ENABLE_PUSH: 0,
                h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: self.window,
            },
        )
        self._h2.initiate_connection()
        # The connection's own window holds every stream's: one stalled reader leaves the
        # others their room.
        connection_window = self.window * STREAMS_PER_CONNECTION
        self._h2.increment_flow_control_window(connection_window - 65535)
        self._flush()

    def open(self, path: str, authority: str, headers: dict[str, str]) -> Response:
        stream_id = self._h2.get_next_available_stream_id()
        request = [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
            *((name.lower().encode(), value.encode()) for name, value in headers.items()),
        ]
        response = Response(self, stream_id)
        try:
            self._h2.send_headers(stream_id, request, end_stream=True)
        except h2.exceptions.H2Error as error:
            self._closing = True  # no new stream here: the caller's next try opens another
            raise ConnectionError(f"cannot open an HTTP/2 stream: {error!r}") from None
        self._streams[stream_id] = response
        self._not_idle()
        self._flush()
        return response

    def data_received(self, data: bytes) -> None:
        self._unread += data
        if self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()  # until the pacer has handed h2 all of it
        _READ_PACERS.of(asyncio.get_running_loop()).want(self)

    @property
    def unread(self) -> int:
        return len(self._unread)

    def read_slice(self, most: int) -> int:
        """Hands h2 at most `most` bytes of what was read; how many. Reading resumes once
        every byte read was handed."""
        data = bytes(self._unread[:most])
        del self._unread[:most]
        if data and not self.lost.done():
            self._receive(data)
        if self.lost.done():
            self._unread.clear()  # nobody is left to read it
        if not self._unread and self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()
        return len(data)

    def _receive(self, data: bytes) -> None:
        try:
            events = self._h2.receive_data(data)
        except h2.exceptions.ProtocolError as error:
            self._fail(ConnectionError(f"HTTP/2 protocol error from the API server: {error}"))
            return
        for event in events:
            if self.lost.done():
                return
            self._dispatch(event)
        self._flush()

    def _dispatch(self, event: h2.events.Event) -> None:
        stream = self._streams.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, h2.events.DataReceived):
            if stream is None:  # a stream already let go: give its bytes back to the window
                with contextlib.suppress(h2.exceptions.H2Error):
                    self._h2.acknowledge_received_data(
                        event.flow_controlled_length, event.stream_id
                    )
            else:
                stream._data(event.data, event.flow_controlled_length)
        elif isinstance(event, h2.events.ResponseReceived) and stream is not None:
            stream._started(list(event.headers))
        elif isinstance(event, h2.events.StreamEnded) and stream is not None:
            stream._end(None)
            self._forget(event.stream_id)
        elif isinstance(event, h2.events.StreamReset) and stream is not None:
            stream._end(
                ConnectionResetError(f"the API server reset the stream ({event.error_code!r})")
            )
            self._forget(event.stream_id)
        elif isinstance(event, h2.events.ConnectionTerminated):
            # GOAWAY. h2 takes no frame after it, so every stream here breaks off: its
            # follower resumes after its last line, as after any broken connection.
            self._fail(ConnectionResetError(f"the API server went away ({event.error_code!r})"))

    def acknowledge(self, stream_id: int, flow: int) -> None:
        if flow and self.usable:
            with contextlib.suppress(h2.exceptions.H2Error):
                self._h2.acknowledge_received_data(flow, stream_id)
            if self._flush_soon is None:  # one write for every stream's acknowledgements
                self._flush_soon = asyncio.get_running_loop().call_soon(self._flush)

    def cancel(self, stream_id: int) -> None:
        if self._streams.pop(stream_id, None) is not None and self.usable:
            with contextlib.suppress(h2.exceptions.H2Error):
                self._h2.reset_stream(stream_id, h2.errors.ErrorCodes.CANCEL)
            self._flush()
        self._maybe_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        # What came before the connection closed is read first: the streams it ended end
        # cleanly, and the others keep every line that came.
        _READ_PACERS.of(asyncio.get_running_loop()).forget(self)
        if self._unread and not self.lost.done():
            self._receive(bytes(self._unread))
        self._unread.clear()
        self._fail(ConnectionError(f"the connection to the API server was lost ({exc})"))

    def close(self) -> None:
        self._closing = True
        if self._transport is not None:
            with contextlib.suppress(h2.exceptions.H2Error):
                self._h2.close_connection()
            self._flush()
            self._transport.close()

    def _fail(self, error: BaseException) -> None:
        self._closing = True
        for stream in list(self._streams.values()):
            stream._end(error)
        self._streams.clear()
        if not self.lost.done():
            self.lost.set_result(None)
        if self._transport is not None:
            self._transport.close()
        self._not_idle()

    def _forget(self, stream_id: int) -> None:
        self._streams.pop(stream_id, None)
        self._maybe_idle()

    def _maybe_idle(self) -> None:
        if not self._streams and self._idle is None and not self.lost.done():
            self._idle = asyncio.get_running_loop().call_later(IDLE_SECONDS, self.close)
        if self._closing and not self._streams:
            self.close()

    def _not_idle(self) -> None:
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None

    def _flush(self) -> None:
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        data = self._h2.data_to_send()
        if data and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)


class ReadPacer:
    """Hands h2 at most READ_SLICE bytes a loop iteration, of all the loop's connections'
    reads, each connection in turn.

    A slice a connection was not enough: after any pause every connection has read at once,
    and the next iteration handed h2 a slice of each (a dozen at 1,200 replicas), waking a
    follower a line in the one after, with every timer waiting behind (docs/performance.md)."""

    def __init__(self) -> None:
        self._waiting: dict[_Connection, None] = {}  # in turn order
        self._next: asyncio.Handle | None = None

    def want(self, connection: _Connection) -> None:
        self._waiting.setdefault(connection, None)
        if self._next is None:
            self._next = asyncio.get_running_loop().call_soon(self._iteration)

    def forget(self, connection: _Connection) -> None:
        self._waiting.pop(connection, None)

    def _iteration(self) -> None:
        self._next = None
        budget = READ_SLICE
        while budget > 0 and self._waiting:
            connection = next(iter(self._waiting))
            del self._waiting[connection]
            budget -= connection.read_slice(budget)
            if connection.unread:
                self._waiting[connection] = None  # the others first
        if self._waiting:
            self._next = asyncio.get_running_loop().call_soon(self._iteration)


_READ_PACERS = LoopLocal(ReadPacer)


class LogStreams:
    """HTTP/2 connections to one API server, a new one opened when the others are full.
    `prepare` is handed each new connection's transport (the TLS read buffer set up)."""

    def __init__(
        self, endpoint: Endpoint, window: int, prepare: Callable[[Any], None] | None = None
    ) -> None:
        self._endpoint = endpoint
        self._window = window
        self._prepare = prepare
        self._connections: list[_Connection] = []
        self._opening: asyncio.Task[_Connection] | None = None

    async def get(self, path: str) -> Response:
        """The response to GET `path` (under the endpoint's base path), once its headers came.
        Raises NoHttp2 when the server does not speak HTTP/2, ConnectionError (an OSError)
        when it cannot be reached."""
        headers = await self._endpoint.headers()
        # No await between finding a connection with room and opening the stream on it.
        connection = await self._connection()
        response = connection.open(
            self._endpoint.base_path + path, self._endpoint.authority, headers
        )
        try:
            await response.started()
        except BaseException:
            response.close()
            raise
        return response

    def streams_per_connection(self) -> tuple[int, ...]:
        """How many streams each open connection carries."""
        return tuple(c.stream_count for c in self._connections if c.usable)

    async def close(self) -> None:
        for connection in self._connections:
            connection.close()
        self._connections.clear()

    async def _connection(self) -> _Connection:
        while True:
            self._connections = [c for c in self._connections if c.usable]
            for connection in self._connections:
                if connection.has_room():
                    return connection
            if self._opening is None:
                self._opening = asyncio.ensure_future(self._connect())
            opening = self._opening
            try:
                connection = await asyncio.shield(opening)
            finally:
                if self._opening is opening and opening.done():
                    self._opening = None
            if connection not in self._connections:
                self._connections.append(connection)
            if connection.has_room():
                return connection

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        endpoint = self._endpoint
        transport, connection = await asyncio.wait_for(
            loop.create_connection(
                lambda: _Connection(self._window),
                endpoint.host,
                endpoint.port,
                ssl=endpoint.ssl_context,
                server_hostname=endpoint.server_hostname or endpoint.host,
            ),
            CONNECT_SECONDS,
        )
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is None or ssl_object.selected_alpn_protocol() != "h2":
            transport.close()
            raise NoHttp2("the API server did not offer HTTP/2")
        if self._prepare is not None:
            self._prepare(transport)
        return connection
