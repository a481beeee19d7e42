"""The server with its default engine, the real local engine: real replica processes."""

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("distrun.engines.local", reason="the local engine lands in a parallel branch")

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
