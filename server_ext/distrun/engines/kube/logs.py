"""Replica logs from Kubernetes: which container instance a replica is running, reading and
following its log, and sequence numbers that survive restarts and server restarts.

Sequence numbers. A replica's log is the concatenation of its container instances' logs: a
pod's container restarts (restartCount) and operators recreate pods (a new uid). Each instance
is named `{pod uid}:{restartCount}`. The first line of an instance has the seq "lines of every
earlier instance". Those counts are kept in the API server, not in this process: when a reader
sees an instance end it counts the instance's whole log and appends `[instance, lines]` to the
replica's list in the job ConfigMap's `distrun.io/log-ledger` annotation (optimistic
concurrency, so concurrent readers agree; a count is a fact about an immutable log, so writers
never disagree). Any server, restarted or not, computes the same seqs from the ledger, so a
client resuming with `since` gets nothing twice. Kubernetes keeps only the current and the
previous instance's log: an instance that ended unobserved while two more started is lost, and
counted as the lines that were seen of it (none if none).
"""

import asyncio
import codecs
import contextlib
import copy
import datetime
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from distrun.core.errors import Conflict, DistrunError, NotFound
from distrun.core.logs import PARTIAL_MAX_CHARS, LogLine
from distrun.core.terminal import last_redraws, visible_line
from distrun.engines.kube.anchors import (
    ANCHORS_ANNOTATION,
    ANCHORS_KEPT,
    Anchor,
    AnchorBook,
    AnchorPlacer,
    AnchorPolicy,
    FileScan,
    LineKey,
    add_to_book,
    newest_index,
    read_book,
    write_book,
)
from distrun.engines.kube.client import CONFIGMAPS, KubeApi, StreamedLines
from distrun.engines.kube.restart_ledger import RESTARTS_ANNOTATION, RestartBook
from distrun.engines.kube.restart_ledger import merge as merge_restarts
from distrun.engines.kube.restart_ledger import read_book as read_restarts
from distrun.engines.kube.restart_ledger import write_book as write_restarts

log = logging.getLogger(__name__)

LEDGER_ANNOTATION = "distrun.io/log-ledger"
Ledger = dict[str, list[list[Any]]]  # replica -> [[instance key, lines], ...] in order
# More lines than any container writes (a line is at least its newline): a seq, a sum of these
# over the entries an annotation (256 KiB) can hold, stays inside JavaScript's exact integers.
MAX_LEDGER_LINES = 2**36
Emit = Callable[[LogLine], Awaitable[None]]
EmitPartial = Callable[[LogLine], None]
# How often at most a replica's unfinished line is passed on (as the local engine records it).
PARTIAL_INTERVAL = 0.25
_LEDGER_RETRIES = 8
RECONNECT_SECONDS = (0.05, 1.0)  # a log stream that ended early: first wait, longest wait
# Bytes before a line's text read with timestamps=True: "2024-01-02T03:04:05.123456789Z ".
TIMESTAMP_ROOM = 64


# --- pure parts ---------------------------------------------------------------------------


CUT_MARK = " [cut by distrun: the line is longer than max_log_line_bytes]"


def parse_line(raw: bytes, max_bytes: int) -> tuple[float, str]:
    """(epoch seconds, text) of a line read with `timestamps=True`: "<RFC 3339> <text>". A text
    over `max_bytes` keeps its first `max_bytes` and says it was cut (the local engine splits
    such a line in several; here a seq must count the same lines on every reader)."""
    stamp, separator, rest = raw.partition(b" ")
    when = parse_time(stamp.decode("ascii", "replace")) if separator else None
    if when is None:
        when, rest = time.time(), raw
    if len(rest) > max_bytes:
        return when, rest[:max_bytes].decode("utf-8", "replace") + CUT_MARK
    return when, rest.decode("utf-8", "replace").removesuffix("\r")


def parse_unfinished(raw: bytes) -> tuple[float, str]:
    """(epoch seconds, text as a terminal shows it) of a line still being written; a character
    cut at its end waits for its other bytes."""
    stamp, separator, rest = raw.partition(b" ")
    if not separator:  # its timestamp is still arriving: nothing of the text yet
        return time.time(), ""
    when = parse_time(stamp.decode("ascii", "replace"))
    if when is None:
        when, rest = time.time(), raw
    text = codecs.getincrementaldecoder("utf-8")("replace").decode(rest)
    return when, visible_line(last_redraws(text, 4 * PARTIAL_MAX_CHARS))[:PARTIAL_MAX_CHARS]


