from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from distrun.engines.base import Engine
from distrun.spec import JobSpec, Limits


def _skip_unless_replica_env_is_implemented() -> None:
    from distrun.replica_env import Address, replica_env

    spec = JobSpec.from_dict({"framework": "generic", "code": ""})
    try:
        replica_env(spec, "probe", "worker-0", {"worker-0": Address("127.0.0.1", 29500)})
    except NotImplementedError:
        pytest.skip("distrun.replica_env is not implemented yet")


@pytest.fixture
async def local_engine(tmp_path: Path) -> AsyncIterator[Engine]:
    """A real local engine: every replica is an OS process on this machine."""
    local = pytest.importorskip("distrun.engines.local", reason="the local engine is not merged")
    _skip_unless_replica_env_is_implemented()
    engine: Engine = local.LocalEngine(tmp_path / "state", Limits())
    yield engine
    await engine.close()
