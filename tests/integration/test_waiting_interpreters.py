"""Replica interpreters started ahead of their job (waiting_interpreters.py), with real
processes: a program handed to one sees what the same program started cold sees (environment,
arguments, `sys.path`, `__main__`, loaded modules, flags, descriptors, signals) and ends the
same way (its output, tracebacks and exit status, atexit and threads, multiprocessing's spawn);
the engine hands a job's first replica to one, starts cold what would start otherwise, and
still finds what such a replica forked and left behind."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from distrun.core.job import Job, JobState
from distrun.core.replica_env import DEFAULT_ENV
from distrun.engines.local import waiting_interpreters
from distrun.engines.local.engine import LocalEngine
from distrun.engines.local.processes import Spawned, spawn_replica
from distrun.engines.local.waiting_interpreter_main import MARK
from distrun.engines.local.waiting_interpreters import WaitingInterpreter, WaitingInterpreters

from ..reliability.helpers import spec
from .test_local_engine import EngineFactory, follow_to_end, gone, wait_for_lines, wait_until

pytestmark = pytest.mark.integration

# Outside Linux, or in the CI run with every capability forced portable.
linux_only = pytest.mark.usefixtures("replicas_start_ahead")

DUMP = """
import sys
modules = sorted(sys.modules)
import json, os, signal
main = sys.modules["__main__"]
print(json.dumps({
    "modules": modules,
    "environ": dict(os.environ),
    "argv": sys.argv,
    "orig_argv": getattr(sys, "orig_argv", None),
    "path": sys.path,
    "executable": sys.executable,
    "flags": list(sys.flags),
    "globals": {name: type(value).__name__ for name, value in vars(main).items()},
    "file": main.__file__,
    "cached": main.__cached__,
    "name": __name__,
    "cwd": os.getcwd(),
    "fds": sorted(os.listdir("/proc/self/fd")),
    "stdio": [(f.encoding, f.errors, f.line_buffering, getattr(f, "write_through", None))
              for f in (sys.stdout, sys.stderr)],
    "stdin": os.path.realpath("/proc/self/fd/0"),
    "group_leader": os.getpgid(0) == os.getpid(),
    "nice": os.getpriority(os.PRIO_PROCESS, 0),
    "signals": [str(signal.getsignal(s)) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE)],
    "excepthook": sys.excepthook is sys.__excepthook__,
}))
"""

ENDINGS = {
    "an exception": "def f():\n    raise ValueError('no')\nprint('before')\nf()\n",
    "a chained exception": "try:\n    1 / 0\nexcept ZeroDivisionError as e:\n"
    "    raise KeyError('k') from e\n",
    "a syntax error": "print('never')\ndef (:\n",
    "sys.exit with a code": "import sys\nprint('out')\nsys.exit(3)\n",
    "sys.exit with a message": "import sys\nsys.exit('bye')\n",
    "KeyboardInterrupt": "raise KeyboardInterrupt\n",
    "atexit after threads": "import atexit, threading, time\n"
    "atexit.register(lambda: print('atexit', flush=True))\n"
    "def late():\n    time.sleep(0.2)\n    print('thread', flush=True)\n"
    "threading.Thread(target=late).start()\nprint('main', flush=True)\n",
    "a hook of its own": "import sys\n"
    "sys.excepthook = lambda t, e, tb: print('hooked', t.__name__, tb.tb_frame.f_code.co_name)\n"
    "def g():\n    raise OSError\ng()\n",
    "multiprocessing spawn": "import multiprocessing as mp\n"
    "def square(x):\n    return x * x\n"
    "if __name__ == '__main__':\n"
    "    with mp.get_context('spawn').Pool(2) as pool:\n"
    "        print(pool.map(square, range(4)))\n",
    "warnings": "import warnings\nwarnings.warn('careful')\n",
}


def other_pythons() -> list[str]:
    """Every other CPython from 3.6 on that this machine has (on PATH, in /usr/bin, in pyenv's
    versions): a replica's interpreter may be any of them (the engine's `python`)."""
    candidates = [shutil.which(f"python3.{minor}") for minor in range(6, 15)]
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    candidates += [str(path) for path in sorted(pyenv.glob("3.*/bin/python3"))]
    candidates += [str(path) for path in sorted(Path("/usr/bin").glob("python3.*[0-9]"))]
    found = set()
    for command in filter(None, candidates):
        try:
            answer = subprocess.run(
                [
                    command,
                    "-c",
                    "import sys; assert sys.version_info >= (3, 6); print(sys.executable)",
                ],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            )
        except (OSError, subprocess.SubprocessError):
            continue  # a pyenv shim for a version not selected, say
        if answer.stdout.strip() not in ("", sys.executable):
            found.add(os.path.realpath(answer.stdout.strip()))
    return sorted(found)


PYTHONS = [sys.executable, *other_pythons()]


def base_env(without: tuple[str, ...] = ()) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name not in without}
    return {**env, **DEFAULT_ENV}


def run(process: Spawned) -> tuple[int, str]:
    output = b""
    while chunk := os.read(process.pipe, 65536):
        output += chunk
    os.close(process.pipe)
    return process.process.wait(timeout=60), output.decode()


def cold_and_waiting(
    code: str,
    tmp_path: Path,
    start_env: dict[str, str],
    job_env: dict[str, str],
    python: str = sys.executable,
) -> tuple[tuple[int, str], tuple[int, str]]:
    """The program's exit status and output, started cold, then handed to an interpreter
    started ahead with `start_env`; the same file in the same directory."""
    (tmp_path / "main.py").write_text(code)
    argv = [python, "main.py"]
    cold = run(spawn_replica(argv, tmp_path, job_env))
    interpreter = WaitingInterpreter.start(python, start_env, "the-mark")
    assert interpreter.fits(argv, job_env)
    assert interpreter.changed() is None, "nothing its start read changed"
    handed = interpreter.hand_over(argv, tmp_path, job_env)
    assert handed is not None, "the waiting interpreter took the program"
    return cold, run(handed)


@linux_only
@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("without", [(), ("LANG", "LC_ALL", "LC_CTYPE")], ids=["locale", "C"])
def test_a_program_handed_over_sees_what_a_cold_start_shows(
    tmp_path: Path, without: tuple[str, ...], python: str
) -> None:
    """Without a locale, Python 3.7+ coerces LC_CTYPE as it starts: the job's environment keeps
    it."""
    start_env = base_env(without)
    job_env = {**start_env, "DISTRUN_JOB_ID": "job-1", "RANK": "0"}
    (cold_code, cold_out), (warm_code, warm_out) = cold_and_waiting(
        DUMP, tmp_path, start_env, job_env, python
    )
    assert (warm_code, cold_code) == (0, 0), warm_out + cold_out
    cold, warm = json.loads(cold_out), json.loads(warm_out)
    assert warm == cold
    assert MARK not in warm["environ"]
    assert warm["environ"]["RANK"] == "0"
    if without and python == sys.executable:
        assert "LC_CTYPE" in cold["environ"], "Python coerced the C locale as it started"


@linux_only
@pytest.mark.parametrize("python", PYTHONS)
@pytest.mark.parametrize("ending", ENDINGS)
def test_a_program_handed_over_ends_as_a_cold_start_ends(
    tmp_path: Path, ending: str, python: str
) -> None:
    env = base_env()
    cold, warm = cold_and_waiting(ENDINGS[ending], tmp_path, env, env, python)
    assert warm == cold
    if ending == "KeyboardInterrupt" and python == sys.executable:  # before 3.8: exit code 1
        assert warm[0] == -signal.SIGINT
    if ending == "an exception":
        assert warm[1].count("File ") == 2, "only the program's own frames"


@linux_only
def test_an_interpreter_started_ahead_takes_only_what_would_start_the_same(tmp_path: Path) -> None:
    env = base_env()
    interpreters = WaitingInterpreters.start(sys.executable, 1, env, "the-mark")
    python = sys.executable
    try:
        assert interpreters.take([python, "-m", "IPython", "main.ipy"], env) is None
        assert interpreters.take(["/other/python", "main.py"], env) is None
        assert interpreters.take([python, "main.py"], {**env, "PYTHONHASHSEED": "0"}) is None
        assert interpreters.take([python, "main.py"], {**env, "LD_PRELOAD": "x.so"}) is None
        relative = {**env, "PYTHONPATH": "lib"}
        waiting_relative = WaitingInterpreters.start(python, 1, relative, "the-mark")
        try:
            assert waiting_relative.take([python, "main.py"], relative) is None, "a cwd's path"
        finally:
            waiting_relative.close()
        taken = interpreters.take([python, "main.py"], {**env, "RANK": "3", "WORLD_SIZE": "4"})
        assert taken is not None
        assert interpreters.take([python, "main.py"], env) is None, "each is taken once"
        taken.close()
        assert taken.process.poll() is not None
    finally:
        interpreters.close()


# Prints the replica's rank, what it sees as its arguments, and how it started, by its command
# line: "ahead" in an interpreter started ahead, "cold" in one started with the replica.
ARGUMENTS = """
    import os, sys
    print(os.environ["RANK"], sys.orig_argv[1:], sys.argv, flush=True)
    command = open(f"/proc/{os.getpid()}/cmdline", "rb").read().split(b"\\0")[1].decode()
    print("ahead" if command.endswith("waiting_interpreter_main.py") else "cold")
