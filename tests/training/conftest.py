from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from distrun.core.spec import Limits
from distrun.engines.local.engine import LocalEngine
from distrun.engines.protocol import Engine


@pytest.fixture
async def local_engine(tmp_path: Path) -> AsyncIterator[Engine]:
    """A real local engine: every replica is an OS process on this machine."""
    engine: Engine = LocalEngine(tmp_path / "state", Limits())
    yield engine
    await engine.close()
