"""Replica interpreters started ahead of their job by the waiting supervisor
(warm_supervisor.py): the replica's Python is up, its site-packages found, before the job is
submitted; handed a replica, one runs the job's file as `python main.py` would
(waiting_interpreter_main.py). On a busy two-core machine an interpreter takes 10 ms to start
alone and 35 ms beside its siblings and a browser; one that waits prints its first line some
2 ms after it is handed the job (issue 15, docs/performance.md).

Handed only a replica that a cold start would start the same way: the same Python, running a
`.py` file (IPython's files start cold), the same value of every variable an interpreter or
the C library reads as it starts (START_UP), and every file and directory its start read or
looked for (the interpreter's report, waiting_interpreter_main.start_up_inputs) unchanged since
just before it started (`StartUpReport.changed`). Every other variable is set in the
interpreter's `os.environ` before the program runs. One that would start otherwise is ended;
the next waiting supervisor starts new ones. What still tells it apart from a cold start is in
docs/architecture.md ("A replica started ahead").

Each interpreter starts with MARK=<the supervisor's mark> in its environment, which the
engine records with the job (supervisor.json), so that a process forked from it without exec,
whose /proc/PID/environ is that start-up environment, is still found as the job's.
"""

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from distrun.engines.local import capabilities
from distrun.engines.local.processes import Spawned, death_signal_launcher, spawn_replica
from distrun.engines.local.waiting_interpreter_main import MARK, stat_key

# Run as a script, in the replica's Python: the interpreter starts as for the job's script.
_PROGRAM = Path(__file__).with_name("waiting_interpreter_main.py")
# Read as an interpreter starts (Python's own, the locale, the dynamic loader and allocator,
# the user site's HOME, the PATH it finds itself by): a job that sets any of them otherwise
# starts cold.
START_UP = re.compile(
    r"\A(?:PYTHON.* | LC_.* | LANG | LANGUAGE | LD_.* | MALLOC_.* | GLIBC_TUNABLES | TZ | HOME"
    r" | PATH | GCONV_PATH | LOCPATH)\Z",
    re.VERBOSE,
)


