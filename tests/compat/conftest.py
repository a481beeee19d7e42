"""The servers of the version-skew tests: the current one, and the previous release's
(commit skew.PREVIOUS's server_ext, from this repository's history), each a real process on the
local engine."""

import io
import subprocess
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.server_process import REPO, ServerProcess

from .skew import MAX_REPLICAS, PREVIOUS

# A limit off its default, so that a client shows it read the engines resource.
CONFIG = {"DistrunApp": {"max_replicas": MAX_REPLICAS}}


@pytest.fixture(scope="session")
def previous_server_ext(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's package, from this repository's history."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", PREVIOUS, "server_ext"],
        capture_output=True,
        check=False,
    )
    assert archive.returncode == 0, (
        f"commit {PREVIOUS} is not in this clone ({archive.stderr.decode().strip()}): "
        "fetch the full history (git fetch --unshallow)"
    )
    root = tmp_path_factory.mktemp("previous")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(root, filter="data")
    return root / "server_ext"


@pytest.fixture
async def current_server(tmp_path: Path) -> AsyncIterator[ServerProcess]:
    server = await ServerProcess(tmp_path / "server", config=CONFIG).astart()
    yield server
    server.stop()


@pytest.fixture
async def previous_server(
    tmp_path: Path, previous_server_ext: Path
) -> AsyncIterator[ServerProcess]:
    path = f"{previous_server_ext}:{REPO}"
    server = ServerProcess(tmp_path / "server", config=CONFIG, env={"PYTHONPATH": path})
    await server.astart()
    yield server
    server.stop()