def parse_time(stamp: str) -> float | None:
    """Epoch seconds of an RFC 3339 time with up to nanoseconds, or None."""
    if not stamp.endswith("Z"):
        return None
    whole, _, fraction = stamp[:-1].partition(".")
    seconds = _epoch_seconds(whole)
    if seconds is None:
        return None
    digits = fraction[:6].ljust(6, "0") if fraction.isdigit() else "0"
    return seconds + int(digits) / 1_000_000


@functools.lru_cache(maxsize=256)
def _epoch_seconds(whole: str) -> float | None:
    """Of a time to the second: every followed replica's lines of one second share it (read
    once, not once a line: at 1,200 followed replicas, 6 % of the server's time)."""
    try:
        moment = datetime.datetime.fromisoformat(whole)
    except ValueError:
        return None
    return moment.replace(tzinfo=datetime.timezone.utc).timestamp()


def split_log(data: bytes, *, ended: bool = True) -> list[bytes]:
    """The lines of a container's log. The text after the last newline is a line only once the
    container ended; before, it is the line still being written (`unfinished_line`)."""
    lines = data.split(b"\n")
    if lines and (lines[-1] == b"" or not ended):
        lines.pop()
    return lines


def unfinished_line(data: bytes) -> bytes:
    """The text after the log's last newline: the line a running container is writing."""
    return data[data.rfind(b"\n") + 1 :]


def read_ledger(configmap: dict[str, Any]) -> Ledger:
    """The ledger as recorded, keeping only well-formed entries: the ConfigMap is the user's
    to edit, so anything else in it (not JSON, other shapes, counts that are not whole
    numbers of lines) is left out, and those instances are counted again."""
    annotations = configmap.get("metadata", {}).get("annotations") or {}
    raw = annotations.get(LEDGER_ANNOTATION, "{}") if isinstance(annotations, dict) else "{}"
    try:
        data = json.loads(raw) if isinstance(raw, str) else {}
    except (ValueError, RecursionError):  # also a too long number, too deep a nesting
        return {}
    if not isinstance(data, dict):
        return {}
    ledger: Ledger = {}
    for replica, entries in data.items():
        if isinstance(entries, list):
            ledger[replica] = [list(e) for e in entries if _ledger_entry(e)]
    return ledger


def _ledger_entry(entry: Any) -> bool:
    """[instance key, lines]: a string and a whole number of lines a log can hold."""
    if not (isinstance(entry, list) and len(entry) == 2):
        return False
    key, lines = entry
    return (
        isinstance(key, str)
        and isinstance(lines, int)
        and not isinstance(lines, bool)
        and 0 <= lines <= MAX_LEDGER_LINES
    )


def base_seq(ledger: Ledger, replica: str, key: str) -> int:
    """The seq of the first line of instance `key`: every recorded earlier instance's lines."""
    total = 0
    for entry_key, lines in ledger.get(replica, []):
        if entry_key == key:
            break
        total += lines
    return total


def recorded_lines(ledger: Ledger, replica: str, key: str) -> int | None:
    for entry_key, lines in ledger.get(replica, []):
        if entry_key == key:
            return int(lines)
    return None


@dataclass(frozen=True)
class Instance:
    """One run of a replica's main container."""

    replica: str
    pod: str
    uid: str
    container: str
    restart: int
    started: bool  # its log exists
    ended: bool

    @property
    def key(self) -> str:
        return f"{self.uid}:{self.restart}"

    def previous(self) -> "Instance | None":
        if self.restart == 0:
            return None
        return Instance(
            self.replica, self.pod, self.uid, self.container, self.restart - 1, True, True
        )


def current_instance(replica: str, pod: dict[str, Any], container: str) -> Instance:
    meta, status = pod["metadata"], pod.get("status") or {}
    statuses = status.get("containerStatuses") or []
    own: dict[str, Any] = next((s for s in statuses if s.get("name") == container), {})
    state = own.get("state") or {}
    terminated = "terminated" in state or status.get("phase") in ("Succeeded", "Failed")
    started = "running" in state or "terminated" in state
    return Instance(
        replica=replica,
        pod=meta["name"],
        uid=meta.get("uid", ""),
        container=container,
        restart=int(own.get("restartCount", 0)),
        started=started,
        ended=terminated,
    )


