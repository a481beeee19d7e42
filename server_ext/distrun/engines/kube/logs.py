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
import datetime
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from distrun.core.errors import Conflict, DistrunError, NotFound
from distrun.core.logs import PARTIAL_MAX_CHARS, LogLine
from distrun.core.terminal import last_redraws, visible_line
from distrun.engines.kube.client import CONFIGMAPS, KubeApi, StreamedLines

LEDGER_ANNOTATION = "distrun.io/log-ledger"
Ledger = dict[str, list[list[Any]]]  # replica -> [[instance key, lines], ...] in order
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
    try:
        moment = datetime.datetime.fromisoformat(whole).replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return None
    digits = fraction[:6].ljust(6, "0") if fraction.isdigit() else "0"
    return moment.timestamp() + int(digits) / 1_000_000


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
    annotations = configmap.get("metadata", {}).get("annotations") or {}
    try:
        ledger = json.loads(annotations.get(LEDGER_ANNOTATION, "{}"))
    except ValueError:
        return {}
    return ledger if isinstance(ledger, dict) else {}


def base_seq(ledger: Ledger, replica: str, key: str) -> int:
    """The seq of the first line of instance `key`: every recorded earlier instance's lines."""
    total = 0
    for entry_key, lines in ledger.get(replica, []):
        if entry_key == key:
            break
        total += int(lines)
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


class LedgerStore:
    """The job ConfigMap's ledger annotation, read and appended with optimistic concurrency."""

    def __init__(self, api: KubeApi, namespace: str, name: str) -> None:
        self.api, self.namespace, self.name = api, namespace, name
        self.ledger: Ledger = {}

    async def load(self) -> Ledger:
        try:
            configmap = await self.api.get(
                CONFIGMAPS, self.namespace, self.name, "read the log ledger"
            )
        except NotFound:
            configmap = {}
        self.ledger = read_ledger(configmap)
        return self.ledger

    async def record(self, replica: str, key: str, lines: int) -> None:
        """Append `[key, lines]` for `replica` unless it is there already."""
        for _ in range(_LEDGER_RETRIES):
            try:
                configmap = await self.api.get(
                    CONFIGMAPS, self.namespace, self.name, "read the log ledger"
                )
            except NotFound:
                return  # the job is being deleted: nobody will ask for seqs any more
            ledger = read_ledger(configmap)
            if recorded_lines(ledger, replica, key) is not None:
                self.ledger = ledger
                return
            ledger.setdefault(replica, []).append([key, lines])
            annotations = configmap["metadata"].setdefault("annotations", {})
            annotations[LEDGER_ANNOTATION] = json.dumps(ledger, separators=(",", ":"))
            try:  # carries metadata.resourceVersion: a concurrent writer makes this a 409
                await self.api.replace(
                    CONFIGMAPS, self.namespace, self.name, configmap, "record the log ledger"
                )
            except Conflict:
                continue
            except NotFound:
                return
            self.ledger = ledger
            return


# --- reading ------------------------------------------------------------------------------


@dataclass
class LogContext:
    api: KubeApi
    namespace: str
    ledger: LedgerStore
    max_line_bytes: int


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
    visit: Callable[[int, bytes], Awaitable[None]],
) -> int | None:
    """Calls `visit(index, raw line)` for every line of an instance's log as the log arrives
    (however long the log, it is never held whole) and returns how many lines it has; None
    when the log could not be read (the kubelet no longer has it, or the read broke off).
    Until the instance `ended`, the text after its last newline is no line yet."""
    count = 0
    max_line = ctx.max_line_bytes + TIMESTAMP_ROOM
    try:
        async with ctx.api.stream_log(
            ctx.namespace, instance.pod, instance.container, follow=False, previous=previous
        ) as response:
            lines = StreamedLines(response, max_line)
            async for raw in lines:
                await visit(count, raw)
                count += 1
            last = lines.unfinished()
    except (DistrunError, aiohttp.ClientError, OSError, TimeoutError):
        return None
    if ended and last:  # the instance's last line, without a newline
        await visit(count, last[:max_line])
        count += 1
    return count


