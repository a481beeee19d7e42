"""Clients and servers of different releases still talk (issue 31): the kernel magic runs in
kernel images built at one time while the server is upgraded at another. On the local engine,
real server processes: the previous release's own client code (its wheel in a virtualenv of
its own, conftest.py), following a job's log stream, resuming it and running a `%%distrun`
cell through its kernel magic, against the current server; the current client against the
previous release's server; and the current server's answer to each version a client may
offer."""

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from distrun.client.base import LinesEvent, StatusEvent
from distrun.client.server_client import ServerClient
from distrun.core.stream_versions import V1_LINES, V2_RUNS
from tests.server_process import ServerProcess

from .conftest import run_previous
from .skew import CODE, EXPECTED, SPEC, SPEC_JSON

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


def server_of(server: ServerProcess) -> dict[str, Any]:
    return {"url": server.url, "token": server.token, "spec": SPEC_JSON}


async def test_the_previous_releases_client_follows_a_job_on_the_current_server(
    current_server: ServerProcess, previous_python: Path, tmp_path: Path
) -> None:
    seen = await asyncio.to_thread(
        run_previous, previous_python, "follow", server_of(current_server), tmp_path
    )
    assert [tuple(line) for line in seen["lines"]] == EXPECTED
    assert seen["states"][-1] == "succeeded"


async def test_the_previous_releases_client_resumes_the_current_servers_log_stream(
    current_server: ServerProcess, previous_python: Path, tmp_path: Path
) -> None:
    request = {**server_of(current_server), "since": {"worker-0": 3, "worker-1": 5}}
    seen = await asyncio.to_thread(run_previous, previous_python, "resume", request, tmp_path)
    # Its first connection broke after the first lines; it reconnected from where it was, and
    # every line came once.
    first, *again = seen["cursors"]
    assert first == {} and again and again[0], seen["cursors"]
    assert [tuple(line) for line in seen["dropped"]["lines"]] == EXPECTED
    assert seen["dropped"]["states"][-1] == "succeeded"
    # From a cursor, only what comes after it.
    assert seen["since"]["lines"] == [["worker-0", 3, "worker-0 3"], ["worker-0", 4, "worker-0 4"]]


async def test_the_previous_releases_kernel_magic_runs_a_cell_on_the_current_server(
    current_server: ServerProcess, previous_python: Path, tmp_path: Path
) -> None:
    request = {
        "url": current_server.url,
        "token": current_server.token,
        "cell": "%%distrun --framework generic --workers 2\n" + CODE,
    }
    seen = await asyncio.to_thread(run_previous, previous_python, "magic", request, tmp_path)
    assert seen["error"] is None, seen
    assert seen["result"]["state"] == "succeeded", seen
    printed = seen["printed"]
    assert all(f"worker-{r} {i}" in printed for r in range(2) for i in range(5)), printed
    client = ServerClient(current_server.url, current_server.token)
    job = await client.get_job(seen["result"]["job_id"])
    # The header's line stays, blank, so that line numbers match the cell's.
    assert job["state"] == "succeeded" and job["spec"]["code"] == "\n" + CODE


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