# --- the ledger in the API server ----------------------------------------------------------


FIRST_ANCHOR_FLUSH_SECONDS = 5.0


class LedgerStore:
    """The job ConfigMap's ledger and anchors (anchors.py), read and written with optimistic
    concurrency. Anchors a follower leaves are seen at once in this process and written at
    most every `policy.flush_seconds`, all of a job's replicas in one request."""

    def __init__(
        self, api: KubeApi, namespace: str, name: str, policy: AnchorPolicy | None = None
    ) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.policy = policy or AnchorPolicy()
        self.ledger: Ledger = {}
        self.anchors: AnchorBook = {}
        self.restarts: RestartBook = {}  # restart_ledger.py
        self._unwritten: dict[tuple[str, str], list[Anchor]] = {}
        self._flush: asyncio.Task[None] | None = None
        self._flush_due = 0.0  # loop time
        self._held: dict[str, Any] | None = None  # the ConfigMap as last read or written here
        self._loading: asyncio.Future[None] | None = None  # the read in flight

    async def load(self) -> Ledger:
        """The ledger as the API server has it now. Loads asked for while one is in flight
        share its answer: a job's replicas' followers start together, and each loads."""
        if self._loading is None or self._loading.done():
            self._loading = asyncio.ensure_future(self._read())
        await asyncio.shield(self._loading)
        return self.ledger

    async def _read(self) -> None:
        try:
            configmap = await self.api.get(
                CONFIGMAPS, self.namespace, self.name, "read the log ledger"
            )
        except NotFound:
            configmap = {}
        self._take(configmap)

    def _take(self, configmap: dict[str, Any]) -> None:
        self._held = configmap or None
        self.ledger = read_ledger(configmap)
        annotations = configmap.get("metadata", {}).get("annotations") or {}
        self.anchors = read_book(annotations.get(ANCHORS_ANNOTATION))
        self.restarts = read_restarts(annotations.get(RESTARTS_ANNOTATION))
        for (replica, key), anchors in self._unwritten.items():
            add_to_book(self.anchors, replica, key, anchors)

    def anchors_of(self, replica: str, key: str) -> list[Anchor]:
        return self.anchors.get(replica, {}).get(key, [])

    async def record(self, replica: str, key: str, lines: int) -> None:
        """Append `[key, lines]` for `replica` unless it is there already."""

        def change(annotations: dict[str, str]) -> bool:
            ledger = read_ledger({"metadata": {"annotations": annotations}})
            if recorded_lines(ledger, replica, key) is not None:
                return False
            ledger.setdefault(replica, []).append([key, lines])
            annotations[LEDGER_ANNOTATION] = json.dumps(ledger, separators=(",", ":"))
            return True

        await self._update(change, "record the log ledger")

    async def record_restarts(self, book: RestartBook) -> None:
        """Add `book` to the replicas' restart ledger (restart_ledger.merge: nothing is lost
        of what another server wrote)."""

        def change(annotations: dict[str, str]) -> bool:
            recorded = read_restarts(annotations.get(RESTARTS_ANNOTATION))
            if not merge_restarts(recorded, book):
                return False
            annotations[RESTARTS_ANNOTATION] = write_restarts(recorded)
            return True

        await self._update(change, "record the replicas' restarts")

    def leave_anchor(self, replica: str, key: str, anchor: Anchor) -> None:
        """Keep `anchor` (seen here at once) and write it soon, unless the book has it, or
        would drop it as older than all it keeps (a follower that starts again anchors a
        file's first line again: no write for every follower's start)."""
        known = self.anchors_of(replica, key)
        if anchor in known or _older_than_kept(anchor, known):
            return
        add_to_book(self.anchors, replica, key, [anchor])
        self._unwritten.setdefault((replica, key), []).append(anchor)
        # An instance's first anchor goes out soon: until it is written, a reader elsewhere
        # numbers the instance from 0, which a rotation meanwhile would make wrong. (A job's
        # replicas start together: their first anchors still make one write.)
        flush = self.policy.flush_seconds
        self._flush_within(flush if known else min(FIRST_ANCHOR_FLUSH_SECONDS, flush))

    def _flush_within(self, delay: float) -> None:
        """Write the unwritten anchors in `delay` seconds, or sooner if a write is due sooner."""
        due = asyncio.get_running_loop().time() + delay
        if self._flush is not None:
            if self._flush_due <= due:
                return
            self._flush.cancel()
        self._flush_due = due
        self._flush = asyncio.create_task(self._flush_later(delay))

    async def _flush_later(self, delay: float) -> None:
        await asyncio.sleep(delay)
        self._flush = None
        await self.write_anchors()

    async def write_anchors(self) -> None:
        unwritten, self._unwritten = self._unwritten, {}
        if not unwritten:
            return

        def change(annotations: dict[str, str]) -> bool:
            book = read_book(annotations.get(ANCHORS_ANNOTATION))
            for (replica, key), anchors in unwritten.items():
                add_to_book(book, replica, key, anchors)
            annotations[ANCHORS_ANNOTATION] = write_book(book)
            return True

        with contextlib.suppress(DistrunError):
            await self._update(change, "record log anchors")

    async def claim(self, replica: str, key: str, seen: list[Anchor], claim: Anchor) -> None:
        """Add `claim` to the instance's anchors unless they changed from `seen` (then another
        reader anchored or claimed first: load again and use theirs)."""

        def change(annotations: dict[str, str]) -> bool:
            book = read_book(annotations.get(ANCHORS_ANNOTATION))
            if book.get(replica, {}).get(key, []) != seen:
                return False
            add_to_book(book, replica, key, [claim])
            annotations[ANCHORS_ANNOTATION] = write_book(book)
            return True

        await self._update(change, "claim a rotated log file")

    async def close(self) -> None:
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        await self.write_anchors()

    async def _update(self, change: Callable[[dict[str, str]], bool], what: str) -> None:
        """Apply `change` to the ConfigMap's annotations (False: nothing to write), again on a
        concurrent write; then hold what the API server has. The first try writes over the
        copy held here, read again only when another writer came first (a 409): a job's
        anchors cost one request each time, not a read and a write."""
        held = copy.deepcopy(self._held) if self._held else None
        for _ in range(_LEDGER_RETRIES):
            try:
                configmap = held or await self.api.get(CONFIGMAPS, self.namespace, self.name, what)
            except NotFound:
                return  # the job is being deleted: nobody will ask for seqs any more
            held = None
            annotations = configmap["metadata"].setdefault("annotations", {})
            if change(annotations):
                try:  # carries metadata.resourceVersion: a concurrent writer makes this a 409
                    configmap = await self.api.replace(
                        CONFIGMAPS, self.namespace, self.name, configmap, what
                    )
                except Conflict:
                    continue
                except NotFound:
                    return
            self._take(configmap)
            return


