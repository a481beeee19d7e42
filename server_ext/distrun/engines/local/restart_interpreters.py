"""Interpreters for a job's next attempt, started while the current attempt runs, that have
imported what the job imported (issue 32): a restarted PyTorch replica spends some 13 s on
`import torch` and DDP's first `import torch._dynamo` before it trains again, which these
interpreters did ahead.

What they import is what the job's rank 0 had imported when it last saved a checkpoint
(`distrun.checkpoint.save` records it in the checkpoint directory: core/checkpoint_env.py's
IMPORTS_FILE), so only jobs that save checkpoints with the helper get them. They start once the
running attempt has saved its first checkpoint, not while it starts: their imports would slow
its start (a restart's own replicas need every core then). Each is started as
the replica's process for the next attempt would be (its environment but for the replicas'
addresses, the job's working directory, script, `sys.argv` and `sys.path[0]`:
waiting_interpreter_main's preload), imports each module from the same file as the job did,
and is handed the replica at the restart only where a cold start would see the same thing:
the waiting interpreters' rules (waiting_interpreters.py: the same Python, the same start-up
variables, nothing its start or its imports read changed since) and an environment that
differs only in the addresses. What still tells such a replica apart from a cold start is in
docs/fault-tolerance.md ("Restarts in interpreters that imported ahead").
"""

import asyncio
import json
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from distrun.engines.local.waiting_interpreters import WaitingInterpreter, supported

# How long a restart waits for an interpreter still importing: it is ahead of a cold start,
# which would import the same from the beginning, unless it hangs.
READY_WAIT_SECONDS = 120.0
_READY_POLL_SECONDS = 0.02


def recorded_modules(path: Path, since: float = 0.0) -> list[tuple[str, str]] | None:
    """The [name, file] pairs `distrun.checkpoint` recorded at `path` at `since` (a time.time())
    or later; None where there are none (yet) or the file is not such a list."""
    try:
        if path.stat().st_mtime < since:
            return None
        pairs = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if not isinstance(pairs, list) or not pairs:
        return None
    found = []
    for pair in pairs:
        if not (
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)
        ):
            return None
        found.append((pair[0], pair[1]))
    return found


def preload_message(cwd: Path, script: str, modules: list[tuple[str, str]]) -> bytes:
    """What waiting_interpreter_main reads on its preload fd."""
    fields = [str(cwd), script, *(field for pair in modules for field in pair)]
    return b"".join(os.fsencode(field) + b"\0" for field in fields)


@dataclass
class _Waiting:
    interpreter: WaitingInterpreter
    env: dict[str, str]  # what it started with


class RestartInterpreters:
    """One interpreter per replica for the job's restart number `restart`."""

    def __init__(self, restart: int, argv: list[str], waiting: dict[str, _Waiting]) -> None:
        self.restart = restart
        self.argv = argv
        self.modules = 0
        self._waiting = waiting

    @classmethod
    def start(
        cls,
        restart: int,
        argv: list[str],
        cwd: Path,
        envs: Mapping[str, dict[str, str]],
        modules: list[tuple[str, str]],
    ) -> "RestartInterpreters | None":
        """One for each replica in `envs` (its environment for that restart), which imports
        `modules` in `cwd` as `argv` would; None where they cannot be used (not a `.py` file,
        or no interpreter is started ahead here)."""
        if not (len(argv) == 2 and argv[1].endswith(".py") and supported()):
            return None
        message = preload_message(cwd, argv[1], modules)
        waiting: dict[str, _Waiting] = {}
        started = cls(restart, argv, waiting)
        started.modules = len(modules)
        try:
            for name, env in envs.items():
                waiting[name] = _Waiting(WaitingInterpreter.start(argv[0], env, None, message), env)
        except OSError as error:
            print(f"distrun: no interpreters ahead of the restart: {error}", file=sys.stderr)
            started.close()
            return None
        for entry in waiting.values():
            os.set_blocking(entry.interpreter.report_pipe, False)
        return started

    def pids(self) -> frozenset[int]:
        return frozenset(entry.interpreter.process.pid for entry in self._waiting.values())

    async def ready(self, timeout: float = READY_WAIT_SECONDS) -> None:
        """Returns once every one has reported (done importing, or failed), or at `timeout`."""
        deadline = time.monotonic() + timeout
        while not all(entry.interpreter.reported() for entry in self._waiting.values()):
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(_READY_POLL_SECONDS)

    def take(
        self, name: str, argv: list[str], env: Mapping[str, str], addresses: frozenset[str]
    ) -> WaitingInterpreter | None:
        """Replica `name`'s interpreter where a cold start of `argv` with `env` would see the
        same (`addresses`: the variables that may differ, the replicas' addresses); else None,
        the interpreter ended and the reason in the supervisor's log."""
        entry = self._waiting.pop(name, None)
        if entry is None:
            return None
        interpreter = entry.interpreter
        reason = _misfit(self.argv, entry.env, argv, env, addresses)
        if reason is None:
            reason = "it was still importing" if not interpreter.reported() else None
        if reason is None:
            reason = interpreter.changed()
        if reason is None:
            return interpreter
        print(f"distrun: {name} restarts cold: {reason}", file=sys.stderr)
        interpreter.close()
        return None

    def close(self) -> None:
        """Ends those not taken."""
        for entry in self._waiting.values():
            entry.interpreter.close()
        self._waiting.clear()


def _misfit(
    started_argv: list[str],
    started_env: Mapping[str, str],
    argv: list[str],
    env: Mapping[str, str],
    addresses: frozenset[str],
) -> str | None:
    if argv != started_argv:
        return "the command line changed"
    differ = {name for name in {*started_env, *env} if started_env.get(name) != env.get(name)}
    other = sorted(differ - addresses)
    return f"its environment differs in {', '.join(other)}" if other else None
