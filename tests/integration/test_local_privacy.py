"""A local job's secrets stay its owner's: its files are private, and its replicas do not get
the server's credentials (real supervisor and replica processes)."""

import base64
import os
import stat
from pathlib import Path

import pytest

from distrun.core.job import JobState
from distrun.engines.local.engine import LocalEngine
from distrun.engines.local.inherited_env import inherited_env

from ..reliability import helpers
from ..reliability.helpers import spec

pytestmark = pytest.mark.integration

SERVER_CREDENTIALS = {
    "JUPYTER_TOKEN": "server-token",
    "JUPYTERHUB_API_TOKEN": "hub-token",
    "JPY_API_TOKEN": "hub-token-old-name",
    "JUPYTERHUB_CLIENT_ID": "jupyterhub-user-alice",
    "DISTRUN_TOKEN": "distrun-token",
    "DISTRUN_GATEWAY_TOKEN": "gateway-token",
    "JUPYTER_GATEWAY_AUTH_TOKEN": "gateway-auth",
}
PRINT_ENVIRONMENT = """
import os
for name in sorted(os.environ):
    print(f"{name}={os.environ[name]}")
"""


async def test_replicas_get_the_specs_variables_but_none_of_the_servers_credentials(
    local_engine: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SERVER_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DISTRUN_TEST_ORDINARY", "kept")
    job = await local_engine.submit(
        spec(PRINT_ENVIRONMENT, replicas=2, env={"JUPYTER_TOKEN": "the users own"}), "alice"
    )
    final, lines = await helpers.follow_to_end(local_engine, job, "alice")
    assert final.state == JobState.SUCCEEDED
    for replica in ("worker-0", "worker-1"):
        env = dict(
            line.text.split("=", 1)
            for line in lines
            if line.replica == replica and "=" in line.text
        )
        assert not {name for name in SERVER_CREDENTIALS if name in env} - {"JUPYTER_TOKEN"}
        assert env["JUPYTER_TOKEN"] == "the users own"  # a spec's %env value is the user's
        assert env["DISTRUN_TEST_ORDINARY"] == "kept"
        assert env["PATH"] == os.environ["PATH"]
        assert env["DISTRUN_REPLICA"] == replica
    assert not any(value in line.text for line in lines for value in ("hub-token", "gateway"))


def test_inherited_env_keeps_everything_but_credentials() -> None:
    environ = {**SERVER_CREDENTIALS, "HOME": "/home/a", "DISTRUN_ENGINE": "local", "PATH": "/bin"}
    assert inherited_env(environ) == {"HOME": "/home/a", "DISTRUN_ENGINE": "local", "PATH": "/bin"}


def modes(root: Path) -> dict[str, int]:
    return {
        str(path.relative_to(root)): stat.S_IMODE(path.stat().st_mode)
        for path in [root, *root.rglob("*")]
    }


async def test_a_jobs_directory_and_every_file_in_it_are_its_owners_only(
    make_local_engine, tmp_path: Path
) -> None:
    old_umask = os.umask(0o022)  # the usual umask: files would be world-readable
    try:
        engine = make_local_engine(tmp_path / "state")
        shipped = {"data/config.json": base64.b64encode(b'{"key": "secret"}').decode()}
        job = await engine.submit(
            spec("print('hi')", env={"API_KEY": "secret"}, files=shipped), "alice"
        )
        final, _ = await helpers.follow_to_end(engine, job, "alice")
    finally:
        os.umask(old_umask)
    assert final.state == JobState.SUCCEEDED
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    found = modes(tmp_path / "state" / "jobs")
    assert any(name.endswith("job.json") for name in found)
    assert any(name.endswith("config.json") for name in found)
    assert any(name.endswith(".log") for name in found)
    wrong = {
        name: oct(mode)
        for name, mode in found.items()
        if mode & 0o077 or mode & 0o700 not in (0o600, 0o700)
    }
    assert wrong == {}


async def test_a_state_directory_made_world_readable_before_is_made_private_again(
    make_local_engine, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    (state / "jobs").mkdir(parents=True, mode=0o755)
    state.chmod(0o755)
    engine = make_local_engine(state)
    job = await engine.submit(spec("print('hi')"), "alice")
    await helpers.follow_to_end(engine, job, "alice")
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "jobs").stat().st_mode) == 0o700