def _older_than_kept(anchor: Anchor, known: list[Anchor]) -> bool:
    """Whether adding `anchor` to an instance's `known` anchors would keep them as they are
    (claims aside: an own anchor can replace a claim with a higher index)."""
    return (
        len(known) >= ANCHORS_KEPT
        and anchor.index < known[0].index
        and not any(a.claimed for a in known)
    )


# --- reading ------------------------------------------------------------------------------


@dataclass
class LogContext:
    api: KubeApi
    namespace: str
    ledger: LedgerStore
    max_line_bytes: int

    @property
    def max_line(self) -> int:
        """Bytes of a line as read (with its timestamp) that are kept."""
        return self.max_line_bytes + TIMESTAMP_ROOM


class Unanchored(Exception):
    """Where the instance's current log file starts in its log is not known (anchors.py)."""

    def __init__(self, first_key: LineKey | None) -> None:
        super().__init__("the log file holds no anchor")
        self.first_key = first_key  # its first line's, None when it has none yet


@dataclass
class _Restart(Exception):
    start: int  # read again from the start: the file's first line has this index


Visit = Callable[[int, bytes], Awaitable[None]]


class _Numbering:
    """Gives the lines of one read of a log file, from its start, their index in the
    instance's log: at once when where the file starts is known, else once its first anchor
    is read (holding the lines before it, at most the anchor policy's `scan_bytes`)."""

    def __init__(self, ctx: LogContext, instance: Instance, start: int | None) -> None:
        self.scan = FileScan(ctx.ledger.anchors_of(instance.replica, instance.key))
        if start is not None:
            self.scan.start = start
        self.known = recorded_lines(ctx.ledger.ledger, instance.replica, instance.key)
        self.limit = ctx.ledger.policy.scan_bytes
        self.held: list[bytes] = []
        self.dropped = False
        self.next: int | None = None  # the next line's index, once the start is known

    async def add(self, raw: bytes, visit: Visit) -> None:
        if self.next is None:
            if not self.scan.see(raw):
                self._hold(raw)
                return
            assert self.scan.start is not None
            if self.dropped:
                raise _Restart(self.scan.start)
            self.next = self.scan.start
            await self._flush(visit)
        await visit(self.next, raw)
        self.next += 1

    def _hold(self, raw: bytes) -> None:
        if not self.dropped:
            self.held.append(raw)
            if self.scan.bytes > self.limit:
                self.dropped, self.held = True, []

    async def _flush(self, visit: Visit) -> None:
        assert self.next is not None
        for raw in self.held:
            await visit(self.next, raw)
            self.next += 1
        self.held = []

    async def end(self, visit: Visit) -> int:
        """The instance's line count to the file's end. A file without an anchor of an
        instance whose count is recorded holds its last lines."""
        if self.next is None and self.scan.start is None and self.known is not None:
            start = self.known - self.scan.lines
            if self.dropped:
                raise _Restart(start)
            self.next = start
            await self._flush(visit)
        if self.next is None:
            if self.scan.start is None:
                raise Unanchored(self.scan.first_key)
            self.next = self.scan.start  # an empty file
        return self.next


