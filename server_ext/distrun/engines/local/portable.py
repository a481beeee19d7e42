"""The local engine's portable path (POSIX and psutil; see capabilities.py for when each part
is used): start times, exits noticed without reaping, the processes a job left behind, and the
guard that stands in for PR_SET_PDEATHSIG.

What it cannot promise as the Linux path does: a pid is checked against its start time before
it is signalled, but not pinned while the signal goes (a pid reused in between, within
microseconds, would get it); without /proc on Linux psutil reads nothing, so processes that
left their replica's process group (setsid) are not found there; on macOS a process whose
environment another user owns cannot be read, and so is not found either.
"""

import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

try:
    import psutil
except ImportError:  # in a supervisor, which starts with -S (no site-packages) to start fast
    import site

    site.main()
    import psutil

GUARD_POLL_SECONDS = 0.2
_MARKER = "DISTRUN_JOB_ID"


def start_time(pid: int) -> int | None:
    """The process's start time (milliseconds since the epoch) while it lives and is no
    zombie; None otherwise. With the pid, it names one process."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return None
        return int(process.create_time() * 1000)
    except (psutil.Error, OSError):
        return None


def exited(pid: int) -> bool:
    """Whether our child `pid` has exited, without reaping it (its pid stays reserved, so its
    process group can still be signalled safely)."""
    waitid = getattr(os, "waitid", None)
    if waitid is not None:  # Linux without pidfds; not on macOS
        try:
            return waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def kill_marked(job_id: str) -> int:
    """SIGKILLs every other process whose environment says DISTRUN_JOB_ID=job_id (as
    processes.kill_job_processes, through psutil); scans again until none is left."""
    killed = 0
    for _ in range(10):
        found = [p for p in psutil.process_iter() if p.pid != os.getpid() and _marked(p, job_id)]
        for process in found:
            with contextlib.suppress(psutil.Error):
                process.kill()  # psutil checks the pid still names the process it found
        killed += len(found)
        if not found:
            break
    return killed


def _marked(process: psutil.Process, job_id: str) -> bool:
    try:
        return bool(process.environ().get(_MARKER) == job_id)
    except (psutil.Error, OSError):  # gone, a zombie, or not ours to read
        return False


def guard(supervisor: int, job_id: str, status_file: Path) -> None:
    """Waits for the supervisor (its parent) to go, then kills what the job left: the
    replicas' process groups (their leaders' pids in the job's status.json) and every process
    marked with the job, as the kernel's PR_SET_PDEATHSIG and a scan would on Linux."""
    while os.getppid() == supervisor:
        time.sleep(GUARD_POLL_SECONDS)
    for pid in _replica_pids(status_file):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    kill_marked(job_id)


def _replica_pids(status_file: Path) -> list[int]:
    try:
        pids = json.loads(status_file.read_text()).get("pids") or {}
    except (OSError, ValueError, AttributeError):
        return []
    return [pid for pid in pids.values() if isinstance(pid, int) and pid > 1]


if __name__ == "__main__":  # python -m distrun.engines.local.portable SUPERVISOR JOB STATUS
    guard(int(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
