"""Shared fixtures: keep this small."""

import contextlib
import json
import os
import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["tests.parts"]

# No property test is timed: a loaded machine (CI, parallel work) is slow, not wrong.
settings.register_profile("distrun", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("distrun")

from distrun.core.spec import Limits
from distrun.engines.local.engine import LocalEngine
from distrun.engines.local.processes import process_start_time

from . import no_skip

EngineFactory = Callable[..., LocalEngine]


def pytest_configure(config: pytest.Config) -> None:
    # DISTRUN_NO_SKIP=1: a skip not listed in tests/expected_skips.txt fails (tests/no_skip.py).
    no_skip.configure(config)


@pytest.fixture
async def make_local_engine(tmp_path: Path) -> AsyncIterator[EngineFactory]:
    """Builds real local engines (default: over `tmp_path/state`, limits `Limits()`, a stop
    grace period of 1 s). Every engine is closed and whatever its jobs left running is killed
    after the test."""
    engines: list[LocalEngine] = []

    def make(
        state_dir: Path | None = None, limits: Limits | None = None, **kwargs: Any
    ) -> LocalEngine:
        kwargs.setdefault("grace_seconds", 1.0)
        engine = LocalEngine(state_dir or tmp_path / "state", limits or Limits(), **kwargs)
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        await engine.close()
        kill_every_job(engine._jobs_dir.parent)


@pytest.fixture
def local_engine(make_local_engine: EngineFactory) -> LocalEngine:
    return make_local_engine()


def kill_every_job(state_dir: Path) -> None:
    """SIGKILL each unfinished job's supervisor (its replicas die with it) and the process
    groups of its replicas."""
    for job_dir in (state_dir / "jobs").glob("*"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            status = json.loads((job_dir / "status.json").read_text())
            if status["finalized"]:
                continue
            supervisor = json.loads((job_dir / "supervisor.json").read_text())
            pidfd = os.pidfd_open(supervisor["pid"])
            if process_start_time(supervisor["pid"]) == supervisor["start_time"]:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.close(pidfd)
            for pid in status["pids"].values():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
