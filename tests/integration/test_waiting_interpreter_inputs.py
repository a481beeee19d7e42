"""A replica interpreter started ahead (waiting_interpreters.py) sees the machine as it is when
its job comes: whatever its start read that changed since (site directories and their .pth
files, what those import, sitecustomize and usercustomize, the user site, pyvenv.cfg, the
executable) makes the replica start cold, and the job sees what a cold start sees. Each change
is made in a virtual environment of the test's own, after the interpreter has started and is
waiting; with the engine, a real `pip install -e` between two runs of a 3-replica job."""

import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from distrun.core.job import JobState
from distrun.engines.local.engine import LocalEngine
from distrun.engines.local.processes import spawn_replica
from distrun.engines.local.waiting_interpreter_main import MARK, stat_key
from distrun.engines.local.waiting_interpreters import (
    RACY_NS,
    StartUpReport,
    WaitingInterpreter,
    WaitingInterpreters,
)

from ..reliability.helpers import spec
from .test_local_engine import EngineFactory, follow_to_end, wait_until
from .test_waiting_interpreters import DUMP, base_env, run

pytestmark = pytest.mark.integration

linux_only = pytest.mark.usefixtures("replicas_start_ahead")

# What DUMP prints, and what the start-up hooks below leave in `sys`.
PROGRAM = DUMP.replace(
    '"excepthook":',
    '"hooks": [getattr(sys, name, None) for name in ("hooked", "customized", "user_customized")],'
    '\n    "version": sys.version,\n    "excepthook":',
)
READ_SYSCALLS = {"x86_64": "0", "aarch64": "63"}


def blocked_reading_its_job(pid: int) -> bool:
    """Whether the interpreter `pid` is up and blocked reading its job (the control fd is the
    first argument after its program)."""
    command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    if len(command) < 3 or not command[1].endswith(b"waiting_interpreter_main.py"):
        return False  # not yet exec'd by setpriv
    call = Path(f"/proc/{pid}/syscall").read_text().split()
    read = READ_SYSCALLS.get(platform.machine())
    assert read is not None, f"which system call reads on {platform.machine()}?"
    return call[:2] == [read, hex(int(command[2]))]


def wait_blocked(pids: list[int]) -> None:
    deadline = time.monotonic() + 60
    while not all(blocked_reading_its_job(pid) for pid in pids):
        assert time.monotonic() < deadline, "the interpreters started ahead are waiting"
        time.sleep(0.02)


def make_venv(path: Path, *options: str) -> Path:
    """A virtual environment without pip (fast); returns its Python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", *options, str(path)], check=True)
    return path / "bin" / "python"


def site_packages(python: Path) -> Path:
    [found] = (python.parent.parent / "lib").glob("python3.*/site-packages")
    return found


class Venv:
    """A virtual environment of the test's own, with a user site under `home`."""

    def __init__(self, root: Path, *options: str) -> None:
        self.root = root
        self.python = make_venv(root / "venv", *options)
        self.site = site_packages(self.python)
        self.home = root / "home"
        self.home.mkdir()
        self.env = {**base_env(("PYTHONUSERBASE", "PYTHONNOUSERSITE")), "HOME": str(self.home)}

    def user_site(self) -> Path:
        version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
        return self.home / ".local" / "lib" / version / "site-packages"

    def module_dir(self, name: str, module: str, text: str) -> Path:
        """A directory outside the environment holding `module`.py."""
        directory = self.root / name
        directory.mkdir(exist_ok=True)
        (directory / f"{module}.py").write_text(text)
        return directory


def started_as_the_supervisor_starts(
    venv: Venv, code_dir: Path, change: Callable[[], object]
) -> tuple[tuple[int, str], tuple[int, str], bool]:
    """PROGRAM started cold after `change`, and as the supervisor starts it with an interpreter
    that waited from before `change`: both outputs, and whether the interpreter took it."""
    (code_dir / "main.py").write_text(PROGRAM)
    time.sleep(RACY_NS / 1e9)  # else what was just prepared counts as changed at the start
    argv, env = [str(venv.python), "main.py"], {**venv.env, "RANK": "0"}
    interpreter = WaitingInterpreter.start(str(venv.python), venv.env, "the-mark")
    waiting = WaitingInterpreters([interpreter])
    try:
        wait_blocked([interpreter.process.pid])
        change()
        cold = run(spawn_replica(argv, code_dir, env))
        taken = waiting.take(argv, env)
        handed = taken.hand_over(argv, code_dir, env) if taken is not None else None
        started = run(handed or spawn_replica(argv, code_dir, env))
    finally:
        waiting.close()
    return cold, started, taken is not None


