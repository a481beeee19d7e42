"""Run a job to its end through a real engine and read what its replicas printed."""

import asyncio
import re
from collections import defaultdict
from importlib.util import find_spec
from pathlib import Path

import pytest

from distrun.core.job import Job
from distrun.core.logs import LogBatch
from distrun.core.spec import JobSpec
from distrun.engines.protocol import Engine

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
