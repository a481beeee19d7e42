"""Giving the C heap's free pages back to the system while the server runs.

A server following many replicas reads their logs' histories in bursts (1,200 streams catching
up at once): the C allocator's heap grows to hold those reads, and once they are freed most of
it stays resident, in free chunks between the few blocks that live on, which the heap cannot
shrink past. glibc's malloc_trim returns every whole free page inside the heap, not only its
top: after 600 TLS connections each read a 1 MiB history, 0.34 MiB a connection
(docs/performance.md). Nothing else returns them, so the server calls it now and then, on a
worker thread: ctypes lets go of the GIL for the call, so the event loop keeps running (only a
C allocation on the same heap waits for it).
"""

import asyncio
import contextlib
import ctypes
import functools
import logging
import sys
import time
from collections.abc import Callable

log = logging.getLogger(__name__)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where the C library has none (macOS, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    with contextlib.suppress(OSError, AttributeError):
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
        return trim
    return None


def trim_heap() -> bool:
    """Return the heap's free pages to the system; False where it cannot be done here."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


async def trim_heap_every(interval: float) -> None:
    """Trim the heap every `interval` seconds, off the event loop's thread, until cancelled."""
    if _malloc_trim() is None:
        return
    loop = asyncio.get_running_loop()
    while True:
        await asyncio.sleep(interval)
        started = time.perf_counter()
        await loop.run_in_executor(None, trim_heap)
        log.debug("distrun: heap trimmed in %.1f ms", (time.perf_counter() - started) * 1000)
