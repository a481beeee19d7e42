"""The server with its default engine, the real local engine: real replica processes."""

import asyncio
import json
import weakref
from pathlib import Path
from typing import Any

import pytest

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
            messages.append(json.loads(message))
    lines = sorted(
        (line[0], line[1], line[3]) for m in messages if m["type"] == "lines" for line in m["lines"]
    )
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
        while json.loads(await viewers[-1].read_message())["type"] != "lines":
            pass
    first_handler_gone = weakref.ref(next(iter(distrun_app.streams.values())))
    with gc_disabled():  # no cycle may keep it, nor any task or timer
        viewers[0].close()
        await wait_until(lambda: first_handler_gone() is None, "the first viewer is freed", 30)
    assert len(distrun_app.streams) == 1
    viewers[1].close()
    await api("jobs", job["id"], "cancel", method="POST", body={})