async def read_instance_log(ctx: LogContext, instance: Instance, previous: bool) -> bytes:
    try:
        return await ctx.api.read_log(
            ctx.namespace, instance.pod, instance.container, previous=previous
        )
    except DistrunError:
        return b""


def to_lines(
    ctx: LogContext, replica: str, raw: list[bytes], first_seq: int, since: int
) -> list[LogLine]:
    lines = []
    for offset, line in enumerate(raw):
        seq = first_seq + offset
        if seq >= since:
            when, text = parse_line(line, ctx.max_line_bytes)
            lines.append(LogLine(replica, seq, when, text))
    return lines


async def each_line(
    ctx: LogContext,
    instance: Instance,
    previous: bool,
    ended: bool,
    visit: Visit,
    start: int | None = None,
) -> int | None:
    """Calls `visit(index, raw line)` for every line of the instance's current log file, with
    the line's index in the instance's log, as the log arrives (however long the log, it is
    never held whole), and returns the instance's line count to the file's end; None when the
    log could not be read (the kubelet no longer has it, or the read broke off). Raises
    Unanchored when where the file starts is not known. Until the instance `ended`, the text
    after its last newline is no line yet."""
    numbering = _Numbering(ctx, instance, start)
    try:
        async with ctx.api.stream_log(
            ctx.namespace, instance.pod, instance.container, follow=False, previous=previous
        ) as response:
            lines = StreamedLines(response, ctx.max_line)
            async for raw in lines:
                await numbering.add(raw, visit)
            last = lines.unfinished()
        if ended and last:  # the instance's last line, without a newline
            await numbering.add(last[: ctx.max_line], visit)
        return await numbering.end(visit)
    except _Restart as restart:
        return await each_line(ctx, instance, previous, ended, visit, restart.start)
    except (DistrunError, aiohttp.ClientError, OSError, TimeoutError):
        return None


class _Found(Exception):
    def __init__(self, index: int) -> None:
        self.index = index


async def file_start(ctx: LogContext, instance: Instance, previous: bool, ended: bool) -> int:
    """The index of the current log file's first line in the instance's log: 0 without
    anchors (no request), else found by reading the file up to its first anchor. Raises
    Unanchored, and DistrunError when the log cannot be read."""
    if not ctx.ledger.anchors_of(instance.replica, instance.key):
        return 0

    async def first(index: int, raw: bytes) -> None:
        raise _Found(index)

    try:
        count = await each_line(ctx, instance, previous, ended, first)
    except _Found as found:
        return found.index
    if count is None:
        raise DistrunError(f"cannot read the log of pod {instance.pod}")
    return count  # an empty file starts where the log is


