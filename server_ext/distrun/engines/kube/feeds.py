"""One upstream per job for every viewer of it in this server process.

A `JobFeed` reads the job object and its pods from its namespace's informers (informers.py: one
watch per resource type and namespace, whatever the number of jobs followed there), and reads
each followed replica's log once (one `ReplicaFeed`, one pod-log stream), however many viewers
follow the job: websockets, REST follows, the CLI and the kernel magic all come through
`KubeEngine.follow`. Each viewer
(`FeedViewer`) keeps its own position per replica and reads at its own pace from the replica's
recent lines, kept in memory up to REPLICA_KEPT_BYTES. The upstream never waits for a viewer: a
viewer that falls behind what is kept (or starts before where the feed started) follows the
replica on a stream of its own from where it is, at its own pace (a bounded queue holds that
stream back, as every follower was held before sharing), until it reaches what is kept, and
then reads the shared lines again: a slow viewer costs only itself. A replica's stream ends
when its last viewer goes; a namespace's watches end with the last feed there.
"""

import asyncio
import bisect
import collections
import contextlib
import copy
import logging
import random
import sys
from collections.abc import AsyncIterator
from typing import Protocol

from distrun.core.errors import DistrunError
from distrun.core.job import Job, JobState
from distrun.core.logs import JobUpdate, LogBatch, LogEvent, LogLine, PartialUpdate
from distrun.core.spec import JobSpec
from distrun.engines.kube.client import PODS, KubeApi, Obj, Resource
from distrun.engines.kube.informers import Informers, across_jobs, by_label, by_name
from distrun.engines.kube.logs import LogContext, ReplicaFollower
from distrun.engines.kube.loop_local import LoopLocal
from distrun.engines.kube.manifests.common import LABEL_INSTANCE
from distrun.engines.kube.restart_ledger import RestartBook, observe
from distrun.engines.kube.restart_ledger import merge as merge_restarts

log = logging.getLogger(__name__)
WAITING_POLL_SECONDS = 2.0
# A replica's lines some viewer has yet to take are kept, at most this much of the newest; a
# viewer further behind follows on a stream of its own.
REPLICA_KEPT_BYTES = 512 * 1024
LINE_OVERHEAD_BYTES = 200  # a LogLine's object, its dict and fields, beside its text
CATCH_UP_QUEUE_LINES = 1_000  # what a viewer's own stream reads ahead of the viewer
RECHECK_SECONDS = 5.0  # a viewer looks again at least this often, changed or not
# A job's viewers are woken for new lines at most this often (the first line after a quiet
# spell at once): at 1,200 followed replicas, a wake per line was most of the server's work.
LINES_WAKE_SECONDS = 0.025
# Jobs whose viewers are woken for lines in one loop iteration (WakePacer): with 4 viewers a
# job, 16 viewers' steps and as many sent messages' completions, some 10 ms on a loaded machine.
WAKES_PER_ITERATION = 4


class JobSource(Protocol):
    """What a feed asks of its engine (KubeEngine)."""

    name: str

    def describe_job(
        self, obj: Obj, spec: JobSpec, pods: dict[str, Obj], restarts: RestartBook | None = None
    ) -> Job: ...

    async def waiting_reason(self, api: KubeApi, obj: Obj, job: Job) -> str | None: ...

    def pod_selector(self, job_id: str) -> str: ...

    def pod_attempt(self, pod: Obj) -> int: ...

    def usage_peaks(self, obj: Obj) -> dict[str, int]: ...

    def replica_pods(self, pods: list[Obj], spec: JobSpec) -> dict[str, Obj]: ...

    def resource_of(self, obj: Obj) -> Resource: ...

    def log_context(self, api: KubeApi, obj: Obj) -> LogContext: ...

    def container_name(self, spec: JobSpec) -> str: ...


