"""The local engine's process handling: starting a replica in its own process group that dies
with its supervisor, finding every process a job left behind, and describing how a process
ended. The Linux path (/proc, pidfds, PR_SET_PDEATHSIG) where each works, else the portable
one (portable.py, loaded only then); capabilities.py says which."""

import contextlib
import ctypes
import errno
import functools
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distrun.engines.local import capabilities
from distrun.engines.local.waiting_interpreter_main import MARK as WAITING_MARK

_PR_SET_PDEATHSIG = 1


def start_clock() -> str:
    """How this process reads start times: "proc" (clock ticks after boot) or "psutil"
    (milliseconds since the epoch). Recorded beside a start time, so that a reader that reads
    them otherwise (a server restarted with other capabilities) still compares like with like."""
    return "proc" if capabilities.current().proc else "psutil"


def process_start_time(pid: int, clock: str | None = None) -> int | None:
    """The start time of a live, non-zombie `pid` by `clock` (default: `start_clock()`); None
    otherwise. With the pid, it names a process uniquely: a reused pid has another start
    time."""
    if (clock or start_clock()) == "psutil":
        from distrun.engines.local import portable

        return portable.start_time(pid)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def kill_job_processes(
    job_id: str, mark: str | None = None, keep: frozenset[int] = frozenset()
) -> int:
    """SIGKILLs every process of the job that outlived its replica's process group (one
    started with `setsid`, say): every process that carries DISTRUN_JOB_ID=job_id in its
    environment, as a pod's end would stop everything in its container, or, where the job's
    supervisor started replica interpreters ahead (waiting_interpreters.py, Linux only), their
    `mark`, but the processes in `keep` (the next attempt's interpreters, which carry the job's
    id). Scans again until none is left, since one may fork meanwhile; returns how many were
    killed."""
    linux = capabilities.current()
    if not (linux.proc and linux.pidfd):
        from distrun.engines.local import portable

        return portable.kill_marked(job_id)
    markers = {f"DISTRUN_JOB_ID={job_id}".encode()}
    if mark is not None:
        markers.add(f"{WAITING_MARK}={mark}".encode())
    killed = 0
    for _ in range(10):
        found = 0
        for pid in _pids():
            found += pid not in keep and _kill_if_marked(pid, markers)
        killed += found
        if not found:
            break
    return killed


def _pids() -> list[int]:
    me = os.getpid()
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != me]


def _kill_if_marked(pid: int, markers: set[bytes]) -> bool:
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # gone
        return False
    try:
        # Read after the pidfd pins the process: a reused pid cannot be killed by mistake.
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        if markers.isdisjoint(environ.split(b"\0")):
            return False
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        return True
    except OSError:  # gone meanwhile, a zombie, or not ours to read
        return False
    finally:
        os.close(pidfd)


def start_guard(job_id: str, status_file: Path) -> "subprocess.Popen[bytes] | None":
    """Where replicas cannot get PR_SET_PDEATHSIG, a guard process that kills what the job left
    once this supervisor is gone (portable.guard); None where the kernel does it."""
    if capabilities.current().pdeathsig:
        return None
    argv = [sys.executable, "-m", "distrun.engines.local.portable"]
    package_parent = str(Path(__file__).resolve().parents[3])  # where `distrun` is
    path = os.pathsep.join(filter(None, [package_parent, os.environ.get("PYTHONPATH")]))
    return subprocess.Popen(
        [*argv, str(os.getpid()), job_id, str(status_file)],
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": path},
        start_new_session=True,  # not in a replica's group, not stopped with one
    )


def describe_exit(code: int) -> str:
    if code >= 0:
        return f"exit code {code}"
    name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
    hint = " (out of memory?)" if -code == signal.SIGKILL else ""
    return f"killed by {name}{hint}"


def is_retryable_exit(code: int) -> bool:
    """The Training Operator's ExitCode policy: 1-127 are permanent, 128-255 (signals) retry."""
    return code < 0 or code >= 128


@dataclass
class Spawned:
    """A replica process just started, its stdout and stderr going into `pipe`."""

    process: "subprocess.Popen[bytes]"
    pipe: int  # the read end, blocking until the event loop takes it over


