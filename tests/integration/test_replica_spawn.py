"""Starting a replica, with real processes, on both of the supervisor's paths: through
util-linux's setpriv (the parent-death signal set between vfork and exec) and through a
preexec_fn where setpriv is missing. Either way the replica leads its own process group, its
output reaches the pipe, and a missing interpreter is an OSError naming it."""

import os
import shutil
import sys
from pathlib import Path

import pytest

from distrun.engines.local import capabilities, processes
from distrun.engines.local.processes import death_signal_launcher, spawn_replica

pytestmark = pytest.mark.integration

PATHS = ["setpriv", "preexec_fn"]
# Outside Linux, or in the CI run with every capability forced portable (a guard process then).
NO_PDEATHSIG = "no PR_SET_PDEATHSIG here (not Linux, or forced portable)"


@pytest.fixture(params=PATHS)
def spawn_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "preexec_fn":
        monkeypatch.setattr(processes, "death_signal_launcher", lambda: None)
    elif not capabilities.current().pdeathsig:
        pytest.skip(NO_PDEATHSIG)
    elif death_signal_launcher() is None:
        pytest.fail("setpriv with --pdeathsig is part of this machine's toolchain")
    return str(request.param)


def read_all(fd: int) -> bytes:
    data = b""
    while chunk := os.read(fd, 4096):
        data += chunk
    os.close(fd)
    return data


def test_a_replica_leads_its_own_group_and_its_output_reaches_the_pipe(
    spawn_path: str, tmp_path: Path
) -> None:
    code = "import os; print(os.getpgid(0) == os.getpid(), os.getcwd(), flush=True)"
    spawned = spawn_replica([sys.executable, "-c", code], tmp_path, dict(os.environ))
    assert read_all(spawned.pipe).decode().split() == ["True", str(tmp_path)]
    assert spawned.process.wait() == 0


def test_a_missing_interpreter_is_an_oserror_that_names_it(spawn_path: str, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="/nonexistent/python3"):
        spawn_replica(["/nonexistent/python3", "main.py"], tmp_path, dict(os.environ))


def test_setpriv_is_used_where_it_can_set_the_death_signal() -> None:
    if not capabilities.current().pdeathsig:
        pytest.skip(NO_PDEATHSIG)
    launcher = death_signal_launcher()
    assert launcher is not None and launcher[0] == shutil.which("setpriv")
    assert launcher[1:] == ["--pdeathsig", "KILL", "--"]
