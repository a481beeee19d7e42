"""Followed logs over HTTP/2 (engines/kube/h2_logs.py), against an HTTP/2 server over real TLS
on loopback (the h2 library's server side): many streams share a few connections, each
stream's lines arrive whole and in order, a reader that stops holds no more than its window,
errors read as the API's, and an API server without HTTP/2 gets HTTP/1.1."""

import asyncio
import collections
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import h2.config
import h2.connection
import h2.events
import pytest
from aiohttp import web
from hyperframe.frame import GoAwayFrame
from kubernetes_asyncio import client

from distrun.core.errors import NotFound
from distrun.engines.kube import h2_logs
from distrun.engines.kube.client import LOG_STREAM_BUFFER, KubeApi, StreamedLines
from distrun.engines.kube.h2_logs import READ_SLICE, STREAMS_PER_CONNECTION

from .test_kube_tls_buffer import self_signed

TOKEN = "secret-token"
Handler = Callable[["H2Server", int, dict[str, str]], Awaitable[None]]


class H2Server(asyncio.Protocol):
    """An HTTP/2 server connection: each request runs `handler(server, stream_id, headers)`."""

    def __init__(self, handler: Handler, connections: list["H2Server"]) -> None:
        self.h2 = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        self.handler = handler
        self.window_opened = asyncio.Event()
        self.reset: set[int] = set()
        self.tasks: list[asyncio.Task[None]] = []
        connections.append(self)

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.h2.initiate_connection()
        self.flush()

    def data_received(self, data: bytes) -> None:
        for event in self.h2.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                headers = dict(event.headers)
                self.tasks.append(
                    asyncio.ensure_future(self.handler(self, event.stream_id, headers))
                )
            elif isinstance(event, h2.events.WindowUpdated):
                self.window_opened.set()
            elif isinstance(event, h2.events.StreamReset):
                self.reset.add(event.stream_id)
                self.window_opened.set()
        self.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        for task in self.tasks:
            task.cancel()

    def flush(self) -> None:
        self.transport.write(self.h2.data_to_send())

    def respond(self, stream_id: int, status: int = 200, end: bool = False) -> None:
        self.h2.send_headers(stream_id, [(":status", str(status))], end_stream=end)
        self.flush()

    async def send(self, stream_id: int, data: bytes, end: bool = False) -> None:
        """Sends `data` as the stream's flow control lets it."""
        while data:
            if stream_id in self.reset:
                return
            room = min(self.h2.local_flow_control_window(stream_id), len(data), 16384)
            if room == 0:
                self.window_opened.clear()
                await self.window_opened.wait()
                continue
            self.h2.send_data(stream_id, data[:room])
            data = data[room:]
            self.flush()
        if end:
            self.h2.end_stream(stream_id)
            self.flush()


async def serve(tmp_path: Path, handler: Handler) -> tuple[Any, list[H2Server]]:
    """An HTTP/2 server over TLS on loopback, and the connections it takes."""
    context = self_signed(tmp_path)
    context.set_alpn_protocols(["h2"])
    connections: list[H2Server] = []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: H2Server(handler, connections), "127.0.0.1", 0, ssl=context
    )
    return server, connections


def kube_api(tmp_path: Path, port: int) -> KubeApi:
    configuration = client.Configuration(host=f"https://127.0.0.1:{port}")
    configuration.ssl_ca_cert = str(tmp_path / "cert.pem")
    configuration.tls_server_name = "localhost"
    configuration.api_key = {"BearerToken": TOKEN}
    configuration.api_key_prefix = {"BearerToken": "Bearer"}
    return KubeApi(client.ApiClient(configuration))


async def lines_until_broken(api: KubeApi, pod: str) -> list[bytes]:
    """The lines of `pod`'s log read until the read breaks off with a ConnectionError."""
    got: list[bytes] = []
    with pytest.raises(ConnectionError):
        async with api.stream_log("ns", pod, "main") as response:
            async for line in StreamedLines(response):
                got.append(line)
    return got


async def lines_of(api: KubeApi, pod: str, count: int) -> list[bytes]:
    got: list[bytes] = []
    async with api.stream_log("ns", pod, "main") as response:
        async for line in StreamedLines(response):
            got.append(line)
            if len(got) == count:
                break
    return got


