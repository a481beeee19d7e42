"""The server with its default engine, the real local engine: real replica processes."""

import asyncio
import json
import weakref
from pathlib import Path
from typing import Any

import pytest

from distrun.client.log_resume import rows_of_runs
from distrun.core.stream_versions import STREAM_PROTOCOLS, V3_USAGE
from tests.reliability.helpers import gc_disabled, wait_until

pytestmark = pytest.mark.integration

CODE = "import os\nfor i in range(3):\n    print(os.environ['DISTRUN_REPLICA'], i, flush=True)\n"


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"distrun": True}},
        "DistrunApp": {"state_dir": str(tmp_path / "state")},
    }


async def test_a_job_runs_as_real_processes_and_its_logs_stream_to_the_end(api, jp_ws_fetch):
    spec = {"framework": "generic", "code": CODE, "roles": {"worker": {"replicas": 2}}}
    job = await api("jobs", method="POST", body={"spec": spec})
    ws = await jp_ws_fetch("distrun", "jobs", job["id"], "logs", "stream")
    messages = []
    async with asyncio.timeout(60):
        while (message := await ws.read_message()) is not None:
            assert isinstance(message, str), "text frames: what a browser's JSON.parse reads"
            messages.append(json.loads(message))
    rows = rows_of_runs([run for m in messages if m["type"] == "runs" for run in m["runs"]])
    lines = sorted((row[0], row[1], row[3]) for row in rows)
    assert lines == [
        (replica, i, f"{replica} {i}") for replica in ("worker-0", "worker-1") for i in range(3)
    ]
    statuses = [m["job"]["state"] for m in messages if m["type"] == "status"]
    assert statuses[-1] == "succeeded"
    assert messages[-1] == {"type": "end"}
    assert ws.close_code == 1000
    assert (await api("jobs", job["id"]))["state"] == "succeeded"


async def test_a_viewer_that_leaves_a_job_others_watch_is_freed_at_once(
    api, jp_ws_fetch, distrun_app
):
    code = "import time\nfor i in range(600):\n    print(i, flush=True)\n    time.sleep(0.05)\n"
    spec = {"framework": "generic", "code": code, "roles": {"worker": {"replicas": 2}}}
    job = await api("jobs", method="POST", body={"spec": spec})
    viewers = []
    for _ in range(2):  # the first one starts the engine's watcher of the job
        viewers.append(await jp_ws_fetch("distrun", "jobs", job["id"], "logs", "stream"))
        while json.loads(await viewers[-1].read_message())["type"] != "runs":
            pass
    first_handler_gone = weakref.ref(next(iter(distrun_app.streams.values())))
    with gc_disabled():  # no cycle may keep it, nor any task or timer
        viewers[0].close()
        await wait_until(lambda: first_handler_gone() is None, "the first viewer is freed", 30)
    assert len(distrun_app.streams) == 1
    viewers[1].close()
    await api("jobs", job["id"], "cancel", method="POST", body={})


BACKLOG_CODE = (
    "import sys\nfor i in range(200_000):\n    sys.stdout.write(f'{i} ' + 'x' * 60 + '\\n')\n"
)


async def test_a_close_mid_backlog_is_answered_and_the_streams_work_stops_at_once(
    api, distrun_app, jp_http_port, jp_base_url, jp_auth_header
):
    """Issue 15: a client that closes while the server still has a backlog to send. The server
    answers and stops its work at once. A client that reads on while closing gets the answer at
    once; one whose own flow control has stopped reading (the `websockets` library's default,
    with 16 messages queued) cannot see it behind the data it has not read and waits for its
    close timeout, but the server's stream has ended (docs/guarantees.md)."""
    import websockets

    spec = {"framework": "generic", "code": BACKLOG_CODE, "roles": {"worker": {"replicas": 4}}}
    job = await api("jobs", method="POST", body={"spec": spec})
    url = f"ws://127.0.0.1:{jp_http_port}{jp_base_url}distrun/jobs/{job['id']}/logs/stream"
    headers = dict(jp_auth_header)

    async def paused_then_closing(**options: Any) -> Any:
        ws = await websockets.connect(url, additional_headers=headers, max_size=None, **options)
        for _ in range(3):
            await ws.recv()
        await asyncio.sleep(0.5)  # the server's sends back up
        return ws

    reading = await paused_then_closing(max_queue=None)
    async with asyncio.timeout(5):
        await reading.close()
    assert reading.close_code == 1000
    await wait_until(lambda: not distrun_app.streams, "the server's stream ended", 5)

    paused = await paused_then_closing(close_timeout=30)
    closing = asyncio.create_task(paused.close())
    await wait_until(lambda: not distrun_app.streams, "the server's stream ended", 5)
    paused.transport.abort()
    await asyncio.gather(closing, return_exceptions=True)
    await api("jobs", job["id"], "cancel", method="POST", body={})


async def read_to_end(ws: Any) -> list[dict[str, Any]]:
    messages = []
    async with asyncio.timeout(60):
        while (message := await ws.read_message()) is not None:
            messages.append(json.loads(message))
    return messages


async def test_version_3_sends_each_replicas_usage_resumably_and_older_versions_none(
    api, jp_ws_fetch, checked
):
    from tests.server.test_openapi import stream_schema

    code = "import time\nprint('up', flush=True)\ntime.sleep(3.5)\nprint('done', flush=True)\n"
    spec = {"framework": "generic", "code": code, "roles": {"worker": {"replicas": 2}}}
    job = await api("jobs", method="POST", body={"spec": spec})
    stream = ("distrun", "jobs", job["id"], "logs", "stream")
    v3 = await jp_ws_fetch(*stream, subprotocols=[V3_USAGE, *STREAM_PROTOCOLS])
    assert v3.selected_subprotocol == V3_USAGE
    messages = await read_to_end(v3)
    assert messages[-1] == {"type": "end"}
    usage = [m for m in messages if m["type"] == "usage"]
    for message in usage:
        stream_schema("StreamUsage").validate(message)
    samples = [sample for m in usage for sample in m["samples"]]
    assert len(samples) >= 2
    assert [s["seq"] for s in samples] == list(range(len(samples)))
    assert {"worker-0", "worker-1"} <= set(samples[1]["replicas"])
    assert all(r["rss_bytes"] > 0 for s in samples for r in s["replicas"].values())
    status, report = await checked("GET", f"/distrun/jobs/{job['id']}/usage")
    assert status == 200 and report["available"] and report["samples"] == samples
    assert report["next"] == len(samples)
    # Resumed: only the samples after the last one received, the lines as before.
    resumed = await read_to_end(
        await jp_ws_fetch(*stream, params={"usage_since": 1}, subprotocols=[V3_USAGE])
    )
    again = [s for m in resumed if m["type"] == "usage" for s in m["samples"]]
    assert again == samples[1:]
    # Older versions: the same lines, no usage.
    for version in STREAM_PROTOCOLS:
        older = await read_to_end(await jp_ws_fetch(*stream, subprotocols=[version]))
        assert "usage" not in {m["type"] for m in older}
        assert older[-1] == {"type": "end"}
