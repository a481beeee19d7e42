"""The watcher of one followed job: it wakes the job's followers (log_followers.py) on any
change of its directory, through inotify where the engine has it, else by polling, and reads
the batch at the head once for all of them."""

import asyncio
import contextlib
import contextvars
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from distrun.core.errors import EngineError, NotFound
from distrun.core.job import Job
from distrun.core.logs import LogBatch, LogLine
from distrun.engines.local import inotify
from distrun.engines.local.log_followers import close_after, read_batch
from distrun.engines.local.logstore import (
    LogReader,
    LogTail,
    TailPosition,
    log_path,
    partial_path,
    read_partial,
)

if TYPE_CHECKING:
    from distrun.engines.local.engine import LocalEngine

_FAST_POLL = 0.005
_SLOW_POLL = 0.05
_LOST_CHECK_SECONDS = 1.0
# Wakes of followed jobs per second, all jobs together: with many jobs each is woken less often
# and its followers read bigger batches, within the latency bound.
_WAKES_PER_SECOND = 500
_MAX_WAKE_GAP = 0.1
# A shared read whose newest line is at most this old was of lines just written (the page
# cache): the next one is done on the event loop, of at most this many bytes (about 1 ms of
# parsing), cheaper than the hand-off to a thread and back; older lines may be on disk.
_LIVE_EDGE_SECONDS = 1.0
_INLINE_READ_BYTES = 256 * 1024
# Shared batches a job's watcher keeps for followers a little behind the head (bounded memory).
_SHARED_BATCHES = 4


def wake_gap(watched_jobs: int) -> float:
    """The least time between two wakes of one job, with this many jobs followed."""
    return min(_MAX_WAKE_GAP, watched_jobs / _WAKES_PER_SECOND)


