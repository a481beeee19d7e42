"""The ctypes inotify wrapper, against the real kernel."""

import asyncio
import struct
import sys
from pathlib import Path

import pytest

from distrun.engines.local import inotify
from distrun.engines.local.inotify import Inotify, parse_events

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux only")


def event(wd: int, mask: int, name: bytes = b"") -> bytes:
    padded = name + b"\0" * (-len(name) % 16) if name else b""
    return struct.pack("iIII", wd, mask, 0, len(padded)) + padded


def test_parse_events_ors_the_bits_of_each_watch_and_skips_names() -> None:
    data = event(1, inotify.IN_MODIFY, b"worker-0.log") + event(2, inotify.IN_CREATE)
    data += event(1, inotify.IN_IGNORED)
    events: inotify.Events = {}
    parse_events(data, events)
    assert events == {1: inotify.IN_MODIFY | inotify.IN_IGNORED, 2: inotify.IN_CREATE}


async def next_events(received: "asyncio.Queue[inotify.Events]") -> inotify.Events:
    return await asyncio.wait_for(received.get(), 10)


async def test_a_one_shot_watch_reports_one_burst_of_writes_until_it_is_armed_again(
    tmp_path: Path,
) -> None:
    received: asyncio.Queue[inotify.Events] = asyncio.Queue()
    watcher = Inotify.create()
    assert watcher is not None
    watcher.listen(received.put_nowait)
    try:
        mask = inotify.IN_MODIFY | inotify.IN_CREATE | inotify.IN_ONESHOT
        wd = watcher.add_watch(str(tmp_path), mask)
        log = tmp_path / "worker-0.log"
        with log.open("ab", buffering=0) as out:
            for _ in range(100):
                out.write(b"line\n")
        events = await next_events(received)
        while not events.get(wd, 0) & inotify.IN_IGNORED:  # the one-shot fired and is gone
            events = await next_events(received)
        log.write_bytes(b"unseen\n")
        await asyncio.sleep(0.05)
        assert received.empty()
        again = watcher.add_watch(str(tmp_path), mask)
        log.write_bytes(b"seen\n")
        assert (await next_events(received)).get(again, 0) & inotify.IN_MODIFY
    finally:
        watcher.close()


async def test_watching_a_missing_path_raises_file_not_found(tmp_path: Path) -> None:
    watcher = Inotify.create()
    assert watcher is not None
    try:
        with pytest.raises(FileNotFoundError):
            watcher.add_watch(str(tmp_path / "missing"), inotify.IN_MODIFY)
    finally:
        watcher.close()