class Broadcast:
    """Wakes every waiter each time it is set: a waiter takes `next()` before it looks at what
    it waits for, so a change after its look wakes it."""

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._last = -LINES_WAKE_SECONDS  # loop time of the last wake
        self._timer: asyncio.TimerHandle | None = None
        self.paced = False  # waiting its turn in the loop's WakePacer

    def set(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._last = asyncio.get_running_loop().time()
        self._event.set()
        self._event = asyncio.Event()

    def set_soon(self) -> None:
        """As `set`, at once after a quiet LINES_WAKE_SECONDS, else at its end, and in either
        case in the loop's WakePacer's turn: the lines a job's replicas print together reach
        each viewer together, not a wake a line."""
        if self._timer is not None or self.paced:
            return
        loop = asyncio.get_running_loop()
        due = self._last + LINES_WAKE_SECONDS
        if loop.time() >= due:
            _PACERS.of(loop).wake(self)
        else:
            self._timer = loop.call_at(due, self._due)

    def next(self) -> asyncio.Event:
        return self._event

    def _due(self) -> None:
        self._timer = None
        _PACERS.of(asyncio.get_running_loop()).wake(self)


class WakePacer:
    """Sets at most WAKES_PER_ITERATION broadcasts a loop iteration, the rest in the next ones.

    asyncio runs every callback that is ready before it looks at its timers and sockets again.
    After any pause (a collection, the OS running others) lines of many jobs come at once, and
    woken together, their viewers were one iteration of 600 steps (0.2 s at 1,200 pods, with
    every timer waiting behind it: docs/performance.md). Taken a few jobs an iteration, the same
    work leaves the loop in between."""

    def __init__(self) -> None:
        self._waiting: collections.deque[Broadcast] = collections.deque()
        self._budget = WAKES_PER_ITERATION
        self._next: asyncio.Handle | None = None

    def wake(self, broadcast: Broadcast) -> None:
        if self._budget > 0 and not self._waiting:
            self._budget -= 1
            broadcast.set()
        else:
            broadcast.paced = True
            self._waiting.append(broadcast)
        self._schedule()

    def _schedule(self) -> None:
        if self._next is None:
            self._next = asyncio.get_running_loop().call_soon(self._iteration)

    def _iteration(self) -> None:
        self._next = None
        self._budget = WAKES_PER_ITERATION
        while self._waiting and self._budget > 0:
            self._budget -= 1
            broadcast = self._waiting.popleft()
            broadcast.paced = False
            broadcast.set()
        if self._waiting or self._budget < WAKES_PER_ITERATION:
            self._schedule()  # the budget comes back next iteration


_PACERS = LoopLocal(WakePacer)


def _size(line: LogLine) -> int:
    return sys.getsizeof(line.text) + LINE_OVERHEAD_BYTES


class ReplicaFeed:
    """One replica's log, read once from `since` for all viewers; the lines some viewer has
    still to take kept (at most REPLICA_KEPT_BYTES of the newest)."""

    def __init__(self, feed: "JobFeed", name: str, since: int) -> None:
        self.feed, self.name = feed, name
        self._lines: list[LogLine] = []
        self._head = 0  # lines before it were let go
        self._bytes = 0
        self.kept_from = since  # every line from this seq the upstream read is kept
        self.next_seq = since  # after the newest line read
        self.partial: LogLine | None = None  # the unfinished line, as the follower last saw it
        self.readers: dict[object, int] = {}  # each viewer's next seq wanted
        self.follower = ReplicaFollower(
            feed.ctx, name, feed.container, since, self._add, self._set_partial, anchoring=True
        )
        self.follower.update(feed.pods.get(name))
        if feed.finishing:
            self.follower.finish()
        self.task = asyncio.create_task(self.follower.run())
        self.task.add_done_callback(lambda _task: feed.changed.set())

    @property
    def done(self) -> bool:
        return self.task.done()

    async def _add(self, line: LogLine) -> None:
        self._lines.append(line)
        self._bytes += _size(line)
        self.next_seq = line.seq + 1
        self._let_go()
        self.feed.changed.set_soon()

    def took(self, reader: object, position: int) -> None:
        """`reader` wants the lines from `position` on now: those before it every reader has
        taken go."""
        self.readers[reader] = position
        self._let_go()

    def _let_go(self) -> None:
        wanted = min(self.readers.values(), default=self.next_seq)
        lines = self._lines
        while self._head < len(lines) and (
            lines[self._head].seq < wanted
            or (self._bytes > REPLICA_KEPT_BYTES and self._head < len(lines) - 1)
        ):
            dropped = lines[self._head]
            self._head += 1
            self._bytes -= _size(dropped)
            self.kept_from = dropped.seq + 1
        # Gone once they are half the list: a line every viewer took is freed within a few
        # lines, not kept until 64 had gone (a young collection scanned 20k such at 1,200 pods).
        if self._head and self._head * 2 >= len(lines):
            del lines[: self._head]
            self._head = 0

    def _set_partial(self, line: LogLine) -> None:
        self.partial = line
        self.feed.changed.set()

    def lines_from(self, seq: int, limit: int) -> list[LogLine]:
        """Up to `limit` kept lines from `seq` on (the caller is not behind `kept_from`)."""
        start = bisect.bisect_left(self._lines, seq, lo=self._head, key=lambda line: line.seq)
        return self._lines[start : start + limit]

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


class JobFeed:
    """A job's object and pods, as its namespace's informers keep them, and its replicas' logs,
    each read once."""

    def __init__(
        self, source: JobSource, api: KubeApi, obj: Obj, spec: JobSpec, informers: Informers
    ) -> None:
        self.source, self.api, self.obj, self.spec = source, api, obj, spec
        meta = obj["metadata"]
        self.namespace, self.job_id = meta["namespace"], meta["name"]
        self.ctx = source.log_context(api, obj)
        self.container = source.container_name(spec)
        self.changed = Broadcast()
        self.replicas: dict[str, ReplicaFeed] = {}
        self.catching_up: set[CatchUp] = set()  # viewers' own streams, told of pods too
        self.all_pods: dict[str, Obj] = {}  # by pod name
        self.pods: dict[str, Obj] = {}  # by replica
        self.gone = False
        self.finishing = False  # the job is over: the followers read what is there and stop
        self.waiting: str | None = None  # the cluster's word on why the pending job waits
        self.restarts: RestartBook = {}  # every pod event's restarts and failures, recorded
        self._recording: asyncio.Task[None] | None = None
        self._unrecorded = False
        self.job = source.describe_job(obj, spec, {})
        self.viewers = 0
        self._informers = informers
        pod_selector, pod_label = across_jobs(source.pod_selector(self.job_id), self.job_id)
        self._jobs = informers.use(
            api, source.resource_of(obj), self.namespace, LABEL_INSTANCE, by_name
        )
        self._pods = informers.use(api, PODS, self.namespace, pod_selector, by_label(pod_label))
        self._jobs.listen(self.job_id, self._on_job)
        self._pods.listen(self.job_id, self._on_pod)
        self._tasks: list[asyncio.Task[None]] = []
        self.started: asyncio.Task[None] = asyncio.create_task(self._start())

    async def _start(self) -> None:
        await asyncio.gather(self._jobs.ready(), self._pods.ready())
        cached = self._jobs.get(self.job_id)
        if cached is not None:  # else it was made after that list: its event comes
            self.obj = cached
        self.all_pods = self._pods.objects_of(self.job_id)
        with contextlib.suppress(DistrunError):
            await self.ctx.ledger.load()
        merge_restarts(self.restarts, self.ctx.ledger.restarts)
        for pod in self.all_pods.values():
            self._observe(pod)
        self._pods_changed()
        await self._refresh_waiting()
        self._tasks = [
            asyncio.create_task(self._poll_waiting()),
            asyncio.create_task(self._recheck()),
        ]

    async def stop(self) -> None:
        self.started.cancel()
        tasks = [*self._tasks, *(replica.task for replica in self.replicas.values())]
        tasks += [catch_up.task for catch_up in self.catching_up]
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(self.started, *tasks, return_exceptions=True)
        self._jobs.unlisten(self.job_id, self._on_job)
        self._pods.unlisten(self.job_id, self._on_pod)
        await asyncio.gather(self._informers.let_go(self._jobs), self._informers.let_go(self._pods))
        if self._recording is not None:  # the last restarts seen are written, not dropped
            await asyncio.gather(self._recording, return_exceptions=True)
        await self.ctx.ledger.close()  # the anchors its followers left
        for result in results:
            if isinstance(result, Exception) and not isinstance(result, DistrunError):
                log.warning("following %s failed: %r", self.job_id, result)

    # --- what viewers share ---

    def join(self, name: str, since: int, reader: object) -> ReplicaFeed:
        replica = self.replicas.get(name)
        if replica is None:
            replica = self.replicas[name] = ReplicaFeed(self, name, since)
        replica.readers[reader] = since
        return replica

    def leave(self, replica: ReplicaFeed, reader: object) -> asyncio.Task[None] | None:
        """The replica's stream stopped when its last viewer went (the task doing it)."""
        replica.readers.pop(reader, None)
        if replica.readers or self.replicas.get(replica.name) is not replica:
            return None
        del self.replicas[replica.name]
        return asyncio.create_task(replica.stop())

    def _update(self) -> None:
        """The job's description again, after its object, pods or waiting word changed."""
        obj = self.obj
        if self.gone and not obj["metadata"].get("deletionTimestamp"):
            obj = {**obj, "metadata": {**obj["metadata"], "deletionTimestamp": "gone"}}
        job = self.source.describe_job(obj, self.spec, self.pods, self.restarts)
        if self.waiting and job.state == JobState.PENDING:
            job.reason = self.waiting
        self.job = job
        if (job.state.terminal or self.gone) and not self.finishing:
            self.finishing = True
            for follower in self._followers():
                follower.finish()
        self.changed.set()

    def _followers(self) -> list[ReplicaFollower]:
        shared = [replica.follower for replica in self.replicas.values()]
        return shared + [catch_up.follower for catch_up in self.catching_up]

    async def _refresh_waiting(self) -> None:
        if self.job.state != JobState.PENDING and self.waiting is None:
            return  # a running job's feed has nothing to say here, and nothing to take back
        job = self.source.describe_job(self.obj, self.spec, self.pods, self.restarts)
        waiting = None
        if job.state == JobState.PENDING:
            with contextlib.suppress(DistrunError):
                waiting = await self.source.waiting_reason(self.api, self.obj, job)
        if waiting != self.waiting:
            self.waiting = waiting
            self._update()

    async def _recheck(self) -> None:
        """Every viewer looks again at least every RECHECK_SECONDS, changed or not. The first
        look comes at a random moment in that interval: a server's feeds start together (its
        viewers reconnect at once), and would otherwise wake all their viewers in the same
        loop iteration every RECHECK_SECONDS, for as long as they run."""
        await asyncio.sleep(random.uniform(0, RECHECK_SECONDS))
        while True:
            self.changed.set()
            await asyncio.sleep(RECHECK_SECONDS)

    async def _poll_waiting(self) -> None:
        """Events and PodGroups are not watched (a watch per job for a word that rarely
        changes); while the job is pending they are read again every few seconds."""
        while True:
            await asyncio.sleep(WAITING_POLL_SECONDS)
            await self._refresh_waiting()

    # --- what the namespace's informers tell ---

    def _on_job(self, kind: str, obj: Obj) -> None:
        if kind == "DELETED":
            self.gone = True
        else:
            self.obj = obj
        self._update()

    def _on_pod(self, kind: str, pod: Obj) -> None:
        name = pod["metadata"]["name"]
        if self.started.done():  # before, _start observes the pods it lists
            self._observe(pod)
        if kind == "DELETED":
            self.all_pods.pop(name, None)
        else:
            self.all_pods[name] = pod
        self._pods_changed()

    def _observe(self, pod: Obj) -> None:
        """Adds the pod's restarts and failed attempts to the job's restart ledger (its last
        state too, when it is deleted: the controller may delete a restarting pod at once)."""
        peaks = self.source.usage_peaks(self.obj)
        for replica, same in self.source.replica_pods([pod], self.spec).items():
            attempt = self.source.pod_attempt(same)
            if observe(self.restarts, replica, same, attempt, peaks.get(replica)):
                self._record()

    def _record(self) -> None:
        """Writes the ledger, one write at a time; changes meanwhile go in the next."""
        if self._recording is not None and not self._recording.done():
            self._unrecorded = True
            return
        self._recording = asyncio.create_task(self._write_restarts())

    async def _write_restarts(self) -> None:
        while True:
            self._unrecorded = False
            with contextlib.suppress(DistrunError):
                await self.ctx.ledger.record_restarts(copy.deepcopy(self.restarts))
            if not self._unrecorded:
                return

    def _pods_changed(self) -> None:
        self.pods = self.source.replica_pods(list(self.all_pods.values()), self.spec)
        for follower in self._followers():
            pod = self.pods.get(follower.replica)
            if pod is not follower.pod:
                follower.update(pod)
        self._update()


class CatchUp:
    """A viewer's own stream of a replica from where it is, until it reaches the kept lines."""

    def __init__(self, feed: JobFeed, name: str, since: int, wake: asyncio.Event) -> None:
        self.feed, self.wake = feed, wake
        self.queue: asyncio.Queue[LogLine] = asyncio.Queue(maxsize=CATCH_UP_QUEUE_LINES)
        self.follower = ReplicaFollower(feed.ctx, name, feed.container, since, self._add)
        self.follower.update(feed.pods.get(name))
        if feed.finishing:
            self.follower.finish()
        self.task = asyncio.create_task(self.follower.run())
        self.task.add_done_callback(lambda _task: wake.set())
        feed.catching_up.add(self)

    async def _add(self, line: LogLine) -> None:
        await self.queue.put(line)
        self.wake.set()

    def take(self, limit: int) -> list[LogLine]:
        lines: list[LogLine] = []
        while len(lines) < limit and not self.queue.empty():
            lines.append(self.queue.get_nowait())
        return lines

    @property
    def exhausted(self) -> bool:
        return self.task.done() and self.queue.empty()

    async def stop(self) -> None:
        self.feed.catching_up.discard(self)
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


class FeedViewer:
    """One `follow` call: its own position in each selected replica, read from the feed."""

    def __init__(
        self, feed: JobFeed, names: list[str], starts: dict[str, int], max_batch: int
    ) -> None:
        self.feed, self.max_batch = feed, max_batch
        self.positions = dict(starts)  # the next seq wanted, per replica
        self.replicas = [feed.join(name, starts[name], self) for name in names]
        self._catching_up: dict[str, CatchUp] = {}
        self._own_wake = asyncio.Event()  # a line on one of this viewer's own streams
        self._sent_partials: dict[str, LogLine] = {}
        self._turn = 0  # the replica read first next time: a busy one starves no other

    def close(self) -> list[asyncio.Task[None]]:
        stopping = [self.feed.leave(replica, self) for replica in self.replicas]
        stopping += [asyncio.create_task(c.stop()) for c in self._catching_up.values()]
        self.replicas, self._catching_up = [], {}
        return [task for task in stopping if task is not None]

    async def events(self) -> AsyncIterator[LogEvent]:
        sent: Job | None = None
        while True:
            woken = self.feed.changed.next()
            if self.feed.job != sent:
                sent = self.feed.job
                yield JobUpdate(sent)
            # Taken from the kept lines alone and not full, a batch took every replica to its
            # end: what came since has set `woken`, so a look again at once would find nothing
            # (8 replicas' looks, each viewer after each batch). A catch-up that ends moves
            # its replica on to the kept lines, which were not looked at: look again.
            kept_only = not self._catching_up
            batch = await self._take()
            if batch:
                drained = kept_only and not self._catching_up and len(batch) < self.max_batch
                yield LogBatch(batch)
                del batch  # not held while the next lines are awaited
                if not drained:
                    continue
            partials = self._partials()
            if partials:
                yield PartialUpdate(partials)
            if self._over():
                return
            await self._wait(woken)

    async def _wait(self, woken: asyncio.Event) -> None:
        if not self._catching_up:  # the common case: no task, no timer of its own per wait
            await woken.wait()  # the feed wakes its viewers every RECHECK_SECONDS too
            return
        own = self._own_wake
        tasks = [asyncio.ensure_future(woken.wait()), asyncio.ensure_future(own.wait())]
        try:
            await asyncio.wait(tasks, timeout=RECHECK_SECONDS, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            own.clear()

    def _over(self) -> bool:
        """The job ended, and every line its replicas' followers read has been taken."""
        return (
            self.feed.finishing
            and not self._catching_up
            and all(
                replica.done and self.positions[replica.name] >= replica.next_seq
                for replica in self.replicas
            )
        )

    async def _take(self) -> list[LogLine]:
        lines: list[LogLine] = []
        count = len(self.replicas)
        self._turn = (self._turn + 1) % max(count, 1)
        for index in range(count):
            room = self.max_batch - len(lines)
            if room <= 0:
                break
            lines += await self._take_from(self.replicas[(self._turn + index) % count], room)
        return lines

    async def _take_from(self, replica: ReplicaFeed, room: int) -> list[LogLine]:
        """Kept lines from this viewer's position, or, when it is behind them, lines of its
        own stream; that stream stops once the kept lines go on from where it got to."""
        name = replica.name
        position = self.positions[name]
        catch_up = self._catching_up.get(name)
        if catch_up is None and replica.kept_from <= position >= replica.next_seq:
            # Nothing new here, and this viewer's place was told when it was taken: every
            # viewer of a job looks at every replica each time any of them has a line.
            return []
        if catch_up is None and position < replica.kept_from:
            catch_up = CatchUp(self.feed, name, position, self._own_wake)
            self._catching_up[name] = catch_up
        if catch_up is None:
            taken = replica.lines_from(position, room)
        else:
            taken = [line for line in catch_up.take(room) if line.seq >= position]
        if taken:
            self.positions[name] = position = taken[-1].seq + 1
        if catch_up is not None and (position >= replica.kept_from or catch_up.exhausted):
            exhausted, kept_from = catch_up.exhausted, replica.kept_from
            del self._catching_up[name]
            await catch_up.stop()  # meanwhile the kept lines may move on: read before it
            if exhausted:  # lines its stream could no longer read (a log let go) are skipped
                self.positions[name] = max(position, kept_from)
        replica.took(self, self.positions[name])
        return taken

    def _partials(self) -> list[LogLine]:
        """The replicas' unfinished lines this viewer was not shown, ahead of its lines."""
        found = []
        for replica in self.replicas:
            partial = replica.partial
            position = self.positions[replica.name]
            if (
                partial is not None
                and partial.seq >= position
                and self._sent_partials.get(replica.name) != partial
            ):
                self._sent_partials[replica.name] = partial
                found.append(partial)
        return found


async def follow_feed(
    feed: JobFeed, names: list[str], starts: dict[str, int], max_batch: int
) -> AsyncIterator[LogEvent]:
    viewer = FeedViewer(feed, names, starts, max_batch)
    try:
        async for event in viewer.events():
            yield event
    finally:
        stopping = viewer.close()
        if stopping:
            await asyncio.gather(*stopping, return_exceptions=True)