def spawn_replica(
    argv: list[str], cwd: Path, env: dict[str, str], pass_fds: tuple[int, ...] = ()
) -> Spawned:
    """Starts one replica in its own process group (`pass_fds` open in it besides its stdio);
    raises OSError if it cannot start."""
    read_end, write_end = os.pipe()
    common: dict[str, Any] = {
        "cwd": cwd,
        "env": env,
        "stdin": subprocess.DEVNULL,
        "stdout": write_end,
        "stderr": write_end,
        "pass_fds": pass_fds,
    }
    launcher = death_signal_launcher()
    try:
        if launcher is not None:
            _check_executable(argv[0])  # else setpriv would be what fails, in the replica's log
            process = subprocess.Popen([*launcher, *argv], process_group=0, **common)
        else:
            # The supervisor runs no threads, so a preexec_fn is safe here.
            dying = _own_group_dying_with(os.getpid())
            process = subprocess.Popen(argv, preexec_fn=dying, **common)  # noqa: PLW1509
    except OSError:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return Spawned(process, read_end)


@functools.cache
def death_signal_launcher() -> list[str] | None:
    """util-linux's `setpriv --pdeathsig KILL --`, which sets the replica's parent-death
    signal between the supervisor's vfork and the replica's exec. Without it the supervisor
    forks its own process and runs Python in the child to set it (a preexec_fn): some 2.5 ms a
    replica against 0.3, and the first line waits on it. None where PR_SET_PDEATHSIG does not
    work or setpriv is missing or too old (util-linux before 2.33): the preexec_fn then.
    Unlike the preexec_fn, setpriv does not check that the supervisor is still there once the
    signal is set: a replica started in the microseconds before its supervisor died outlives
    it until the engine finds the supervisor gone and kills the job's processes by their
    DISTRUN_JOB_ID (LocalEngine._settle)."""
    path = shutil.which("setpriv")
    if path is None or not capabilities.current().pdeathsig:
        return None
    try:
        usage = subprocess.run([path, "--help"], capture_output=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [path, "--pdeathsig", "KILL", "--"] if b"--pdeathsig" in usage.stdout else None


def _check_executable(program: str) -> None:
    if os.path.isabs(program) and not os.access(program, os.X_OK):
        error = errno.ENOENT if not os.path.exists(program) else errno.EACCES
        raise OSError(error, os.strerror(error), program)


def _own_group_dying_with(parent: int) -> Callable[[], None]:
    """A preexec_fn: the replica leads its own process group (so a cancel signals all it
    started) in the supervisor's session, and gets SIGKILL when the supervisor dies, so none
    outlives it. Not a session of its own: that would be a scheduling group of its own too."""
    libc = ctypes.CDLL(None, use_errno=True)

    death_signal = capabilities.current().pdeathsig  # else the supervisor's guard does it

    def set_group_and_parent_death_signal() -> None:
        os.setpgid(0, 0)
        if death_signal:
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return set_group_and_parent_death_signal


def lower_priority(nice: int) -> None:
    """Runs this process, and the replicas it starts, at niceness `nice` or more, so jobs on
    the server's own machine never starve the server of CPU. The supervisor leads a session,
    which Linux's autogroup scheduler weighs as a group against every other session, the
    server's included: a process's niceness alone only counts inside its group, so the
    group's niceness is set too."""
    if nice <= 0:
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, max(nice, os.getpriority(os.PRIO_PROCESS, 0)))
    with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as autogroup:
        autogroup.write(str(nice))  # absent without autogroup (or outside Linux): nothing to do


def oom_kills() -> int | None:
    """How many processes of this process's cgroup (v2) the kernel's OOM killer has ended so far,
    or None where that is not known (cgroup v1, no cgroup file system, another OS)."""
    try:
        with open("/proc/self/cgroup") as file:
            entries = [line.rstrip("\n").split(":", 2) for line in file]
        path = next(entry[2] for entry in entries if entry[0] == "0")
        with open(f"/sys/fs/cgroup{path}/memory.events") as file:
            for line in file:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except (OSError, ValueError, StopIteration):
        return None
    return None
