from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from distrun.core.spec import Limits
from distrun.engines.local.engine import LocalEngine
from distrun.engines.protocol import Engine
from tests.conftest import kill_every_job


@pytest.fixture
async def local_engine(tmp_path: Path) -> AsyncIterator[Engine]:
    """A real local engine: every replica is an OS process on this machine."""
    engine: Engine = LocalEngine(tmp_path / "state", Limits())
    yield engine
    await engine.close()


@pytest.fixture
async def unniced_engine(tmp_path: Path) -> AsyncIterator[LocalEngine]:
    """A real local engine whose replicas run at the machine's own priority: on a busy shared
    machine, niced replicas that import torch afresh at every restart would starve."""
    engine = LocalEngine(tmp_path / "state", Limits(), grace_seconds=1.0, nice=0)
    yield engine
    await engine.close()
    kill_every_job(tmp_path / "state")