async def test_many_followed_logs_share_a_few_connections_each_line_whole_and_in_order(
    tmp_path: Path,
) -> None:
    streams = STREAMS_PER_CONNECTION + 20
    seen_paths: list[str] = []

    async def log(server: H2Server, stream_id: int, headers: dict[str, str]) -> None:
        assert headers["authorization"] == f"Bearer {TOKEN}"
        seen_paths.append(headers[":path"])
        pod = headers[":path"].split("/")[6]
        server.respond(stream_id)
        for index in range(20):
            await server.send(stream_id, f"{pod} line {index}\n".encode())
            await asyncio.sleep(0.001)

    server, connections = await serve(tmp_path, log)
    api = kube_api(tmp_path, server.sockets[0].getsockname()[1])
    try:
        results = await asyncio.gather(*(lines_of(api, f"pod-{n}", 20) for n in range(streams)))
    finally:
        await api.close()
        server.close()
    for n, lines in enumerate(results):
        assert lines == [f"pod-{n} line {index}".encode() for index in range(20)]
    assert len(connections) == 2
    assert api._streaming is None  # no HTTP/1.1 connection was opened
    assert "/api/v1/namespaces/ns/pods/pod-0/log?" in seen_paths[0]
    assert "container=main" in seen_paths[0] and "follow=true" in seen_paths[0]


async def test_a_reader_that_stops_holds_its_window_and_leaves_the_others_their_lines(
    tmp_path: Path,
) -> None:
    sent: dict[str, int] = {}

    async def log(server: H2Server, stream_id: int, headers: dict[str, str]) -> None:
        pod = headers[":path"].split("/")[6]
        server.respond(stream_id)
        line = b"x" * 1023 + b"\n"
        for _ in range(1024):  # 1 MiB
            await server.send(stream_id, line)
            sent[pod] = sent.get(pod, 0) + len(line)

    server, connections = await serve(tmp_path, log)
    api = kube_api(tmp_path, server.sockets[0].getsockname()[1])
    try:
        async with api.stream_log("ns", "stalled", "main") as stalled:
            stalled_lines = StreamedLines(stalled)
            first = await anext(aiter(stalled_lines))  # then it reads no more
            assert first == b"x" * 1023
            other = await lines_of(api, "reading", 1024)  # a whole MiB on the same connection
            assert len(other) == 1024
            await asyncio.sleep(0.2)
            assert sent["stalled"] <= 2 * LOG_STREAM_BUFFER
        await asyncio.sleep(0.1)
        [connection] = connections
        assert len(connection.reset) == 2  # both let go: the API server stops writing them
    finally:
        await api.close()
        server.close()


async def test_an_error_reads_as_the_api_servers_message(tmp_path: Path) -> None:
    async def missing(server: H2Server, stream_id: int, headers: dict[str, str]) -> None:
        server.respond(stream_id, 404)
        body = {"kind": "Status", "message": 'pods "gone" not found', "code": 404}
        await server.send(stream_id, json.dumps(body).encode(), end=True)

    server, _ = await serve(tmp_path, missing)
    api = kube_api(tmp_path, server.sockets[0].getsockname()[1])
    try:
        with pytest.raises(NotFound, match='cannot follow the log of pod gone: pods "gone" not'):
            async with api.stream_log("ns", "gone", "main"):
                pass
    finally:
        await api.close()
        server.close()


async def test_a_broken_connection_ends_the_read_with_a_connection_error(tmp_path: Path) -> None:
    async def breaks(server: H2Server, stream_id: int, headers: dict[str, str]) -> None:
        server.respond(stream_id)
        await server.send(stream_id, b"one\n")
        await asyncio.sleep(0.05)
        server.transport.abort()

    server, _ = await serve(tmp_path, breaks)
    api = kube_api(tmp_path, server.sockets[0].getsockname()[1])
    try:
        got = await lines_until_broken(api, "pod")
        assert got == [b"one"]
        assert await lines_of(api, "pod", 1) == [b"one"]  # a new connection serves the next
    finally:
        await api.close()
        server.close()


async def test_an_api_server_without_http2_serves_the_log_over_http1(tmp_path: Path) -> None:
    async def log(request: web.Request) -> web.StreamResponse:
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        response = web.StreamResponse()
        await response.prepare(request)
        await response.write(f"{request.match_info['pod']} over http/1.1\n".encode())
        return response

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/pods/{pod}/log", log)
    runner = web.AppRunner(app)
    await runner.setup()
    context = self_signed(tmp_path)
    context.set_alpn_protocols(["http/1.1"])
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    api = kube_api(tmp_path, port)
    try:
        assert await lines_of(api, "p", 1) == [b"p over http/1.1"]
        assert await lines_of(api, "q", 1) == [b"q over http/1.1"]
        assert api._log_streams is False  # asked once, then HTTP/1.1 only
    finally:
        await api.close()
        await runner.cleanup()


async def test_logs_go_over_http1_when_http2_is_off(tmp_path: Path) -> None:
    configuration = client.Configuration(host="https://127.0.0.1:1")
    api = KubeApi(client.ApiClient(configuration), http2_logs=False)
    assert await api._log_over_http2("follow", "/x") is None
    await api.close()