def add_pth(venv: Venv) -> None:
    directory = venv.module_dir("added", "added_module", "")
    (venv.site / "added.pth").write_text(f"{directory}\n")


def change_pth(venv: Venv) -> None:
    directory = venv.module_dir("changed", "changed_module", "")
    (venv.site / "existing.pth").write_text(f"{directory}\n")


def change_what_a_pth_imports(venv: Venv) -> None:
    (venv.site / "start_hook.py").write_text("import sys\nsys.hooked = 2\n")


def add_sitecustomize(venv: Venv) -> None:
    (venv.site / "sitecustomize.py").write_text("import sys\nsys.customized = True\n")


def create_user_site(venv: Venv) -> None:
    venv.user_site().mkdir(parents=True)
    (venv.user_site() / "usercustomize.py").write_text("import sys\nsys.user_customized = True\n")


def create_a_pth_directory(venv: Venv) -> None:
    venv.module_dir("later", "later_module", "")


def change_pyvenv_cfg(venv: Venv) -> None:
    config = venv.python.parent.parent / "pyvenv.cfg"
    text = config.read_text()
    config.write_text(
        text.replace("include-system-site-packages = false", "include-system-site-packages = true")
    )


def replace_the_executable(venv: Venv) -> None:
    """As an upgrade replaces it: a new file renamed over the old one."""
    new = venv.python.with_name("python.new")
    shutil.copy2(os.path.realpath(venv.python), new)
    new.replace(venv.python)


# The environment as each change finds it, made before the interpreter starts.
def prepared(venv: Venv) -> None:
    (venv.site / "existing.pth").write_text(f"{venv.module_dir('first', 'first_module', '')}\n")
    (venv.site / "start_hook.py").write_text("import sys\nsys.hooked = 1\n")
    (venv.site / "hook.pth").write_text("import start_hook\n")
    (venv.site / "names_later.pth").write_text(f"{venv.root / 'later'}\n")


CHANGES: dict[str, tuple[Callable[[Venv], None], tuple[str, ...]]] = {
    "a .pth file added": (add_pth, ()),
    "a .pth file changed": (change_pth, ()),
    "a module a .pth file imports changed": (change_what_a_pth_imports, ()),
    "sitecustomize added": (add_sitecustomize, ()),
    "the user site created, with usercustomize": (create_user_site, ("--system-site-packages",)),
    "a directory a .pth file names created": (create_a_pth_directory, ()),
    "pyvenv.cfg changed": (change_pyvenv_cfg, ()),
    "the executable replaced": (replace_the_executable, ("--copies",)),
}


@linux_only
@pytest.mark.parametrize("change", CHANGES)
def test_a_change_to_what_start_up_read_makes_the_replica_start_cold_as_it_would(
    tmp_path: Path, change: str
) -> None:
    make_change, options = CHANGES[change]
    venv = Venv(tmp_path, *options)
    prepared(venv)
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (cold_code, cold_out), started, taken = started_as_the_supervisor_starts(
        venv, code_dir, lambda: make_change(venv)
    )
    assert started == (cold_code, cold_out)
    assert not taken, f"{change}: the interpreter started before it is not handed the replica"
    assert cold_code == 0, cold_out


@linux_only
def test_with_nothing_changed_the_interpreter_that_waited_is_handed_the_replica(
    tmp_path: Path,
) -> None:
    """The other side of the test above, in the same environment: a replica still goes to the
    interpreter that waited, and sees what a cold start sees."""
    venv = Venv(tmp_path)
    prepared(venv)
    code_dir = tmp_path / "code"
    code_dir.mkdir()
    (cold_code, cold_out), (code, out), taken = started_as_the_supervisor_starts(
        venv, code_dir, lambda: None
    )
    assert taken
    assert (code, json.loads(out)) == (cold_code, json.loads(cold_out))
    assert json.loads(out)["hooks"] == [1, None, None]


