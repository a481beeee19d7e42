"""The local engine: every replica a process on this machine, under a per-job supervisor.

`distrun.engines.local.LocalEngine` is the class path configuration names. It is looked up on
use: the supervisor process imports this package and must start fast.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name != "LocalEngine":
        raise AttributeError(f"module 'distrun.engines.local' has no attribute {name!r}")
    from distrun.engines.local.engine import LocalEngine

    return LocalEngine
