"""The followers of a job's logs: each reads at its own pace, sharing the batch its job's
watcher (job_watcher.py) reads once for every follower at the head."""

import asyncio
import time
from typing import TYPE_CHECKING, Any

from distrun.core.logs import LineRun, LogBatch, LogLine, PartialUpdate
from distrun.engines.local.logstore import DEFAULT_MAX_READ_BYTES, LogReader, LogTail

if TYPE_CHECKING:
    from distrun.engines.local.job_watcher import JobWatcher

# A follower that read at most this many lines waits for the next wake before it reads again
# (more coming at once are a backlog: it reads on at once).
LIVE_EDGE_LINES = 1024


class Follower:
    """One reader of a job's logs. At the watcher's head it takes the batch the watcher reads
    once for all followers there (so they share reading, parsing and, in the websocket, the
    encoding of the very same batch object); behind the head it catches up with reads of its
    own that stop at the head; anywhere else (a subset of replicas, a cursor ahead of the
    head) it reads on its own."""

    def __init__(
        self,
        watcher: "JobWatcher",
        readers: list[LogReader],
        starts: dict[str, int],
        max_batch: int,
    ) -> None:
        self.watcher = watcher
        self.readers = readers
        self.positions = tuple(reader.tail(starts[reader.replica]).position for reader in readers)
        self.cursor = tuple(position.next_seq for position in self.positions)
        self.max_batch = max_batch
        self.reading: asyncio.Task[list[LineRun]] | None = None
        self._shares = watcher.shares_with([r.replica for r in readers], max_batch)
        # Per reader: its index in the watcher, the watcher's partial version last looked at,
        # and the seq of the unfinished line last sent (-1: none that is still shown).
        self._watch_index = [watcher.names.index(r.replica) for r in readers]
        self._partial_seen = [-1] * len(readers)
        self._partial_sent = [-1] * len(readers)

    def partial_update(self) -> "PartialUpdate | None":
        """The unfinished lines that changed since the last call, for lines this reader has not
        read finished yet; an empty text takes back one it was sent and still shows."""
        changed: list[LogLine] = []
        for k, index in enumerate(self._watch_index):
            version = self.watcher.partial_versions[index]
            if version == self._partial_seen[k]:
                continue
            self._partial_seen[k] = version
            line = self.watcher.partials[index]
            if line is not None and line.seq >= self.cursor[k]:
                changed.append(line)
                self._partial_sent[k] = line.seq
            elif self._partial_sent[k] >= self.cursor[k]:
                replica = self.readers[k].replica
                changed.append(LogLine(replica, self._partial_sent[k], time.time(), ""))
                self._partial_sent[k] = -1
        return PartialUpdate(changed) if changed else None

    async def next_batch(self) -> tuple[LogBatch, bool]:
        """New lines (maybe none), and whether the job was settled before they were read."""
        watcher = self.watcher
        if self._shares and watcher.shares_with(watcher.names, self.max_batch):
            shared = watcher.shared_from(self.cursor)
            if shared is None and watcher.head in (None, self.cursor):
                shared = await watcher.read_shared(self.positions, self.max_batch)
            if shared is not None:
                self.positions, self.cursor = shared.ends, shared.end_seqs
                return shared.batch, shared.settled
            head = watcher.head
            if head is not None and all(map(int.__le__, self.cursor, head)):
                limits = [end - seq for end, seq in zip(head, self.cursor, strict=True)]
                return LogBatch(runs=await self._read_own(limits)), False
        settled = watcher.settled  # read before the logs: then empty means the end
        return LogBatch(runs=await self._read_own(None)), settled

    async def _read_own(self, limits: list[int] | None) -> list[LineRun]:
        tails = [r.tail_at(p) for r, p in zip(self.readers, self.positions, strict=True)]
        self.reading = asyncio.create_task(
            asyncio.to_thread(read_batch, tails, self.max_batch, limits)
        )
        runs = await asyncio.shield(self.reading)  # cancelled here, the read runs on
        self.positions = tuple(tail.position for tail in tails)
        self.cursor = tuple(position.next_seq for position in self.positions)
        return runs


def close_after(read: "asyncio.Task[Any] | None", readers: list[LogReader]) -> None:
    """Closes the readers, but only once a read still running in its thread (its follower was
    cancelled mid-read) is over: closed under it, the read would reopen a log and leak it."""

    def close(_: object = None) -> None:
        if read is not None and not read.cancelled():
            read.exception()  # retrieved: a failed read of an abandoned follower is no news
        for reader in readers:
            reader.close()

    if read is None or read.done():
        close()
    else:
        read.add_done_callback(close)


def read_batch(
    tails: list[LogTail],
    max_batch: int,
    limits: list[int] | None = None,
    max_bytes: int = DEFAULT_MAX_READ_BYTES,
) -> list[LineRun]:
    """Up to about `max_batch` new lines and `max_bytes` bytes, shared fairly among replicas:
    a run per replica that had new lines (at most `limits[i]` from `tails[i]` when given)."""
    quota = max(1, max_batch // len(tails)) if tails else 0
    byte_quota = max(1, max_bytes // len(tails)) if tails else 0
    runs: list[LineRun] = []
    for index, tail in enumerate(tails):
        wanted = quota if limits is None else min(quota, limits[index])
        if wanted > 0 and len(run := tail.read_run(wanted, byte_quota)):
            runs.append(run)
    return runs
