"""The end after the last line (issue 31, point 4): through the real server and the local
engine, a job's terminal status reaches a log stream's client only after every line the job
printed, whether the client came while the job ran, after it had ended, or came back with a
cursor (a resume); 100 jobs in a row, on a machine the test keeps busy itself."""

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from distrun.client.log_resume import rows_of_runs

pytestmark = pytest.mark.integration

REPLICAS, LINES, JOBS, AT_ONCE = 2, 10, 100, 10
CODE = f"import os\nfor i in range({LINES}):\n    print(os.environ['DISTRUN_REPLICA'], i, flush=True)\n"
TERMINAL = {"succeeded", "failed", "cancelled"}
# Busy loops at the server's niceness, as many as the machine has cores, for the test's length.
BUSY = "while True:\n    pass\n"


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"distrun": True}},
        "DistrunApp": {"state_dir": str(tmp_path / "state")},
    }


@contextlib.contextmanager
def busy_machine(processes: int = 2) -> Iterator[None]:
    loops = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(processes)]
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


async def stream(jp_ws_fetch: Any, job_id: str, since: str | None = None) -> list[dict[str, Any]]:
    """Every message of one log stream, to its end."""
    params = {"since": since} if since else {}
    ws = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream", params=params)
    messages = []
    async with asyncio.timeout(120):
        while (message := await ws.read_message()) is not None:
            messages.append(json.loads(message))
    return messages


def check_end_after_last_line(messages: list[dict[str, Any]], since: int, how: str) -> None:
    kinds = [m["type"] for m in messages]
    states = [m["job"]["state"] if m["type"] == "status" else None for m in messages]
    ended = next(i for i, state in enumerate(states) if state in TERMINAL)
    runs = [i for i, kind in enumerate(kinds) if kind == "runs"]
    assert runs, f"{how}: no line came ({kinds}); the job: {messages[ended]['job']}"
    last_line = max(runs)
    assert ended > last_line, f"{how}: the end came before the last line ({kinds})"
    assert kinds[ended:] == ["status", "end"], f"{how}: {kinds}"
    rows = rows_of_runs([run for m in messages if m["type"] == "runs" for run in m["runs"]])
    got = sorted((row[0], row[1]) for row in rows)
    replicas = [f"worker-{r}" for r in range(REPLICAS)]
    assert got == [(name, i) for name in replicas for i in range(since, LINES)], how


async def one_job(api: Any, jp_ws_fetch: Any) -> None:
    spec = {"framework": "generic", "code": CODE, "roles": {"worker": {"replicas": REPLICAS}}}
    job = await api("jobs", method="POST", body={"spec": spec})
    live = await stream(jp_ws_fetch, job["id"])
    check_end_after_last_line(live, 0, "a client there while it ran")
    after = await stream(jp_ws_fetch, job["id"])
    check_end_after_last_line(after, 0, "a client that came after its end")
    since = ",".join(f"worker-{r}:5" for r in range(REPLICAS))
    resumed = await stream(jp_ws_fetch, job["id"], since)
    check_end_after_last_line(resumed, 5, "a client resuming with a cursor")


async def test_the_end_reaches_every_client_after_the_last_line_100_jobs_in_a_row(
    api: Any, jp_ws_fetch: Any
) -> None:
    with busy_machine():
        for _ in range(JOBS // AT_ONCE):
            await asyncio.gather(*(one_job(api, jp_ws_fetch) for _ in range(AT_ONCE)))
