"""A supervisor started ahead of its job: the interpreter up and the launch modules imported,
waiting on a pipe for the job directory it will supervise. Handing it a job skips the start-up
that otherwise comes first on every submission (issue 15: most of the local engine's time to
the first line).

It is an ordinary supervisor once it has its job: its own detached session (started with
`start_new_session`), so the job still outlives the server. Only the waiting is tied to the
engine: when the engine closes, or its process dies, the pipe reaches end-of-file and the
waiting supervisor exits without doing anything.
"""

import contextlib
import os
import secrets
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

WAIT_FLAG = "--wait"
# What follows the flag: the replicas' niceness, their Python, how many of their interpreters to
# start ahead (waiting_interpreters.py) and the mark those carry.
WAIT_ARGS = ("NICE", "PYTHON", "INTERPRETERS", "MARK")


# The next supervisor starts this long after a job was handed over, so that its start-up does
# not compete for the CPU with that job's replicas starting.
REARM_DELAY_SECONDS = 0.25


@dataclass
class Waiting:
    process: "subprocess.Popen[bytes]"
    mark: str  # what the replica interpreters it starts ahead carry (waiting_interpreters.py)


class WarmSupervisor:
    """At most one supervisor waiting for a job; `take` hands it one, and the next one starts
    shortly after. `start` starts one with the mark given."""

    def __init__(self, start: Callable[[str], "subprocess.Popen[bytes]"]) -> None:
        self._start = start
        self._waiting: Waiting | None = None
        self._lock = threading.Lock()
        self._closed = False

    def prepare(self) -> None:
        """Starts a waiting supervisor unless one is waiting already (blocks while it starts
        the process, not while it imports); one that cannot start is not an error: jobs then
        start their supervisor the usual way."""
        with self._lock:
            if self._waiting is None and not self._closed:
                mark = secrets.token_hex(8)
                with contextlib.suppress(OSError):
                    self._waiting = Waiting(self._start(mark), mark)

    def take(self, job_dir: Path) -> Waiting | None:
        """The waiting supervisor, now running `job_dir`'s job; None when none was waiting or
        it had died (start one the usual way then)."""
        with self._lock:
            waiting, self._waiting = self._waiting, None
        handed = waiting is not None and _hand_over(waiting.process, job_dir)
        rearm = threading.Timer(REARM_DELAY_SECONDS, self.prepare)
        rearm.daemon = True
        rearm.start()
        return waiting if handed else None

    def close(self) -> None:
        """Ends the waiting supervisor (it exits at end-of-file) and starts no more."""
        with self._lock:
            self._closed = True
            waiting, self._waiting = self._waiting, None
        process = waiting.process if waiting is not None else None
        if process is not None and process.stdin is not None:
            process.stdin.close()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:  # still starting, on a busy machine
                process.kill()
                process.wait()


def _hand_over(process: "subprocess.Popen[bytes]", job_dir: Path) -> bool:
    if process.poll() is not None or process.stdin is None:
        return False
    try:
        process.stdin.write(os.fsencode(job_dir) + b"\n")
        process.stdin.close()
    except OSError:  # it died since: the pipe is broken
        return False
    return True


def wait_for_job(log_name: str) -> str | None:
    """In the waiting supervisor: the job directory once the engine sends it, with the process
    moved into it (its working directory, its `log_name` file as stdout and stderr, stdin
    closed); None at end-of-file (the engine closed or died)."""
    data = b""
    while chunk := os.read(0, 4096):  # the engine writes the line, then closes the pipe
        data += chunk
    if not data.endswith(b"\n"):
        return None  # closed without a job
    job_dir = os.fsdecode(data[:-1])
    os.chdir(job_dir)
    log = os.open(log_name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    return job_dir
