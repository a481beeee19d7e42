"""Replica exits noticed without pidfds (the portable path): on SIGCHLD, and by a poll in case
a signal was coalesced or missed, each watched replica is checked for having exited, without
reaping it, so that its process group can still be signalled safely before it is."""

import asyncio
import signal
from collections.abc import Callable
from typing import Any, Protocol

from distrun.engines.local.portable import exited

POLL_SECONDS = 0.5


class Watched(Protocol):
    process: Any  # subprocess.Popen, or None before it started


class ExitWatcher:
    """Calls `on_exit(replica)` once for each watched replica whose process has exited."""

    def __init__(self, on_exit: Callable[[Any], None]) -> None:
        self._on_exit = on_exit
        self._watched: list[Watched] = []
        self._poll: asyncio.TimerHandle | None = None

    def watch(self, replica: Watched) -> None:
        loop = asyncio.get_running_loop()
        if self._poll is None:
            loop.add_signal_handler(signal.SIGCHLD, self._check)
            self._poll = loop.call_later(POLL_SECONDS, self._tick)
        self._watched.append(replica)
        loop.call_soon(self._check)  # it may have exited already; not before it is attached

    def _tick(self) -> None:
        self._check()
        self._poll = asyncio.get_running_loop().call_later(POLL_SECONDS, self._tick)

    def _check(self) -> None:
        done = [r for r in self._watched if r.process is None or exited(r.process.pid)]
        for replica in done:
            self._watched.remove(replica)
            self._on_exit(replica)
