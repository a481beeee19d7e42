"""Open in TensorBoard: a real TensorBoard on a real job's scalars, reached through the real
jupyter-server-proxy behind the server's authentication; refused on a shared server."""

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

pytest.importorskip("tensorboard", reason="the tensorboard package")
pytest.importorskip("jupyter_server_proxy", reason="jupyter-server-proxy")

# tensorboard's own writer: no torch needed to write scalars.
CODE = """
import os, sys, types
sys.modules["tensorboard.compat.notf"] = types.ModuleType("notf")
from tensorboard.summary import Writer
writer = Writer(os.environ["DISTRUN_TENSORBOARD_DIR"])
for step in range(3):
    writer.add_scalar("loss", 1.0 / (step + 1), step=step)
writer.close()
"""


@pytest.fixture
def jp_server_config(tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"distrun": True, "jupyter_server_proxy": True}},
        "DistrunApp": {
            "state_dir": str(tmp_path / "state"),
            # One person's server (the OS user is the owner), unless the test shares it.
            "owner_source": getattr(request, "param", "os_user"),
            "local_engine_on_shared_server": True,
        },
    }


async def finished_job(api: Any) -> str:
    spec = {"framework": "generic", "code": CODE, "roles": {"worker": {"replicas": 1}}}
    job = await api("jobs", method="POST", body={"spec": spec})
    async with asyncio.timeout(120):
        while (await api("jobs", job["id"]))["state"] not in ("succeeded", "failed"):
            await asyncio.sleep(0.5)
    assert (await api("jobs", job["id"]))["state"] == "succeeded"
    return str(job["id"])


async def test_tensorboard_serves_the_jobs_scalars_through_the_servers_proxy(api, jp_fetch):
    job_id = await finished_job(api)
    opened = await api("jobs", job_id, "tensorboard", method="POST", body={})
    assert opened["url"].endswith(f"/proxy/{opened['port']}/")
    path = opened["url"].split("/proxy/", 1)[1]
    page = await jp_fetch("proxy", path)
    assert b"TensorBoard" in page.body
    async with asyncio.timeout(60):  # TensorBoard reads the directory in the background
        while True:
            tags = json.loads((await jp_fetch("proxy", path + "data/plugin/scalars/tags")).body)
            if tags:
                break
            await asyncio.sleep(0.5)
    assert {replica: list(by_tag) for replica, by_tag in tags.items()} == {"worker-0": ["loss"]}
    again = await api("jobs", job_id, "tensorboard", method="POST", body={})
    assert again["port"] == opened["port"]  # one TensorBoard a job, reused


@pytest.mark.parametrize("jp_server_config", ["username"], indirect=True)
async def test_a_server_several_users_share_does_not_open_it(api):
    with pytest.raises(HTTPClientError) as refused:
        await api("jobs", "job-abcde", "tensorboard", method="POST", body={})
    assert refused.value.code == 409
    assert "several users share" in json.loads(refused.value.response.body)["message"]


# A stand-in server: starts TensorBoard as the handler does, says its pid, waits.
STAND_IN_SERVER = """
import subprocess, sys, time
from pathlib import Path
from distrun.server.tensorboard import tensorboard_command
argv, env = tensorboard_command(Path(sys.argv[1]), int(sys.argv[2]))
child = subprocess.Popen(argv, env=env)
print(child.pid, flush=True)
time.sleep(600)
"""


def test_tensorboard_ends_when_its_server_is_killed(tmp_path: Path) -> None:
    """No shutdown hook runs when a server is SIGKILLed: its TensorBoard must not outlive it."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from distrun.server.tensorboard import _free_loopback_port

    port = str(_free_loopback_port())
    argv = [sys.executable, "-c", STAND_IN_SERVER, str(tmp_path), port]
    parent = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 30
    while not gone(child):
        assert time.monotonic() < deadline, f"TensorBoard {child} outlived its server"
        time.sleep(0.2)


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True
    return "State:\tZ" in state  # exited, not yet reaped