def test_a_report_says_what_changed_and_what_changed_too_near_the_start(tmp_path: Path) -> None:
    """A file changed in the clock tick before the interpreter's start may have changed after
    its start read it: the report cannot tell, so the replica starts cold."""
    old, absent = tmp_path / "old", tmp_path / "absent"
    old.write_text("1")
    inputs = {str(old): stat_key(str(old)), str(absent): "-"}
    report = StartUpReport.parse(b"".join(os.fsencode(field) + b"\0" for field in _flat(inputs)))
    assert report.inputs == inputs
    found = os.stat(old)
    changed_at = max(found.st_ctime_ns, found.st_mtime_ns)
    assert report.changed(started_ns=changed_at + RACY_NS + 1) is None
    assert report.changed(started_ns=changed_at + RACY_NS // 2) == str(old), "too near"
    absent.write_text("")
    assert report.changed(started_ns=changed_at + RACY_NS + 1) == str(absent)
    old.write_text("2")
    assert report.changed(started_ns=changed_at + RACY_NS + 1) == str(old)


def _flat(inputs: dict[str, str]) -> list[str]:
    return [field for pair in inputs.items() for field in pair]


# Whether mypkg is there, and how this replica started (its command line: "ahead" in an
# interpreter started ahead, "cold" otherwise).
IMPORTS_MYPKG = """
    import os
    try:
        import mypkg
    except ModuleNotFoundError:
        found = "missing"
    else:
        found = mypkg.GREETING
    command = open(f"/proc/{os.getpid()}/cmdline", "rb").read().split(b"\\0")[1].decode()
    print(found, "ahead" if command.endswith("waiting_interpreter_main.py") else "cold")
"""

# A build backend of a few lines (PEP 517 and 660), standard library only, so that the install
# needs no network: an editable install is a .pth file naming the source directory, as
# setuptools and hatchling write them.
BACKEND = """
import base64, hashlib, os, zipfile

DIST = "mypkg-0.1.dist-info"


def _wheel(directory, files):
    files = dict(files)
    files[DIST + "/METADATA"] = b"Metadata-Version: 2.1\\nName: mypkg\\nVersion: 0.1\\n"
    files[DIST + "/WHEEL"] = b"Wheel-Version: 1.0\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
        record.append("%s,sha256=%s,%d" % (path, digest.decode(), len(data)))
    record.append(DIST + "/RECORD,,")
    name = "mypkg-0.1-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, name), "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
        wheel.writestr(DIST + "/RECORD", "\\n".join(record) + "\\n")
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {"_mypkg_editable.pth": os.path.abspath("src").encode()})


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with open("src/mypkg/__init__.py", "rb") as init:
        return _wheel(wheel_directory, {"mypkg/__init__.py": init.read()})
"""

PYPROJECT = """
[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]

[project]
name = "mypkg"
version = "0.1"
"""


def small_package(root: Path) -> Path:
    package = root / "mypkg"
    (package / "src" / "mypkg").mkdir(parents=True)
    (package / "pyproject.toml").write_text(PYPROJECT)
    (package / "backend.py").write_text(BACKEND)
    (package / "src" / "mypkg" / "__init__.py").write_text('GREETING = "installed"\n')
    return package


def pip_install_editable(python: Path, package: Path) -> None:
    """A real `pip install -e`, by this environment's pip into the one of `python`."""
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
        + ["--no-build-isolation", "--no-index", "--no-deps", "-e", str(package)],
        check=True,
        capture_output=True,
    )


def marked_processes(mark: str) -> list[int]:
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"{MARK}={mark}".encode() in environ:
            found.append(int(name))
    return found


async def run_imports(engine: LocalEngine) -> list[str]:
    job = await engine.submit(spec(IMPORTS_MYPKG, replicas=3), "alice")
    done, lines = await follow_to_end(engine, job)
    assert done.state == JobState.SUCCEEDED, [line.text for line in lines]
    return sorted(line.text for line in lines)


async def waiting_interpreters_up(engine: LocalEngine, count: int) -> None:
    """Until the next job's supervisor waits with `count` interpreters up and waiting."""
    warm = engine._warm
    assert warm is not None
    mark = await wait_until(lambda: warm._waiting and warm._waiting.mark, "a supervisor waits")
    pids = await wait_until(
        lambda: (found := marked_processes(mark)) and len(found) == count and found,
        "its interpreters started",
    )
    await asyncio.to_thread(wait_blocked, pids)


@linux_only
async def test_a_package_installed_with_pip_install_e_between_two_runs_is_there_on_the_second(
    make_local_engine: EngineFactory, tmp_path: Path
) -> None:
    """The issue's scenario: a 3-replica job, then `pip install -e` of a package whose install
    is a .pth file while the next job's three interpreters wait, then the job again. The
    interpreters that waited through the install are not used; the ones started after it are."""
    python = make_venv(tmp_path / "venv")
    engine = make_local_engine(python=str(python), waiting_interpreters=3)
    await engine.prepare()
    assert [text.split()[0] for text in await run_imports(engine)] == ["missing"] * 3
    await waiting_interpreters_up(engine, 3)
    await asyncio.to_thread(pip_install_editable, python, small_package(tmp_path))
    assert await run_imports(engine) == ["installed cold"] * 3
    await waiting_interpreters_up(engine, 3)
    assert await run_imports(engine) == ["installed ahead"] * 3