"""


async def run_arguments(engine: LocalEngine, replicas: int) -> dict[str, list[str]]:
    await engine.prepare()
    job = await engine.submit(spec(ARGUMENTS, replicas=replicas), "alice")
    done, lines = await follow_to_end(engine, job)
    assert done.state == JobState.SUCCEEDED
    texts: dict[str, list[str]] = {}
    for line in lines:
        texts.setdefault(line.replica, []).append(line.text)
    return texts


@linux_only
async def test_the_engine_starts_ahead_as_many_interpreters_as_the_last_job_had_replicas(
    make_local_engine: EngineFactory,
) -> None:
    """One before the first job; then as many as the last job had replicas, up to the limit."""
    engine = make_local_engine(waiting_interpreters=2)
    started = lambda rank, how: [f"{rank} ['main.py'] ['main.py']", how]
    first = await run_arguments(engine, 3)
    assert first == {
        "worker-0": started(0, "ahead"),
        "worker-1": started(1, "cold"),
        "worker-2": started(2, "cold"),
    }
    await wait_until(lambda: engine._warm is not None and engine._warm._waiting, "one waits")
    again = await run_arguments(engine, 3)
    assert again == {
        "worker-0": started(0, "ahead"),
        "worker-1": started(1, "ahead"),
        "worker-2": started(2, "cold"),
    }


@linux_only
async def test_a_job_that_would_start_otherwise_starts_cold_and_leaves_no_interpreter(
    local_engine: LocalEngine,
) -> None:
    await local_engine.prepare()
    code = """
        import os, time
        print(os.environ["PYTHONHASHSEED"], open("/proc/self/cmdline", "rb").read().split(b"\\0")[1].decode(), flush=True)
        time.sleep(60)
    """
    job = await local_engine.submit(spec(code, env={"PYTHONHASHSEED": "7"}), "alice")
    [line] = await wait_for_lines(local_engine, job, 1)
    assert line.text == "7 main.py"
    # The supervisor's only child is the replica: the interpreter that waited was ended.
    supervisor = json.loads((local_engine._jobs_dir / job.id / "supervisor.json").read_text())
    pid = supervisor["pid"]
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    assert children == [str(job_status_pid(local_engine, job.id, "worker-0"))]
    await local_engine.cancel(job.id, "alice")


def job_status_pid(engine: LocalEngine, job_id: str, replica: str) -> int:
    status = json.loads((engine._jobs_dir / job_id / "status.json").read_text())
    return int(status["pids"][replica])


# Forks without exec a process that leaves the replica's process group for a session of its own.
# The child says its pid once it has left the group (the parent saying it raced the setsid).
ESCAPING = """
    import os, time
    if os.fork() == 0:
        os.setsid()
        print("escaped", os.getpid(), flush=True)
        time.sleep(120)
        os._exit(0)
    time.sleep(120)