async def read_window(
    ctx: LogContext, instance: Instance, previous: bool, ended: bool, skip: int, keep: int
) -> tuple[list[bytes], int | None]:
    """Lines `skip` to `skip + keep` of an instance's log, and how many lines it has (None:
    unreadable); only the window is held."""
    kept: list[bytes] = []

    async def take(index: int, raw: bytes) -> None:
        if skip <= index < skip + keep:
            kept.append(raw)

    count = await each_line(ctx, instance, previous, ended, take)
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
        raw, count = await read_window(ctx, inst, is_previous, ended, skip, keep)
        if known is None and inst.ended and count is not None:
            await ctx.ledger.record(inst.replica, inst.key, count)
        lines += to_lines(ctx, inst.replica, raw, first + skip, since)
    return lines


async def read_unfinished(ctx: LogContext, instance: Instance) -> LogLine | None:
    """The line a running instance is writing, with the seq it will have; None if none."""
    if not instance.started or instance.ended:
        return None
    data = await read_instance_log(ctx, instance, previous=False)
    tail = unfinished_line(data)
    if not tail:
        return None
    when, text = parse_unfinished(tail[: ctx.max_line_bytes + TIMESTAMP_ROOM])
    if not text:
        return None
    seq = base_seq(ctx.ledger.ledger, instance.replica, instance.key)
    return LogLine(instance.replica, seq + len(split_log(data, ended=False)), when, text)


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
    ):
        self.ctx, self.replica, self.container = ctx, replica, container
        self.since = since
        self.emit = emit
        self.emit_partial = emit_partial
        self._read = 0  # finished lines of the followed instance read on this connection
        self._unfinished: tuple[StreamedLines, int] | None = None  # its lines, first seq
        self._partial_timer: asyncio.TimerHandle | None = None
        self._partial_at = 0.0  # loop time of the last look at the unfinished line
        self._partial_sent: tuple[int, str] = (-1, "")
        self.pod: dict[str, Any] | None = None
        self.finishing = False  # the job is over: read what is there and stop
        self._changed = asyncio.Event()
        self._done: set[str] = set()
        self._seen = 0

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
        self._seen = 0  # lines of this instance sent or skipped (before `since`) so far
        retry = RECONNECT_SECONDS[0]
        while not self._over(instance):
            stream = asyncio.ensure_future(self._stream(instance, first))
            changed = asyncio.ensure_future(self._changed.wait())
            try:
                await asyncio.wait({stream, changed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                changed.cancel()
                self._changed.clear()
                stream.cancel()
                await _settle(stream)
            if stream.done() and not self._over(instance):
                # The stream ended early (a container that has just started may not be
                # readable yet): reconnect soon, then less and less often.
                await self._wait_change(timeout=retry)
                longest = RECONNECT_SECONDS[1]
                retry = RECONNECT_SECONDS[0] if self._read else min(2 * retry, longest)
        await self._finish_instance(instance, first)

    async def _stream(self, instance: Instance, first: int) -> None:
        """Follow the live log, sending the lines after the first `self._seen`, and the line
        being written as it changes."""
        skip, self._read = self._seen, 0
        api, namespace = self.ctx.api, self.ctx.namespace
        try:
            async with api.stream_log(namespace, instance.pod, self.container) as response:
                max_line = self.ctx.max_line_bytes + TIMESTAMP_ROOM
                lines = StreamedLines(response, max_line, self._unfinished_changed)
                self._unfinished = (lines, first)
                async for raw in lines:
                    if self._read >= skip:
                        await self._emit_raw([raw], first + self._read)
                        self._seen = self._read + 1
                    self._read += 1
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
        back, not the log in memory), sending the lines after the first `self._seen`; the
        count of its lines, or None when the read broke off (the count is then unknown)."""
        count = 0
        api, namespace = self.ctx.api, self.ctx.namespace
        max_line = self.ctx.max_line_bytes + TIMESTAMP_ROOM
        try:
            async with api.stream_log(
                namespace, instance.pod, self.container, follow=False, previous=previous
            ) as response:
                lines = StreamedLines(response, max_line)
                async for raw in lines:
                    if count >= self._seen:
                        await self._emit_raw([raw], first + count)
                    count += 1
                last = lines.unfinished()
        except (DistrunError, aiohttp.ClientError, OSError, TimeoutError):
            return None
        if ended and last:  # the instance's last line, without a newline
            if count >= self._seen:
                await self._emit_raw([last[:max_line]], first + count)
            count += 1
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
