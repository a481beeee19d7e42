"""Clients and servers of different versions still talk (issue 31): the kernel magic runs in
kernel images built at one time while the server is upgraded at another. On the local engine,
real server processes: the previous release's client (tests/compat/*_de7ac60.py, pinned to
commit de7ac60, the last before the log websocket's `runs` shape) against the current server,
and the current client against the previous release's server (that commit's server_ext, from
git, conftest.py); and the current server's answer to each version a client may offer."""

import json
from typing import Any

import pytest
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from distrun.client.base import LinesEvent, StatusEvent
from distrun.client.server_client import ServerClient
from distrun.core.stream_versions import V1_LINES, V2_RUNS
from tests.server_process import ServerProcess

from .server_client_de7ac60 import ServerClient as PreviousServerClient
from .skew import EXPECTED, SPEC

pytestmark = pytest.mark.integration


async def run_to_end(client: Any) -> tuple[list[tuple[str, int, str]], list[str]]:
    """The job's lines and the states its stream reported, followed by `client`."""
    job = await client.submit(SPEC)
    lines, states = [], []
    async for event in client.follow(job["id"]):
        if isinstance(event, LinesEvent):
            lines += [(line.replica, line.seq, line.text) for line in event.lines]
        elif isinstance(event, StatusEvent):
            states.append(event.job["state"])
    return sorted(lines), states


async def test_the_previous_releases_client_follows_a_job_on_the_current_server(
    current_server: ServerProcess,
) -> None:
    client = PreviousServerClient(current_server.url, current_server.token)
    lines, states = await run_to_end(client)
    assert lines == EXPECTED
    assert states[-1] == "succeeded"


async def test_the_current_client_follows_a_job_on_the_previous_releases_server(
    previous_server: ServerProcess,
) -> None:
    client = ServerClient(previous_server.url, previous_server.token)
    lines, states = await run_to_end(client)
    assert lines == EXPECTED
    assert states[-1] == "succeeded"
    # It is the previous server: it selects no version and sends rows.
    [job] = await client.list_jobs()
    ws, messages = await stream_with(previous_server, job["id"], [V2_RUNS, V1_LINES])
    assert ws.selected_subprotocol is None
    assert "lines" in {m["type"] for m in messages} and "runs" not in {m["type"] for m in messages}


async def stream_with(server: ServerProcess, job_id: str, offered: list[str]) -> Any:
    url = server.url_of(f"distrun/jobs/{job_id}/logs/stream").replace("http", "ws", 1)
    request = HTTPRequest(url, headers=server.headers)
    ws = await websocket_connect(request, subprotocols=offered)
    messages = []
    while (message := await ws.read_message()) is not None:
        messages.append(json.loads(message))
    return ws, messages


@pytest.mark.parametrize(
    ("offered", "selected", "shape"),
    [
        ([], None, "lines"),
        ([V1_LINES], V1_LINES, "lines"),
        ([V2_RUNS], V2_RUNS, "runs"),
        ([V2_RUNS, V1_LINES], V2_RUNS, "runs"),
        (["distrun.logs.v9", V1_LINES], V1_LINES, "lines"),
    ],
)
async def test_the_server_serves_every_version_a_client_offers(
    current_server: ServerProcess, offered: list[str], selected: str | None, shape: str
) -> None:
    client = ServerClient(current_server.url, current_server.token)
    job = await client.submit(SPEC)
    ws, messages = await stream_with(current_server, job["id"], offered)
    assert ws.selected_subprotocol == selected
    kinds = {m["type"] for m in messages}
    assert shape in kinds and kinds <= {shape, "status", "partial", "end"}
    assert messages[-2:] == [messages[-2], {"type": "end"}]
    assert messages[-2]["job"]["state"] == "succeeded"


async def test_a_version_the_server_does_not_serve_is_refused_in_words(
    current_server: ServerProcess,
) -> None:
    client = ServerClient(current_server.url, current_server.token)
    job = await client.submit(SPEC)
    ws, messages = await stream_with(current_server, job["id"], ["distrun.logs.v9"])
    assert ws.selected_subprotocol == "distrun.logs.v9", "selected, so that a browser sees why"
    [error] = messages
    assert error["type"] == "error"
    assert "distrun.logs.v9" in error["message"] and V2_RUNS in error["message"]
    assert ws.close_code == 4406