class JobWatcher:
    """Watches one followed job for all its followers and wakes them on any change: through
    inotify (a one-shot watch on its log directory, re-armed at each wake, and a watch on its
    directory for status.json) where the engine has it, else by polling the files' sizes. Its
    followers read at their own pace, sharing the reads of those at the head, so a slow one
    holds nothing up. Wakes of one job are at least `LocalEngine._wake_gap()` apart: many
    lines written close together reach followers in one batch."""

    def __init__(self, engine: "LocalEngine", job_id: str, job: Job) -> None:
        self.job = job
        self.settled = False  # finalized: status and logs will not change any more
        self.version = 0
        self.followers = 0
        self.stopped = False  # the engine closed: its followers must not wait any more
        self._engine = engine
        self._job_id = job_id
        self._files = engine._files(job_id)
        # Stat'ed many times a second per followed job: plain strings, no directory listing.
        self._status_path = str(self._files.status)
        self._log_paths = [str(log_path(self._files.logs, r.name)) for r in job.replicas]
        self._partial_paths = [str(partial_path(self._files.logs, r.name)) for r in job.replicas]
        # Each replica's unfinished line, read once per change for all followers.
        self.partials: list[LogLine | None] = [None] * len(job.replicas)
        self.partial_versions = [0] * len(job.replicas)
        self._partial_marks: list[object] = [None] * len(job.replicas)
        self._changed = asyncio.Event()
        # Shared reading: followers of every replica at the same cursor take the same batch.
        self.names = [replica.name for replica in job.replicas]
        self.head: tuple[int, ...] | None = None  # the cursor after the newest shared batch
        self.max_batch = 0
        self.recent: deque[SharedBatch] = deque(maxlen=_SHARED_BATCHES)
        self._readers = [LogReader(self._files.logs, name) for name in self.names]
        self._tails: list[LogTail] = []
        self._reading: asyncio.Task[SharedBatch] | None = None
        self._live = False  # the last lines read were just written: the next read is inline
        # Change notification.
        self._loop = asyncio.get_running_loop()
        self._status_changed = asyncio.Event()
        self._wake_handle: asyncio.TimerHandle | None = None
        self._last_wake = 0.0
        self._dir_wd: int | None = None
        self._logs_wd: int | None = None
        self._inotify = engine._inotify()
        if self._inotify is not None and self._watch_dir():
            self._arm_logs()
            self._task = self._loop.create_task(self._watch_status())
        else:
            self._task = self._loop.create_task(self._poll())

    async def wait_for_change(self, version: int) -> None:
        while self.version == version and not self.settled:
            if self.stopped:
                # Ending quietly would tell the reader it has every line; it has not.
                raise EngineError(
                    f"the server stopped following job {self._job_id}; reconnect to resume"
                )
            await self._changed.wait()

    def stop(self) -> None:
        self.stopped = True
        self._task.cancel()
        if self._wake_handle is not None:
            self._wake_handle.cancel()
        for wd in (self._dir_wd, self._logs_wd):
            if wd is not None:
                self._engine._unwatch_inotify(wd)
        self._dir_wd = self._logs_wd = None
        self._notify()  # wake the followers: nothing will wake them any more
        close_after(self._reading, self._readers)

    # --- inotify ---

    def _watch_dir(self) -> bool:
        """Watches the job directory (status.json replaced, logs/ created, the job deleted)."""
        mask = inotify.IN_MOVED_TO | inotify.IN_CREATE | inotify.IN_DELETE_SELF
        self._dir_wd = self._engine._watch_inotify(str(self._files.dir), mask, self._on_dir_event)
        return self._dir_wd is not None

    def _arm_logs(self) -> None:
        """(Re-)arms the one-shot watch on logs/; a missing logs/ is watched once it appears."""
        if self.stopped:
            return
        # MOVED_TO and DELETE: an unfinished line replaced or gone.
        mask = (
            inotify.IN_MODIFY
            | inotify.IN_CREATE
            | inotify.IN_MOVED_TO
            | inotify.IN_DELETE
            | inotify.IN_ONESHOT
        )
        self._logs_wd = self._engine._watch_inotify(
            str(self._files.logs), mask, self._on_logs_event
        )

    def _on_logs_event(self, wd: int, mask: int) -> None:
        if wd == self._logs_wd:
            self._logs_wd = None  # the one-shot fired: re-armed at the wake
        if mask & ~inotify.IN_IGNORED:
            self._schedule_wake()

    def _on_dir_event(self, wd: int, mask: int) -> None:
        if self._logs_wd is None and self._wake_handle is None:
            self._schedule_wake()  # logs/ may have just appeared
        self._status_changed.set()

    def _schedule_wake(self) -> None:
        if self._wake_handle is not None or self.stopped:
            return
        delay = self._last_wake + self._engine._wake_gap() - self._loop.time()
        self._wake_handle = self._loop.call_at(self._loop.time() + max(0.0, delay), self._wake)

    def _wake(self) -> None:
        self._wake_handle = None
        self._last_wake = self._loop.time()
        self._arm_logs()  # before the followers read: a later write fires it again
        self._refresh_partials()
        self._notify()

    def _refresh_partials(self) -> None:
        """Rereads the unfinished lines whose file changed (a few small reads of the page
        cache); none once the job is settled."""
        for index, path in enumerate(self._partial_paths):
            mark = None if self.settled else _fingerprint(path)
            if mark == self._partial_marks[index]:
                continue
            self._partial_marks[index] = mark
            line = None if mark is None else read_partial(path, self.names[index])
            if line != self.partials[index]:
                self.partials[index] = line
                self.partial_versions[index] += 1

    async def _watch_status(self) -> None:
        """Refreshes the status on each change of the job directory, and every
        `_LOST_CHECK_SECONDS` anyway, to notice a supervisor that died."""
        try:
            while not self.settled:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._status_changed.wait(), _LOST_CHECK_SECONDS)
                self._status_changed.clear()
                await self._refresh_status()
        except NotFound:  # deleted while followed: nothing more will come
            self.settled = True
        self._notify()

    def shares_with(self, names: list[str], max_batch: int) -> bool:
        return not self.stopped and names == self.names and self.max_batch in (0, max_batch)

    def shared_from(self, cursor: tuple[int, ...]) -> "SharedBatch | None":
        for shared in reversed(self.recent):
            if shared.starts == cursor:
                return shared
        return None

    async def read_shared(
        self, positions: tuple[TailPosition, ...], max_batch: int
    ) -> "SharedBatch":
        """The batch after the head, read once for every follower there. The first follower
        sets the head where it stands; callers must be at the head."""
        if self.head is None:
            self._tails = [r.tail_at(p) for r, p in zip(self._readers, positions, strict=True)]
            self.head = tuple(position.next_seq for position in positions)
            self.max_batch = max_batch
        if self._reading is None:
            # Shared by all the followers at the head: none's context (see LocalEngine._watch).
            self._reading = asyncio.get_running_loop().create_task(
                self._read_shared(), context=contextvars.Context()
            )
        return await asyncio.shield(self._reading)  # cancelled here, the read runs on

    async def _read_shared(self) -> "SharedBatch":
        assert self.head is not None
        try:
            settled = self.settled  # read before the logs: then empty means the end
            if self._live:
                runs = read_batch(self._tails, self.max_batch, max_bytes=_INLINE_READ_BYTES)
            else:
                runs = await asyncio.to_thread(read_batch, self._tails, self.max_batch)
            batch = LogBatch(runs=runs)
            if runs:
                newest = max(run.times_ms[-1] for run in runs) / 1000
                self._live = time.time() - newest <= _LIVE_EDGE_SECONDS
            ends = tuple(tail.position for tail in self._tails)
            shared = SharedBatch(self.head, batch, ends, settled)
            self.head = shared.end_seqs
            if len(batch):
                self.recent.append(shared)
            return shared
        finally:
            self._reading = None

    # --- polling, where inotify is not available ---

    async def _poll(self) -> None:
        interval = _FAST_POLL
        last_logs: tuple[object, ...] = ()
        last_status: object = None
        last_status_check = time.monotonic()
        try:
            while not self.settled:
                status, logs = self._stat()
                now = time.monotonic()
                if status != last_status or now - last_status_check > _LOST_CHECK_SECONDS:
                    last_status, last_status_check = status, now
                    await self._refresh_status()
                if logs != last_logs:
                    last_logs = logs
                    self._refresh_partials()
                    self._notify()
                    interval = _FAST_POLL
                else:
                    interval = min(interval * 2, _SLOW_POLL)
                await asyncio.sleep(interval)
        except NotFound:  # deleted while followed: nothing more will come
            self.settled = True
        self._notify()

    async def _refresh_status(self) -> None:
        job, status = await asyncio.to_thread(self._engine._snapshot, self._job_id, self.job.owner)
        if job != self.job or status.finalized:
            self.job = job
            self.settled = status.finalized
            if self.settled:
                self._refresh_partials()
            self._notify()

    def _stat(self) -> tuple[object, tuple[object, ...]]:
        """Cheap fingerprints of status.json, of every log and of every unfinished line; `stat`
        does not block for long."""
        logs = (*self._log_paths, *self._partial_paths)
        return _fingerprint(self._status_path), tuple(map(_fingerprint, logs))

    def _notify(self) -> None:
        self.version += 1
        self._changed.set()
        self._changed = asyncio.Event()


def _fingerprint(path: str) -> object:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True)
class SharedBatch:
    starts: tuple[int, ...]  # each replica's next seq before the batch (the watcher's order)
    batch: LogBatch
    ends: tuple[TailPosition, ...]  # each replica's position after it
    settled: bool  # the job was settled before the read: an empty batch means the end

    @property
    def end_seqs(self) -> tuple[int, ...]:
        return tuple(position.next_seq for position in self.ends)
