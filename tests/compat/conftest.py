"""The two sides of the version-skew tests: the current code (this tree), and the previous
release (releases.json) in a virtualenv of its own, its wheel built from its commit
(release_venv.py). Servers are real processes on the local engine."""

import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.releases import Release, previous_release
from tests.server_process import REPO, ServerProcess

from .release_venv import clean_env, release_python
from .skew import MAX_REPLICAS

# A limit off its default, so that a client shows it read the engines resource.
CONFIG = {"DistrunApp": {"max_replicas": MAX_REPLICAS}}
DRIVER = Path(__file__).with_name("previous_client.py")
IDENTITY = (
    "import distrun, json, sys; print(json.dumps("
    "{'file': distrun.__file__, 'version': distrun.__version__, 'path': sys.path}))"
)


@pytest.fixture(scope="session")
def previous() -> Release:
    return previous_release()


@pytest.fixture(scope="session")
def previous_python(previous: Release, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The previous release's python, checked to import that release and nothing of this tree
    (a failure here fails every test that uses it)."""
    python = release_python(previous)
    cwd = tmp_path_factory.mktemp("identity")
    as_a_server_or_cli_runs = subprocess.run(
        [str(python), "-c", IDENTITY],
        env=clean_env(PYTHONPATH=""),
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    assert as_a_server_or_cli_runs.returncode == 0, as_a_server_or_cli_runs.stderr
    as_the_driver_runs = run_previous(python, "identity", {}, cwd)
    venv = python.parents[1].resolve()
    for seen in (json.loads(as_a_server_or_cli_runs.stdout), as_the_driver_runs):
        assert Path(seen["file"]).resolve().is_relative_to(venv), seen["file"]
        assert seen["version"] == previous.version
        on_path = {Path(entry or cwd).resolve() for entry in seen["path"]}
        assert not on_path & {REPO, REPO / "server_ext", DRIVER.parent}, seen["path"]
    return python


def run_previous(python: Path, command: str, request: dict[str, Any], cwd: Path) -> Any:
    """What the previous release's client saw doing `command` (previous_client.py), run
    isolated (-I: no PYTHON* variables, no script directory on sys.path)."""
    done = subprocess.run(
        [str(python), "-I", str(DRIVER), command],
        input=json.dumps(request),
        env=clean_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture
async def current_server(tmp_path: Path) -> AsyncIterator[ServerProcess]:
    server = await ServerProcess(tmp_path / "server", config=CONFIG).astart()
    yield server
    server.stop()


@pytest.fixture
async def previous_server(tmp_path: Path, previous_python: Path) -> AsyncIterator[ServerProcess]:
    """The previous release's server: `python -m jupyter_server` of its virtualenv."""
    server = ServerProcess(
        tmp_path / "server", config=CONFIG, env={"PYTHONPATH": ""}, python=previous_python
    )
    await server.astart()
    yield server
    server.stop()
