"""Huge request bodies are refused from their declared length, before they are read, so the
server's memory does not balloon (tornado would otherwise buffer up to ServerApp.max_body_size,
512 MiB, before any handler runs). Measured on a real server process: its peak RSS (VmHWM)."""

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from distrun.server.routes import routes
from tests.security.conftest import server_process
from tests.server.conftest import handler_methods
from tests.server_process import ServerProcess

HUGE = 50 * 1024 * 1024
CHUNK = 1024 * 1024
TIMEOUT = 30
# Well under the 50 MiB a buffered body would add; the server's own noise is far smaller.
MEMORY_SLACK_KIB = 15 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with server_process(tmp_path_factory.mktemp("body-size")) as server:
        yield server


def request_head(server: ServerProcess, method: str, path: str, headers: dict[str, str]) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{server.port}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def read_response(sock: socket.socket) -> tuple[int, bytes]:
    """The status and body of the response, read until the server closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


# A value each route's path parameter matches (a stream ticket: 16 to 64 of [A-Za-z0-9_-]).
SAMPLES = {"job_id": "some-job", "sweep_id": "some-sweep", "ticket": "a-ticket-of-our-own"}


def every_route() -> list[tuple[str, str]]:
    calls = []
    for pattern, handler in routes():
        path = "/" + re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda group: SAMPLES[group[1]], pattern)
        calls += [(method.upper(), path) for method in sorted(handler_methods(handler))]
    return calls


def test_the_routes_to_check_are_found():
    assert ("POST", "/distrun/jobs") in every_route()
    assert ("GET", "/distrun/jobs/some-job/logs/stream") in every_route()
    assert ("GET", "/distrun/streams/a-ticket-of-our-own") in every_route()
    assert not [path for _, path in every_route() if "(" in path]  # every parameter filled


@pytest.mark.parametrize("with_token", [True, False], ids=["token", "anonymous"])
@pytest.mark.parametrize(("method", "path"), every_route())
def test_a_declared_50_mb_body_is_refused_before_a_byte_of_it_is_sent(
    server: ServerProcess, method: str, path: str, with_token: bool
):
    peak_before = server.memory_kib("VmHWM")
    headers = {"Content-Length": str(HUGE), "Content-Type": "application/json"}
    if with_token:
        headers["Authorization"] = f"token {server.token}"
    with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as sock:
        sock.sendall(request_head(server, method, path, headers))
        status, body = read_response(sock)  # no body sent: a server waiting for it times out
    assert status in (400, 403, 413), (status, body)
    if status == 413:
        message = json.loads(body)["message"]
        assert f"{HUGE:,} bytes, over the limit of" in message
    assert server.memory_kib("VmHWM") - peak_before < MEMORY_SLACK_KIB
    assert server.alive()


def test_a_chunked_50_mb_body_is_cut_off_near_the_limit(server: ServerProcess):
    peak_before = server.memory_kib("VmHWM")
    headers = {
        "Transfer-Encoding": "chunked",
        "Content-Type": "application/json",
        "Authorization": f"token {server.token}",
    }
    sent = 0
    chunk = f"{CHUNK:x}\r\n".encode() + b" " * CHUNK + b"\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as sock:
        sock.sendall(request_head(server, "POST", "/distrun/jobs", headers))
        try:
            while sent < HUGE:
                sock.sendall(chunk)
                sent += CHUNK
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed the connection: what this test wants
    assert sent < HUGE / 2, f"the server read {sent:,} bytes of a body over its limit"
    assert server.memory_kib("VmHWM") - peak_before < MEMORY_SLACK_KIB
    assert server.alive()


def test_a_body_within_the_limit_is_still_read(server: ServerProcess, tmp_path: Path):
    """The refusals above are about size: a normal submission through the same path works."""
    body = json.dumps({"spec": {"framework": "generic", "code": "print(1)"}}).encode()
    headers = {
        "Content-Length": str(len(body)),
        "Content-Type": "application/json",
        "Authorization": f"token {server.token}",
        "Connection": "close",
    }
    with socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as sock:
        sock.sendall(request_head(server, "POST", "/distrun/jobs", headers) + body)
        status, reply = read_response(sock)
    assert status == 201, reply