"""


async def escaped_process(engine: LocalEngine) -> tuple[Job, int]:
    """A job running ESCAPING in an interpreter started ahead, and its escaped process, whose
    /proc/PID/environ is the interpreter's start-up one: the mark, not the job's id."""
    await engine.prepare()
    job = await engine.submit(spec(ESCAPING), "alice")
    [line] = await wait_for_lines(engine, job, 1)
    escaped = int(line.text.split()[1])
    assert os.getsid(escaped) == escaped
    environ = Path(f"/proc/{escaped}/environ").read_bytes().split(b"\0")
    assert not any(entry.startswith(b"DISTRUN_JOB_ID=") for entry in environ)
    assert any(entry.startswith(MARK.encode() + b"=") for entry in environ)
    return job, escaped


@linux_only
async def test_a_process_forked_without_exec_that_left_its_group_ends_with_the_job(
    local_engine: LocalEngine,
) -> None:
    job, escaped = await escaped_process(local_engine)
    await local_engine.cancel(job.id, "alice")
    await wait_until(lambda: gone(escaped), "the escaped process ends")


@linux_only
async def test_a_job_whose_supervisor_died_loses_what_its_waiting_interpreter_forked(
    local_engine: LocalEngine,
) -> None:
    """The engine settles the lost job by the mark recorded in supervisor.json."""
    job, escaped = await escaped_process(local_engine)
    supervisor = json.loads((local_engine._jobs_dir / job.id / "supervisor.json").read_text())
    assert isinstance(supervisor["mark"], str)
    os.kill(supervisor["pid"], signal.SIGKILL)
    await wait_until(lambda: gone(supervisor["pid"]), "the supervisor is gone")
    assert not gone(escaped), "setsid and no exec: neither the group nor the death signal ends it"
    lost = await local_engine.get_job(job.id, "alice")
    assert lost.state == JobState.FAILED
    await wait_until(lambda: gone(escaped), "the escaped process ends")


async def test_the_engine_says_how_many_interpreters_may_wait(
    make_local_engine: EngineFactory,
) -> None:
    expected = 3 if waiting_interpreters.supported() else 0
    assert (await make_local_engine(waiting_interpreters=3).info()).options[
        "waiting_interpreters"
    ] == expected
    assert (await make_local_engine(warm_supervisor=False).info()).options[
        "waiting_interpreters"
    ] == 0


@pytest.mark.skipif(waiting_interpreters.supported(), reason="replicas start ahead here")
async def test_where_none_can_wait_every_replica_starts_cold(local_engine: LocalEngine) -> None:
    assert (
        WaitingInterpreters.start(sys.executable, 2, base_env(), "the-mark").take(
            [sys.executable, "main.py"], base_env()
        )
        is None
    )
    await local_engine.prepare()
    job = await local_engine.submit(spec("print('cold', flush=True)", replicas=2), "alice")
    done, lines = await follow_to_end(local_engine, job)
    assert (done.state, [line.text for line in lines]) == (JobState.SUCCEEDED, ["cold", "cold"])
