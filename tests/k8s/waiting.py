"""Waiting in the Kubernetes tier: for what controllers and the API server do in their time."""

import asyncio
import time
from collections.abc import Callable
from typing import Any

TIMEOUT = 90.0  # seconds: a bound on waiting on a loaded machine, not a measurement


async def eventually(
    read: Callable[[], Any], check: Callable[[Any], bool], what: str, timeout: float = TIMEOUT
) -> Any:
    """What `await read()` gives once `check` holds for it; AssertionError with the last value
    after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = await read()
        if check(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; last value: {value!r}")
        await asyncio.sleep(0.2)
