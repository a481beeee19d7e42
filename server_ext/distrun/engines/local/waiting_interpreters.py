"""Replica interpreters started ahead of their job by the waiting supervisor
(warm_supervisor.py): the replica's Python is up, its site-packages found, before the job is
submitted; handed a replica, one runs the job's file as `python main.py` would
(waiting_interpreter_main.py). On a busy two-core machine an interpreter takes 10 ms to start
alone and 35 ms beside its siblings and a browser; one that waits prints its first line some
2 ms after it is handed the job (issue 15, docs/performance.md).

Handed only a replica that a cold start would start the same way: the same Python, running a
`.py` file (IPython's files start cold), and the same value of every variable an interpreter or
the C library reads as it starts (START_UP). Every other variable is set in the interpreter's
`os.environ` before the program runs. What still tells it apart from a cold start is in
docs/architecture.md ("A replica started ahead").

Each interpreter starts with MARK=<the supervisor's mark> in its environment, which the
engine records with the job (supervisor.json), so that a process forked from it without exec,
whose /proc/PID/environ is that start-up environment, is still found as the job's.
"""

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from distrun.engines.local import capabilities
from distrun.engines.local.processes import Spawned, death_signal_launcher, spawn_replica
from distrun.engines.local.waiting_interpreter_main import MARK

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

    @classmethod
    def start(cls, python: str, env: Mapping[str, str], mark: str) -> "WaitingInterpreter":
        """Starts one as a replica starts (spawn_replica: its own process group, dying with
        this process); raises OSError where it cannot."""
        if not supported():
            raise OSError(
                "no interpreter is started ahead here: see waiting_interpreters.supported"
            )
        job_end, control = os.pipe()
        try:
            spawned = spawn_replica(
                [python, str(_PROGRAM), str(job_end)],
                Path.cwd(),  # it moves to the job's directory when it gets the job
                {**env, MARK: mark},
                pass_fds=(job_end,),
            )
        except OSError:
            os.close(control)
            raise
        finally:
            os.close(job_end)
        return cls(python, start_up_values(env), spawned.process, spawned.pipe, control)

    def fits(self, argv: list[str], env: Mapping[str, str]) -> bool:
        """Whether it starts `argv` with `env` as a cold start would."""
        return (
            len(argv) == 2
            and argv[0] == self.python
            and argv[1].endswith(".py")
            and start_up_values(env) == self.start_up
            and _absolute_paths(env)
        )

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
        return Spawned(self.process, self.pipe)

    def close(self) -> None:
        """Ends one that was not handed a replica."""
        with contextlib.suppress(OSError):
            os.close(self.control)
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
        for interpreter in self._waiting:
            if interpreter.fits(argv, env):
                self._waiting.remove(interpreter)
                return interpreter
        return None

    def close(self) -> None:
        """Ends those not taken."""
        for interpreter in self._waiting:
            interpreter.close()
        self._waiting.clear()
