"""Run a job to its end through a real engine and read what its replicas printed."""

import asyncio
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from distrun.client.log_resume import rows_of_runs
from distrun.core.job import Job
from distrun.core.logs import LogBatch
from distrun.core.spec import JobSpec
from distrun.engines.protocol import Engine
from tests.conftest import kill_every_job
from tests.server_process import ServerProcess

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
OWNER = "alice"

LOSS_RE = re.compile(r"^(?:step|epoch) \d+ loss=([0-9.]+(?:e[-+]?\d+)?)$")
FINAL_LOSS_RE = re.compile(r"^final_loss=([0-9.]+(?:e[-+]?\d+)?)$")
WEIGHTS_RE = re.compile(r"^weights_sha=([0-9a-f]{64})$")


def needs_module(name: str) -> pytest.MarkDecorator:
    """Skip (without importing it, torch takes seconds) when a module is not installed."""
    return pytest.mark.skipif(find_spec(name) is None, reason=f"{name} is not installed")


def example_code(name: str) -> str:
    return (EXAMPLES / name).read_text()


async def run_to_end(
    engine: Engine, spec: JobSpec, timeout: float
) -> tuple[Job, dict[str, list[str]]]:
    """Submit, follow every replica's log until the engine ends the stream, return the final job
    and each replica's lines. A job still running after `timeout` seconds is cancelled and fails
    the test with what it printed so far."""
    job = await engine.submit(spec, OWNER)
    printed: dict[str, list[str]] = defaultdict(list)

    async def follow() -> None:
        async for event in engine.follow(job.id, OWNER):
            if isinstance(event, LogBatch):
                for line in event.lines:
                    printed[line.replica].append(line.text)

    try:
        await asyncio.wait_for(follow(), timeout)
    except asyncio.TimeoutError:
        await engine.cancel(job.id, OWNER)
        pytest.fail(f"job {job.id} did not end within {timeout:.0f} s\n{describe(printed)}")
    return await engine.get_job(job.id, OWNER), dict(printed)


def describe(printed: dict[str, list[str]], tail: int = 30) -> str:
    """The last lines of every replica, for assertion messages."""
    return "\n".join(
        f"--- {replica}\n" + "\n".join(lines[-tail:]) for replica, lines in sorted(printed.items())
    )


def assert_succeeded(job: Job, printed: dict[str, list[str]]) -> None:
    assert job.state.value == "succeeded", (
        f"job {job.state.value}: {job.reason}\n{describe(printed)}"
    )


def reported_losses(lines: list[str]) -> list[float]:
    """The losses a replica reported during training, then its final loss, in order."""
    losses = [float(m[1]) for line in lines if (m := LOSS_RE.match(line))]
    losses += [float(m[1]) for line in lines if (m := FINAL_LOSS_RE.match(line))]
    return losses


def weights_checksums(lines: list[str]) -> list[str]:
    return [m[1] for line in lines if (m := WEIGHTS_RE.match(line))]


@dataclass
class Streamed:
    """What a websocket viewer of a job received, in order."""

    job: dict[str, Any] = field(default_factory=dict)  # the last status
    printed: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    # (replica, seq, text) of every unfinished-line update, and how many lines had arrived then
    partials: list[tuple[str, int, str, int]] = field(default_factory=list)


async def stream_through_a_server(workdir: Path, spec: dict[str, Any], timeout: float) -> Streamed:
    """Submit `spec` to a real jupyter_server with the local engine and read the job's log
    websocket to its end, as the JupyterLab extension does."""
    server = await ServerProcess(workdir).astart()
    streamed = Streamed()
    try:
        status, job = await server.request("POST", "distrun/jobs", {"spec": spec})
        assert status == 201, job
        ws = await server.websocket(f"distrun/jobs/{job['id']}/logs/stream")
        async with asyncio.timeout(timeout):
            while (message := await ws.read_message()) is not None:
                _record(streamed, json.loads(message))
    finally:
        server.stop()
        kill_every_job(server.state_dir)
    return streamed


def _record(streamed: Streamed, message: dict[str, Any]) -> None:
    if message["type"] == "status":
        streamed.job = message["job"]
    elif message["type"] == "runs":
        for replica, _, _, text in rows_of_runs(message["runs"]):
            streamed.printed[replica].append(text)
    elif message["type"] == "partial":
        for replica, seq, _, text in message["lines"]:
            received = len(streamed.printed[replica])
            streamed.partials.append((replica, seq, text, received))