# Paths an interpreter resolves against the directory it starts in, which is the job's for a
# cold start: a job where one is relative starts cold.
_PATHS = ("PYTHONPATH", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX")


def start_up_values(env: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if START_UP.match(name)}


def _absolute_paths(env: Mapping[str, str]) -> bool:
    return all(
        os.path.isabs(path)
        for name in _PATHS
        if env.get(name)
        for path in env[name].split(os.pathsep)
    )


# A file's times come from the kernel's coarse clock (up to a tick, 1-10 ms, behind time.time):
# anything whose mtime or ctime is this close to an interpreter's start may have changed after
# the start read it. Generous, so that a clock stepped back by a little still counts.
RACY_NS = 100_000_000
# How long a hand-over waits for an interpreter still starting to report; past it, cold.
REPORT_WAIT_SECONDS = 5.0


@dataclass(frozen=True)
class StartUpReport:
    """What a waiting interpreter's start read or looked for, as it stood once it was up
    (path -> waiting_interpreter_main.stat_key)."""

    inputs: dict[str, str]

    @classmethod
    def parse(cls, data: bytes) -> "StartUpReport":
        fields = [os.fsdecode(field) for field in data.split(b"\0")[:-1]]
        return cls(dict(zip(fields[::2], fields[1::2], strict=True)))

    def changed(self, started_ns: int) -> str | None:
        """The first input that is not as it was when the interpreter started at `started_ns`
        (it differs from the report, or changed too near the start to tell); None if none."""
        for path, reported in self.inputs.items():
            now = stat_key(path)
            if now != reported or (now != "-" and _changed_after(now, started_ns)):
                return path
        return None


def _changed_after(key: str, started_ns: int) -> bool:
    mtime, ctime = (int(field) for field in key.split(":")[3:5])
    return max(mtime, ctime) >= started_ns - RACY_NS


def supported() -> bool:
    """Linux with setpriv: the parent-death signal ends them with their supervisor, and /proc
    finds what they forked (kill_job_processes by the mark)."""
    linux = capabilities.current()
    return death_signal_launcher() is not None and linux.proc and linux.pidfd


@dataclass
class WaitingInterpreter:
    python: str
    start_up: dict[str, str]  # the START_UP variables it started with
    process: "subprocess.Popen[bytes]"
    pipe: int  # the read end of its stdout and stderr
    control: int  # where its job goes
    report_pipe: int  # where its StartUpReport comes from
    started_ns: int  # time.time_ns() just before it started
    report: StartUpReport | None = None  # once read
    _partial_report: bytes = b""  # what `reported` has read of it so far

    @classmethod
    def start(
        cls, python: str, env: Mapping[str, str], mark: str | None, preload: bytes | None = None
    ) -> "WaitingInterpreter":
        """Starts one as a replica starts (spawn_replica: its own process group, dying with
        this process), with `mark` in its environment, and given `preload` (the job's place and
        the modules to import first: waiting_interpreter_main's third fd) where there is one;
        raises OSError where it cannot."""
        if not supported():
            raise OSError(
                "no interpreter is started ahead here: see waiting_interpreters.supported"
            )
        job_end, control = os.pipe()
        report_pipe, report_end = os.pipe()
        fds = [job_end, report_end]
        if preload is not None:
            fds.append(_file_holding(preload))
        started_ns = time.time_ns()
        try:
            spawned = spawn_replica(
                [python, str(_PROGRAM), *(str(fd) for fd in fds)],
                Path.cwd(),  # it moves to the job's directory when it gets the job
                {**env, MARK: mark} if mark is not None else dict(env),
                pass_fds=tuple(fds),
            )
        except OSError:
            os.close(control)
            os.close(report_pipe)
            raise
        finally:
            for fd in fds:
                os.close(fd)
        return cls(
            python,
            start_up_values(env),
            spawned.process,
            spawned.pipe,
            control,
            report_pipe,
            started_ns,
        )

    def fits(self, argv: list[str], env: Mapping[str, str]) -> bool:
        """Whether it starts `argv` with `env` as a cold start would (its files aside:
        `changed`)."""
        return (
            len(argv) == 2
            and argv[0] == self.python
            and argv[1].endswith(".py")
            and start_up_values(env) == self.start_up
            and _absolute_paths(env)
        )

    def changed(self) -> str | None:
        """What its start read that a cold start now would find otherwise (waiting for its
        report while it still starts): a path, "its start" when it never reported, "its
        preload: ..." when that failed, or None."""
        if self.report is None:
            data = _read_to_end(self.report_pipe, time.monotonic() + REPORT_WAIT_SECONDS)
            if data is None:
                return "its start"
            self.report = StartUpReport.parse(data)
        failed = self.report.inputs.get("")
        if failed is not None:
            return f"its preload: {failed}"
        return self.report.changed(self.started_ns)

    def reported(self) -> bool:
        """Reads what its report pipe has now, without waiting; whether the report is whole
        (or will never come: `changed` then says so)."""
        if self.report is not None:
            return True
        while True:
            try:
                chunk = os.read(self.report_pipe, 65536)
            except BlockingIOError:
                return False
            except OSError:
                chunk = b""
            if not chunk:
                if not self._partial_report:
                    return True  # none came: `changed` says "its start" at once
                self.report = StartUpReport.parse(self._partial_report)
                return True
            self._partial_report += chunk

    def hand_over(self, argv: list[str], cwd: Path, env: Mapping[str, str]) -> Spawned | None:
        """Gives it the replica to run; None when it had died (start the replica cold)."""
        fields = [str(cwd), str(len(argv)), *argv, *(f"{k}={v}" for k, v in env.items())]
        message = b"".join(os.fsencode(field) + b"\0" for field in fields)
        try:
            if self.process.poll() is not None:
                raise BrokenPipeError
            view = memoryview(message)
            while view:
                view = view[os.write(self.control, view) :]
        except OSError:
            self.close()
            return None
        os.close(self.control)
        with contextlib.suppress(OSError):
            os.close(self.report_pipe)
        return Spawned(self.process, self.pipe)

    def close(self) -> None:
        """Ends one that was not handed a replica."""
        with contextlib.suppress(OSError):
            os.close(self.control)
        with contextlib.suppress(OSError):
            os.close(self.report_pipe)
        with contextlib.suppress(OSError):
            os.close(self.pipe)
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGKILL)
        self.process.wait()


class WaitingInterpreters:
    """The interpreters a waiting supervisor started; `take` gives the first that fits."""

    def __init__(self, waiting: list[WaitingInterpreter]) -> None:
        self._waiting = waiting

    @classmethod
    def start(
        cls, python: str, count: int, env: Mapping[str, str], mark: str
    ) -> "WaitingInterpreters":
        """Up to `count` of them (none where replicas start without setpriv, or Python cannot
        start)."""
        waiting: list[WaitingInterpreter] = []
        if supported():
            with contextlib.suppress(OSError):
                for _ in range(count):
                    waiting.append(WaitingInterpreter.start(python, env, mark))
        return cls(waiting)

    def take(self, argv: list[str], env: Mapping[str, str]) -> WaitingInterpreter | None:
        """The first that fits and whose start-up is still what a cold start would read; those
        whose start-up changed are ended (said on stderr: the supervisor's log)."""
        for interpreter in list(self._waiting):
            if not interpreter.fits(argv, env):
                continue
            self._waiting.remove(interpreter)
            changed = interpreter.changed()
            if changed is None:
                return interpreter
            print(
                f"distrun: a replica starts cold: {changed} changed since an interpreter "
                "started ahead of it",
                file=sys.stderr,
            )
            interpreter.close()
        return None

    def close(self) -> None:
        """Ends those not taken."""
        for interpreter in self._waiting:
            interpreter.close()
        self._waiting.clear()


def _file_holding(data: bytes) -> int:
    """A descriptor of an anonymous file that holds `data`, read from its start (a preload is
    a few hundred KiB: more than a pipe's buffer)."""
    fd = os.memfd_create("distrun-preload")
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _read_to_end(fd: int, deadline: float) -> bytes | None:
    """What `fd` gives until its end; None when it gives nothing, fails, or the deadline passes
    first."""
    poll = select.poll()
    poll.register(fd, select.POLLIN)
    data = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not poll.poll(remaining * 1000):
            return None
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            return None
        if not chunk:
            return data or None
        data += chunk
