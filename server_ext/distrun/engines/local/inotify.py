"""Linux inotify through ctypes, read on the asyncio event loop: file changes without polling.

`Inotify.create()` returns None where inotify is not available (not Linux, no libc symbol, the
per-user instance limit reached); callers then poll. Once `listen(on_events)` has put its
descriptor on the running event loop, each readable burst becomes one `on_events({wd: mask})`
call, every watch's event bits OR'ed together, so a burst of writes to one directory costs one
callback.
"""

import asyncio
import ctypes
import os
import struct
import sys
from collections.abc import Callable

IN_MODIFY = 0x00000002
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000  # the watch is gone (removed, one-shot fired, or its file deleted)
IN_ONESHOT = 0x80000000
_IN_CLOEXEC = os.O_CLOEXEC
_IN_NONBLOCK = os.O_NONBLOCK
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, length of the name that follows
_READ_SIZE = 64 * 1024
# The wd an event of the whole instance (a queue overflow) carries.
OVERFLOW_WD = -1

Events = dict[int, int]  # wd -> event bits


class Inotify:
    """One inotify instance whose descriptor the running event loop reads."""

    def __init__(self, libc: ctypes.CDLL, fd: int) -> None:
        self._libc = libc
        self._fd = fd
        self._on_events: Callable[[Events], None] = lambda events: None
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def create(cls) -> "Inotify | None":
        if not sys.platform.startswith("linux"):
            return None
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            init = libc.inotify_init1
        except (OSError, AttributeError):
            return None
        libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = init(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return None
        return cls(libc, fd)

    def listen(self, on_events: Callable[[Events], None]) -> None:
        """Reads events on the running loop from now on (again: replaces the callback)."""
        self._on_events = on_events
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._loop.add_reader(self._fd, self._read)

    def add_watch(self, path: str, mask: int) -> int:
        """The watch descriptor; the same one again for a path already watched (its mask is
        then replaced). Raises OSError (FileNotFoundError for a missing path)."""
        wd: int = self._libc.inotify_add_watch(self._fd, os.fsencode(path), mask)
        if wd < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno), path)
        return wd

    def remove_watch(self, wd: int) -> None:
        """Removes a watch; one already gone (a fired one-shot, a deleted file) is no error."""
        self._libc.inotify_rm_watch(self._fd, wd)

    def close(self) -> None:
        if self._fd < 0:
            return
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(self._fd)
        os.close(self._fd)
        self._fd = -1

    def _read(self) -> None:
        try:
            data = os.read(self._fd, _READ_SIZE)  # whatever is left stays readable
        except BlockingIOError:
            return
        events: Events = {}
        parse_events(data, events)
        if events:
            self._on_events(events)


def parse_events(data: bytes, into: Events) -> None:
    """Adds each `struct inotify_event` in `data` to `into` (wd -> OR of its bits)."""
    offset = 0
    while offset + _EVENT.size <= len(data):
        wd, mask, _, name_length = _EVENT.unpack_from(data, offset)
        into[wd] = into.get(wd, 0) | mask
        offset += _EVENT.size + name_length
