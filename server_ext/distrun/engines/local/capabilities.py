"""What this machine lets the local engine use, one capability at a time: the Linux path where
the capability works, the portable path (POSIX and psutil) where it does not.

- `pidfd`: a replica's exit noticed through a pidfd, and signals sent through one (no pid can
  be reused under them). Portable: SIGCHLD and a poll, and signals by pid after checking the
  process's start time.
- `pdeathsig`: replicas get SIGKILL from the kernel when their supervisor dies. Portable: a
  guard process polls the supervisor and kills the job's processes when it is gone.
- `proc`: start times and the processes a job left behind, read from /proc. Portable: psutil.
- `inotify`: new log lines noticed at once. Portable: the log files are polled.

`DISTRUN_LOCAL_PORTABLE=1` forces every capability onto its portable path; a comma list
(`proc,inotify`) forces those. Supervisors inherit it, so a job's processes and the server that
follows them agree.
"""

import ctypes
import functools
import os
import sys
from dataclasses import dataclass, fields

from distrun.core.errors import SpecError

FORCE_VARIABLE = "DISTRUN_LOCAL_PORTABLE"
_PR_GET_PDEATHSIG = 2


@dataclass(frozen=True)
class Capabilities:
    pidfd: bool
    pdeathsig: bool
    proc: bool
    inotify: bool

    def paths(self) -> dict[str, str]:
        """Which path each capability takes: "linux" or "portable"."""
        return {f.name: "linux" if getattr(self, f.name) else "portable" for f in fields(self)}


NAMES = tuple(f.name for f in fields(Capabilities))


def forced_portable(value: str | None) -> set[str]:
    """The capabilities `DISTRUN_LOCAL_PORTABLE`'s value forces onto the portable path."""
    if value is None or value.strip() in ("", "0"):
        return set()
    if value.strip() == "1":
        return set(NAMES)
    named = {name.strip() for name in value.split(",") if name.strip()}
    unknown = sorted(named - set(NAMES))
    if unknown:
        raise SpecError(
            f"{FORCE_VARIABLE}={value!r}: unknown capability {', '.join(unknown)}; write 1 "
            f"(every one) or a comma-separated list of {', '.join(NAMES)}"
        )
    return named


@functools.cache
def current() -> Capabilities:
    """This process's capabilities, found once."""
    return detect()


def detect(force: str | None = None) -> Capabilities:
    """The capabilities that work here, less those forced portable (`force`, else the
    environment's DISTRUN_LOCAL_PORTABLE)."""
    forced = forced_portable(os.environ.get(FORCE_VARIABLE) if force is None else force)
    found = {
        "pidfd": _has_pidfd(),
        "pdeathsig": _has_pdeathsig(),
        "proc": _has_proc(),
        "inotify": _has_inotify(),
    }
    return Capabilities(**{name: works and name not in forced for name, works in found.items()})


def _has_pidfd() -> bool:
    if not hasattr(os, "pidfd_open"):
        return False
    try:
        os.close(os.pidfd_open(os.getpid()))
    except OSError:  # ENOSYS, or a seccomp profile that refuses it
        return False
    return True


def _has_pdeathsig() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        result = ctypes.c_int()
        return bool(libc.prctl(_PR_GET_PDEATHSIG, ctypes.byref(result), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def _has_proc() -> bool:
    try:
        with open(f"/proc/{os.getpid()}/stat", "rb") as stat:
            return bool(stat.read(1))
    except OSError:
        return False


def _has_inotify() -> bool:
    """Whether an inotify instance can be made (probed here with ctypes: inotify.py loads
    asyncio, which the supervisor loads only once its replicas started)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        fd = ctypes.CDLL(None, use_errno=True).inotify_init1(os.O_CLOEXEC)
    except (OSError, AttributeError):
        return False
    if fd < 0:
        return False
    os.close(fd)
    return True