async def test_a_connection_the_server_goes_away_from_breaks_its_streams_and_takes_no_more(
    tmp_path: Path,
) -> None:
    """GOAWAY (an API server shutting down, or rebalancing with --goaway-chance): h2 takes no
    frame after it, so the stream under way ends in a ConnectionError (a follower resumes
    after its last line, as after any broken connection) and the next one opens on a new
    connection."""
    going: list[int] = []

    async def log(server: H2Server, stream_id: int, headers: dict[str, str]) -> None:
        server.respond(stream_id)
        await server.send(stream_id, b"before\n")
        if not going:
            going.append(stream_id)
            # Written past the server's h2, which would send no frame after its own GOAWAY.
            server.transport.write(GoAwayFrame(0, last_stream_id=stream_id).serialize())
            await asyncio.sleep(0.1)
        await server.send(stream_id, b"after\n", end=True)

    server, connections = await serve(tmp_path, log)
    api = kube_api(tmp_path, server.sockets[0].getsockname()[1])
    try:
        got = await lines_until_broken(api, "pod")
        assert got == [b"before"]
        assert await asyncio.wait_for(lines_of(api, "pod", 2), 10) == [b"before", b"after"]
        assert len(connections) == 2
    finally:
        await api.close()
        server.close()


async def test_streams_that_end_give_their_bytes_back_to_the_connection(tmp_path: Path) -> None:
    """Each stream's last bytes are given back to the connection's window too: 700 logs of
    12 KiB, one after the other on one connection, are twice what its window holds."""

    async def log(server: H2Server, stream_id: int, headers: dict[str, str]) -> None:
        server.respond(stream_id)
        await server.send(stream_id, b"x" * (12 * 1024 - 1) + b"\n", end=True)

    server, connections = await serve(tmp_path, log)
    api = kube_api(tmp_path, server.sockets[0].getsockname()[1])
    try:
        for n in range(700):
            [line] = await asyncio.wait_for(lines_of(api, f"pod-{n}", 1), 10)
            assert len(line) == 12 * 1024 - 1
        assert len(connections) == 1
    finally:
        await api.close()
        server.close()


async def _burst_of_40_streams(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, list[tuple[int, int]]]:
    """40 streams write 8 KiB each at the same moment (320 KiB, as after a pause of the
    loop), every line checked to arrive whole and in order; the connections opened, and what
    h2 was handed: (bytes, the loop iteration they were handed in), each time."""
    pods = [f"pod-{n}" for n in range(40)]
    opened: set[str] = set()
    all_open = asyncio.Event()

    async def log(server: H2Server, stream_id: int, headers: dict[str, str]) -> None:
        pod = headers[":path"].split("/")[6]
        server.respond(stream_id)
        opened.add(pod)
        if len(opened) == len(pods):
            all_open.set()
        await all_open.wait()
        lines = (f"{pod} {i:04} ".encode() * 100 + b"\n" for i in range(8))
        await server.send(stream_id, b"".join(lines))

    loop = asyncio.get_running_loop()
    iterations = 0

    def tick() -> None:  # one call a loop iteration
        nonlocal iterations, ticker
        iterations += 1
        ticker = loop.call_soon(tick)

    ticker = loop.call_soon(tick)
    handed: list[tuple[int, int]] = []
    receive = h2.connection.H2Connection.receive_data

    def recording(self: h2.connection.H2Connection, data: bytes) -> Any:
        if self.config.client_side:
            handed.append((len(data), iterations))
        return receive(self, data)

    monkeypatch.setattr(h2.connection.H2Connection, "receive_data", recording)
    server, connections = await serve(tmp_path, log)
    api = kube_api(tmp_path, server.sockets[0].getsockname()[1])
    try:
        results = await asyncio.gather(*(lines_of(api, pod, 8) for pod in pods))
    finally:
        ticker.cancel()
        await api.close()
        server.close()
    for pod, lines in zip(pods, results, strict=True):
        assert lines == [f"{pod} {i:04} ".encode() * 100 for i in range(8)]
    assert sum(size for size, _ in handed) > 320 * 1024
    return len(connections), handed


async def test_a_burst_of_every_streams_lines_reaches_h2_a_slice_at_a_time_the_loop_between(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """h2 is handed at most READ_SLICE bytes a loop iteration, so the loop's other callbacks
    and timers run between any two slices."""
    connections, handed = await _burst_of_40_streams(tmp_path, monkeypatch)
    assert connections == 1
    assert max(size for size, _ in handed) <= READ_SLICE
    iterations_handed = [iteration for _, iteration in handed]
    assert len(set(iterations_handed)) == len(iterations_handed), "two slices in one iteration"


async def test_a_burst_on_many_connections_reaches_h2_a_slice_a_loop_iteration_in_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same burst over four connections (10 streams each): what every connection read
    reaches h2 READ_SLICE bytes a loop iteration in all, not a slice each."""
    monkeypatch.setattr(h2_logs, "STREAMS_PER_CONNECTION", 10)
    connections, handed = await _burst_of_40_streams(tmp_path, monkeypatch)
    assert connections == 4
    per_iteration: collections.Counter[int] = collections.Counter()
    for size, iteration in handed:
        per_iteration[iteration] += size
    assert max(per_iteration.values()) <= READ_SLICE