async def read_window(
    ctx: LogContext, instance: Instance, previous: bool, ended: bool, skip: int, keep: int
) -> tuple[list[tuple[int, bytes]], int | None]:
    """The first `keep` lines from index `skip` still in an instance's log, with their
    indexes, and how many lines it has (None: unreadable, or not yet anchored after a
    rotation); only the window is held."""
    kept: list[tuple[int, bytes]] = []

    async def take(index: int, raw: bytes) -> None:
        if index >= skip and len(kept) < keep:
            kept.append((index, raw))

    try:
        count = await each_line(ctx, instance, previous, ended, take)
    except Unanchored:
        return [], None
    return (kept, count) if count is not None else ([], None)


async def read_replica(
    ctx: LogContext, instance: Instance, since: int, limit: int
) -> list[LogLine]:
    """The first `limit` lines still readable of a replica from `since`: of its previous
    container instance and its current one, each streamed (memory holds `limit` lines, not the
    log). Ended instances not yet in the ledger are recorded."""
    lines: list[LogLine] = []
    previous = instance.previous()
    for inst, is_previous in ((previous, True), (instance, False)):
        if inst is None or not inst.started or len(lines) >= limit:
            continue
        ledger = ctx.ledger.ledger
        first = base_seq(ledger, inst.replica, inst.key)
        known = recorded_lines(ledger, inst.replica, inst.key)
        if known is not None and first + known <= since:
            continue
        ended = is_previous or inst.ended
        skip = max(0, since - first)
        keep = limit - len(lines)
        if known is not None:
            keep = min(keep, known - skip)
        window, count = await read_window(ctx, inst, is_previous, ended, skip, keep)
        if known is None and inst.ended and count is not None:
            await ctx.ledger.record(inst.replica, inst.key, count)
        for index, raw in window:
            when, text = parse_line(raw, ctx.max_line_bytes)
            lines.append(LogLine(inst.replica, first + index, when, text))
    return lines


async def read_unfinished(ctx: LogContext, instance: Instance) -> LogLine | None:
    """The line a running instance is writing, with the seq it will have; None if none (or
    where its log file starts is not known yet)."""
    if not instance.started or instance.ended:
        return None
    data = await read_instance_log(ctx, instance, previous=False)
    tail = unfinished_line(data)
    if not tail:
        return None
    when, text = parse_unfinished(tail[: ctx.max_line])
    if not text:
        return None
    finished = split_log(data, ended=False)
    scan = FileScan(ctx.ledger.anchors_of(instance.replica, instance.key))
    for raw in finished:
        if scan.see(raw[: ctx.max_line]):
            break
    if scan.start is None:
        return None
    seq = base_seq(ctx.ledger.ledger, instance.replica, instance.key) + scan.start
    return LogLine(instance.replica, seq + len(finished), when, text)


class ReplicaFollower:
    """Follows one replica across its container instances, in order, for one `follow` call.
    The pod watcher calls `update` with the replica's pod (None when it is gone)."""

    def __init__(
        self,
        ctx: LogContext,
        replica: str,
        container: str,
        since: int,
        emit: Emit,
        emit_partial: EmitPartial | None = None,
        anchoring: bool = False,
    ):
        """`anchoring`: this follower leaves the anchors that late readers number by (one
        follower of a replica in a process does)."""
        self.ctx, self.replica, self.container = ctx, replica, container
        self.since = since
        self.emit = emit
        self.emit_partial = emit_partial
        self.anchoring = anchoring
        self._read = 0  # finished lines of the followed instance read on this connection
        self._unfinished: tuple[StreamedLines, int] | None = None  # its lines, first seq
        self._partial_timer: asyncio.TimerHandle | None = None
        self._partial_at = 0.0  # loop time of the last look at the unfinished line
        self._partial_sent: tuple[int, str] = (-1, "")
        self.pod: dict[str, Any] | None = None
        self.finishing = False  # the job is over: read what is there and stop
        self._changed = asyncio.Event()
        self._done: set[str] = set()
        self._seen = 0  # index in the followed instance's log of the next line to send
        self._unanchored_since: float | None = None  # loop time

    def update(self, pod: dict[str, Any] | None) -> None:
        self.pod = pod
        self._changed.set()

    def finish(self) -> None:
        self.finishing = True
        self._changed.set()

    def _current(self) -> Instance | None:
        if self.pod is None:
            return None
        return current_instance(self.replica, self.pod, self.container)

    async def run(self) -> None:
        while True:
            instance = self._current()
            if instance is None or not instance.started or instance.key in self._done:
                if self.finishing:
                    return
                await self._wait_change()
                continue
            previous = instance.previous()
            if previous is not None and previous.key not in self._done:
                await self._catch_up(previous, is_previous=True)
            await self._follow(instance)
            self._done.add(instance.key)

    async def _wait_change(self, timeout: float | None = None) -> None:
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._changed.wait(), timeout)

    async def _emit_raw(self, raw: list[bytes], first_seq: int) -> None:
        for line in to_lines(self.ctx, self.replica, raw, first_seq, self.since):
            await self.emit(line)

    async def _catch_up(self, instance: Instance, is_previous: bool) -> None:
        """An instance that ended before we got to it: read it whole (if still there)."""
        self._done.add(instance.key)
        ledger = await self.ctx.ledger.load()
        first = base_seq(ledger, self.replica, instance.key)
        known = recorded_lines(ledger, self.replica, instance.key)
        if known is not None and first + known <= self.since:
            return

        async def emit(index: int, raw: bytes) -> None:
            if known is None or index < known:
                await self._emit_raw([raw], first + index)

        try:
            count = await each_line(self.ctx, instance, is_previous, True, emit)
        except Unanchored as unanchored:  # it ended: no follower will anchor it now
            if not await self._claim(instance, unanchored):
                return
            count = await each_line(self.ctx, instance, is_previous, True, emit)
        if known is None and count is not None:
            await self.ctx.ledger.record(self.replica, instance.key, count)

    def _over(self, instance: Instance) -> bool:
        current = self._current()
        return self.finishing or current is None or current.key != instance.key or current.ended

    async def _follow(self, instance: Instance) -> None:
        ledger = await self.ctx.ledger.load()
        first = base_seq(ledger, self.replica, instance.key)
        if recorded_lines(ledger, self.replica, instance.key) is not None:
            await self._catch_up(instance, is_previous=False)  # ended and counted already
            return
        self._seen = 0
        retry = RECONNECT_SECONDS[0]
        while not self._over(instance):
            start = await self._file_start(instance)
            if start is None:
                break
            stream = asyncio.ensure_future(self._stream(instance, first, start))
            try:
                await self._until_over(stream, instance)
            finally:
                stream.cancel()
                await _settle(stream)
            if not self._over(instance):
                # The stream ended early (a container that has just started may not be
                # readable yet): reconnect soon, then less and less often.
                await self._wait_change(timeout=retry)
                longest = RECONNECT_SECONDS[1]
                retry = RECONNECT_SECONDS[0] if self._read else min(2 * retry, longest)
        await self._finish_instance(instance, first)

    async def _until_over(self, stream: "asyncio.Future[None]", instance: Instance) -> None:
        """Until `stream` ends or the instance is over. A pod update that leaves the instance
        running (a condition, an IP, a label) does not cut the stream: a new one would read the
        file again from its start, and after a rotation it could read only the new file."""
        while not stream.done():
            changed: asyncio.Future[Any] = asyncio.ensure_future(self._changed.wait())
            try:
                await asyncio.wait({stream, changed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
            self._changed.clear()
            if self._over(instance):
                return

    async def _file_start(self, instance: Instance) -> int | None:
        """Where the instance's current log file starts (anchors.py), waiting for an anchor
        after a rotation, then claiming the file; None when the instance is over first."""
        while not self._over(instance):
            try:
                start = await file_start(self.ctx, instance, False, False)
            except DistrunError:
                return 0  # unreadable yet: the stream says when it can be read
            except Unanchored as unanchored:
                if not await self._claim(instance, unanchored, wait=True):
                    await self._wait_change(timeout=1.0)
                await self.ctx.ledger.load()
                continue
            self._unanchored_since = None
            return start
        return None

    async def _claim(self, instance: Instance, unanchored: Unanchored, wait: bool = False) -> bool:
        """Claims the instance's current log file (anchors.py) when it has a line and, with
        `wait`, no follower has anchored it for the policy's `claim_after`; True if claimed
        (by this reader or another)."""
        if unanchored.first_key is None:
            return False
        now = asyncio.get_running_loop().time()
        if self._unanchored_since is None:
            self._unanchored_since = now
        policy = self.ctx.ledger.policy
        if wait and now - self._unanchored_since < policy.claim_after:
            return False
        seen = self.ctx.ledger.anchors_of(self.replica, instance.key)
        index = newest_index(seen) + 1 + policy.claim_gap
        claim = Anchor(index, unanchored.first_key, claimed=True)
        await self.ctx.ledger.claim(self.replica, instance.key, seen, claim)
        log.warning(
            "the log of %s was rotated while nobody followed it: its lines are numbered from %d on",
            instance.pod,
            index,
        )
        return True

    async def _stream(self, instance: Instance, first: int, start: int) -> None:
        """Follow the live log, whose file starts at index `start`, sending the lines from
        index `self._seen` on, and the line being written as it changes."""
        self._read = 0
        api, namespace = self.ctx.api, self.ctx.namespace
        placer = AnchorPlacer(self.ctx.ledger.policy, start) if self.anchoring else None
        loop = asyncio.get_running_loop()
        try:
            async with api.stream_log(namespace, instance.pod, self.container) as response:
                lines = StreamedLines(response, self.ctx.max_line, self._unfinished_changed)
                self._unfinished = (lines, first + start)
                async for raw in lines:
                    index = start + self._read
                    if index >= self._seen:
                        await self._emit_raw([raw], first + index)
                        self._seen = index + 1
                    self._read += 1
                    anchor = placer.read(raw, loop.time()) if placer else None
                    if anchor is not None:
                        self.ctx.ledger.leave_anchor(self.replica, instance.key, anchor)
        except (aiohttp.ClientError, OSError, TimeoutError):
            return  # the connection broke: the caller reconnects or finishes from a full read
        finally:
            self._stop_partials()

    def _unfinished_changed(self) -> None:
        """At most one look per PARTIAL_INTERVAL: at once after a quiet interval, else at its
        end, at the newest state."""
        if self.emit_partial is None or self._partial_timer is not None:
            return
        loop = asyncio.get_running_loop()
        due = self._partial_at + PARTIAL_INTERVAL
        if loop.time() >= due:
            self._send_unfinished()
        else:
            self._partial_timer = loop.call_at(due, self._send_unfinished)

    def _send_unfinished(self) -> None:
        self._partial_timer = None
        self._partial_at = asyncio.get_running_loop().time()
        if self._unfinished is None or self.emit_partial is None:
            return
        lines, first = self._unfinished
        seq = first + self._read
        when, text = parse_unfinished(lines.unfinished())
        if seq < max(self.since, first + self._seen) or (seq, text) == self._partial_sent:
            return
        if not text and self._partial_sent[0] != seq:
            return  # nothing was shown for this line: nothing to take back
        self._partial_sent = (seq, text)
        self.emit_partial(LogLine(self.replica, seq, when, text))

    def _stop_partials(self) -> None:
        if self._partial_timer is not None:
            self._partial_timer.cancel()
            self._partial_timer = None
        self._unfinished = None

    async def _finish_instance(self, instance: Instance, first: int) -> None:
        """The instance ended (or the job did): read its whole log, send what the stream had
        not, and record its count once it can no longer grow."""
        current = self._current()
        restarted = current is not None and current.key != instance.key
        # A controller that recreates a pod (Volcano's RestartJob) gives the new one the old
        # one's name: the old pod's log can no longer be read by name.
        replaced = current is None or current.uid != instance.uid
        ended = restarted or (current is not None and current.ended)
        count: int | None = self._seen
        if not replaced:
            count = await self._read_rest(instance, first, restarted, ended)
            if count is None and ended:  # the pod went while its log was read
                count = self._seen
        if count is not None and (ended or replaced):
            await self.ctx.ledger.record(self.replica, instance.key, count)

    async def _read_rest(
        self, instance: Instance, first: int, previous: bool, ended: bool
    ) -> int | None:
        """Reads the instance's whole log as it arrives (a slow consumer holds the socket
        back, not the log in memory), sending the lines from index `self._seen` on; the count
        of its lines, or None when the read broke off (the count is then unknown)."""

        async def emit(index: int, raw: bytes) -> None:
            if index >= self._seen:
                await self._emit_raw([raw], first + index)
                self._seen = index + 1

        try:
            count = await each_line(self.ctx, instance, previous, ended, emit)
        except Unanchored:
            return None
        if count is None:
            return None
        self._seen = max(self._seen, count)
        return self._seen


async def _settle(task: "asyncio.Future[None]") -> None:
    """Wait for a cancelled helper task without swallowing our own cancellation."""
    try:
        await task
    except (asyncio.CancelledError, DistrunError):
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise
