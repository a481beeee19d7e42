"""The sharing in engines/kube/feeds.py without an API server: a replica's kept lines, viewers at
their own positions, a viewer behind what is kept reading the rest itself. The tier's
tests/k8s/test_shared_following.py runs the same against the real API server."""

import asyncio
import weakref
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from distrun.core.logs import JobUpdate, LogBatch, LogEvent, LogLine, PartialUpdate
from distrun.engines.kube import feeds
from distrun.engines.kube.feeds import Broadcast, FeedViewer, ReplicaFeed


class FakeJobFeed:
    """What ReplicaFeed and FeedViewer use of a JobFeed; no pods, so followers never read."""

    def __init__(self) -> None:
        self.ctx: Any = None
        self.container = "main"
        self.pods: dict[str, Any] = {}
        self.finishing = False
        self.changed = Broadcast()
        self.replicas: dict[str, ReplicaFeed] = {}
        self.job = "running"

    join = feeds.JobFeed.join
    leave = feeds.JobFeed.leave

    def finish(self) -> None:
        self.finishing = True
        for replica in self.replicas.values():
            replica.follower.finish()
        self.changed.set()


def line(seq: int, replica: str = "worker-0") -> LogLine:
    return LogLine(replica, seq, 1000.0 + seq, f"line {seq} " + "x" * 80)


@pytest.fixture
def small_kept(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Replicas keep about ten lines."""
    kept = 10 * feeds._size(line(0))
    monkeypatch.setattr(feeds, "REPLICA_KEPT_BYTES", kept)
    yield kept


async def add(replica: ReplicaFeed, seqs: range) -> None:
    for seq in seqs:
        await replica._add(line(seq, replica.name))


async def next_lines(events: AsyncIterator[LogEvent]) -> list[LogLine]:
    async for event in events:
        if isinstance(event, LogBatch):
            return event.lines
    raise AssertionError("the events ended before a batch")


async def test_a_replica_keeps_its_newest_lines_within_its_bytes_and_says_from_where(
    small_kept: int,
) -> None:
    job = FakeJobFeed()
    replica = job.join("worker-0", 5, "a reader that takes nothing")
    await add(replica, range(5, 2_005))
    assert replica.next_seq == 2_005
    assert 1_990 <= replica.kept_from <= 1_996
    kept = replica.lines_from(replica.kept_from, 100)
    assert [kept_line.seq for kept_line in kept] == list(range(replica.kept_from, 2_005))
    assert replica.lines_from(2_000, 3) == [line(2_000), line(2_001), line(2_002)]
    assert replica.lines_from(2_005, 10) == []
    await replica.stop()


async def test_lines_every_viewer_has_taken_are_let_go(small_kept: int) -> None:
    job = FakeJobFeed()
    replica = job.join("worker-0", 0, "first")
    job.join("worker-0", 0, "second")
    await add(replica, range(6))
    replica.took("first", 6)
    assert replica.kept_from == 0 and len(replica.lines_from(0, 10)) == 6, "second wants them"
    replica.took("second", 4)
    assert replica.kept_from == 4 and replica.lines_from(4, 10) == [line(4), line(5)]
    replica.took("second", 6)
    assert replica.kept_from == 6 and replica.lines_from(6, 10) == []
    await replica.stop()


async def test_a_line_every_viewer_took_is_freed_within_a_few_lines() -> None:
    # Kept in the list until 64 had gone, 20k such lines at 1,200 pods were alive at every
    # young collection, for it to scan.
    job = FakeJobFeed()
    replica = job.join("worker-0", 0, "viewer")
    taken, most_alive = [], 0
    for seq in range(200):
        added = line(seq)
        await replica._add(added)
        replica.took("viewer", seq + 1)
        taken.append(weakref.ref(added))
        del added
        most_alive = max(most_alive, sum(ref() is not None for ref in taken))
    assert most_alive <= 2, f"up to {most_alive} lines every viewer took were held"
    await replica.stop()


async def test_viewers_read_the_same_lines_each_from_its_own_position_and_pace(
    small_kept: int,
) -> None:
    job = FakeJobFeed()
    fast = FeedViewer(job, ["worker-0"], {"worker-0": 0}, max_batch=4)  # type: ignore[arg-type]
    late = FeedViewer(job, ["worker-0"], {"worker-0": 3}, max_batch=100)  # type: ignore[arg-type]
    assert len(job.replicas) == 1, "two viewers of a replica, one upstream"
    replica = job.replicas["worker-0"]
    fast_events, late_events = fast.events(), late.events()
    assert isinstance(await anext(fast_events), JobUpdate)
    assert isinstance(await anext(late_events), JobUpdate)
    await add(replica, range(6))
    assert [x.seq for x in await next_lines(fast_events)] == [0, 1, 2, 3]
    assert [x.seq for x in await next_lines(fast_events)] == [4, 5]
    assert [x.seq for x in await next_lines(late_events)] == [3, 4, 5]
    for viewer in (fast, late):
        for task in viewer.close():
            await task
    assert job.replicas == {}, "the stream ends with its last viewer"


async def test_a_viewer_behind_what_is_kept_follows_on_its_own_stream_then_shares_again(
    small_kept: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    written = [line(seq) for seq in range(200)]
    streams: list[Any] = []

    class OwnStream:
        """A viewer's own stream of the replica's log from `since` (the real one follows the
        pod), reading ahead of the viewer at most 10 lines."""

        def __init__(self, feed: Any, name: str, since: int, wake: Any) -> None:
            self.next, self.stopped, self.taken = since, False, 0
            streams.append(self)

        def take(self, limit: int) -> list[LogLine]:
            lines = written[self.next : self.next + min(limit, 10)]
            self.next += len(lines)
            self.taken += len(lines)
            return lines

        exhausted = False

        async def stop(self) -> None:
            self.stopped = True

    monkeypatch.setattr(feeds, "CatchUp", OwnStream)
    job = FakeJobFeed()
    slow = FeedViewer(job, ["worker-0"], {"worker-0": 0}, max_batch=50)  # type: ignore[arg-type]
    replica = job.replicas["worker-0"]
    events = slow.events()
    await anext(events)  # the job
    await add(replica, range(200))  # far more than is kept while the viewer was away
    assert replica.kept_from > 150
    got = []
    while len(got) < 200:
        got += await next_lines(events)
    assert [x.seq for x in got] == list(range(200)), "every line once, in order"
    [stream] = streams
    assert stream.stopped, "its own stream stopped once the kept lines went on from there"
    # Only what was no longer kept (and the rest of the 10 it had read ahead).
    assert replica.kept_from <= stream.taken < replica.kept_from + 10
    for task in slow.close():
        await task


async def test_the_kept_lines_moving_on_while_a_viewers_own_stream_stops_skip_nothing(
    small_kept: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found by the Kubernetes fidelity test on a loaded machine: the viewer went on from where
    the kept lines began once its own stream had stopped, not from where it had got to."""
    written = [line(seq) for seq in range(400)]
    job = FakeJobFeed()

    class OwnStream:
        def __init__(self, feed: Any, name: str, since: int, wake: Any) -> None:
            self.next = since

        def take(self, limit: int) -> list[LogLine]:
            lines = written[self.next : self.next + limit]
            self.next += len(lines)
            return lines

        exhausted = False

        async def stop(self) -> None:  # meanwhile the replica reads on, past what is kept
            await add(job.replicas["worker-0"], range(200, 400))

    monkeypatch.setattr(feeds, "CatchUp", OwnStream)
    viewer = FeedViewer(job, ["worker-0"], {"worker-0": 0}, max_batch=50)  # type: ignore[arg-type]
    replica = job.replicas["worker-0"]
    events = viewer.events()
    await anext(events)  # the job
    await add(replica, range(200))
    got: list[LogLine] = []
    async with asyncio.timeout(10):  # without the fix, lines 200-399 never come
        while len(got) < 400:
            got += await next_lines(events)
    assert [x.seq for x in got] == list(range(400)), "every line once, in order"
    for task in viewer.close():
        await task


async def test_a_viewer_is_shown_a_replicas_unfinished_line_after_the_lines_it_can_take(
    small_kept: int,
) -> None:
    job = FakeJobFeed()
    viewer = FeedViewer(job, ["worker-0"], {"worker-0": 0}, max_batch=2)  # type: ignore[arg-type]
    replica = job.replicas["worker-0"]
    events = viewer.events()
    await anext(events)
    await add(replica, range(3))
    replica._set_partial(LogLine("worker-0", 3, 1003.0, "50%"))
    assert [x.seq for x in await next_lines(events)] == [0, 1]
    event = await anext(events)
    assert isinstance(event, LogBatch) and [x.seq for x in event.lines] == [2]
    event = await anext(events)
    assert isinstance(event, PartialUpdate) and event.lines[0].text == "50%"
    for task in viewer.close():
        await task


async def test_viewers_end_once_the_job_is_over_and_they_have_every_line(small_kept: int) -> None:
    job = FakeJobFeed()
    viewer = FeedViewer(job, ["worker-0"], {"worker-0": 0}, max_batch=100)  # type: ignore[arg-type]
    replica = job.replicas["worker-0"]
    await add(replica, range(3))
    job.finish()
    events = [event async for event in viewer.events()]
    assert [type(event) for event in events] == [JobUpdate, LogBatch]
    assert replica.done
    for task in viewer.close():
        await task


async def test_the_lines_a_jobs_replicas_print_together_reach_a_viewer_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A viewer is woken at once by the first line after a quiet spell; lines that follow within
    LINES_WAKE_SECONDS wake it once, together (at the interval's end, or with a status change
    sooner), not once a line: at 1,200 followed replicas a wake per line was most of the
    server's work."""
    monkeypatch.setattr(feeds, "LINES_WAKE_SECONDS", 3600.0)
    job = FakeJobFeed()
    names = ["worker-0", "worker-1", "worker-2"]
    viewer = FeedViewer(job, names, dict.fromkeys(names, 0), max_batch=100)  # type: ignore[arg-type]
    events = viewer.events()
    assert isinstance(await anext(events), JobUpdate)
    await add(job.replicas["worker-0"], range(1))
    assert [(x.replica, x.seq) for x in await next_lines(events)] == [("worker-0", 0)]
    waiting = asyncio.ensure_future(next_lines(events))
    for _ in range(5):
        await asyncio.sleep(0)  # the viewer has looked and waits
    for name in names:
        await add(job.replicas[name], range(1, 2) if name == "worker-0" else range(1))
        for _ in range(5):
            await asyncio.sleep(0)
    assert not waiting.done(), "lines within the interval wait for its end"
    job.changed.set()  # what changes a job's status wakes its viewers at once
    got = await waiting
    assert sorted((x.replica, x.seq) for x in got) == [
        ("worker-0", 1),
        ("worker-1", 0),
        ("worker-2", 0),
    ]
    for task in viewer.close():
        await task


async def test_a_batch_that_took_every_replica_to_its_end_is_not_followed_by_a_second_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each replica is looked at once a batch: what comes after the look wakes the viewer
    again, so a second look at once finds nothing (600 viewers x 8 replicas, after each
    batch). A full batch is looked past at once: more lines are waiting."""
    job = FakeJobFeed()
    names = ["worker-0", "worker-1"]
    viewer = FeedViewer(job, names, dict.fromkeys(names, 0), max_batch=4)  # type: ignore[arg-type]
    looks: list[str] = []
    take_from = FeedViewer._take_from

    async def counted(self: FeedViewer, replica: ReplicaFeed, room: int) -> list[LogLine]:
        looks.append(replica.name)
        return await take_from(self, replica, room)

    monkeypatch.setattr(FeedViewer, "_take_from", counted)
    events = viewer.events()
    assert isinstance(await anext(events), JobUpdate)
    await add(job.replicas["worker-0"], range(1))
    assert [x.seq for x in await next_lines(events)] == [0]
    waiting = asyncio.ensure_future(next_lines(events))
    for _ in range(5):
        await asyncio.sleep(0)  # it looked again (the line came after its wake) and waits
    looks.clear()
    await add(job.replicas["worker-0"], range(1, 2))
    assert [x.seq for x in await waiting] == [1]
    waiting = asyncio.ensure_future(next_lines(events))
    for _ in range(5):
        await asyncio.sleep(0)
    assert sorted(looks) == names, "one look at each replica"
    assert not waiting.done()
    await add(job.replicas["worker-1"], range(6))
    assert [x.seq for x in await waiting] == [0, 1, 2, 3]  # full: looked past at once
    assert [x.seq for x in await next_lines(events)] == [4, 5]
    for task in viewer.close():
        await task


async def test_lines_within_the_wake_interval_wake_the_viewers_at_its_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(feeds, "LINES_WAKE_SECONDS", 0.01)
    changed = Broadcast()
    first = changed.next()
    changed.set_soon()
    assert first.is_set(), "the first line wakes at once"
    second = changed.next()
    changed.set_soon()
    changed.set_soon()
    async with asyncio.timeout(10):
        await second.wait()
    assert not changed.next().is_set()


async def test_lines_of_many_jobs_at_once_wake_their_viewers_a_few_jobs_a_loop_iteration() -> None:
    """After a pause, lines of every job come at once: their viewers are woken
    WAKES_PER_ITERATION jobs an iteration, so the loop's timers and sockets come between."""
    broadcasts = [Broadcast() for _ in range(5 * feeds.WAKES_PER_ITERATION + 3)]
    woken = [b.next() for b in broadcasts]
    for broadcast in broadcasts:
        broadcast.set_soon()
        broadcast.set_soon()  # a second line before its turn: still one wake
    counts = [sum(event.is_set() for event in woken)]
    while counts[-1] < len(broadcasts):
        await asyncio.sleep(0)  # one loop iteration
        counts.append(sum(event.is_set() for event in woken))
        assert len(counts) < 20
    steps = [b - a for a, b in zip([0, *counts], counts, strict=False)]
    assert steps[0] == feeds.WAKES_PER_ITERATION
    assert max(steps) <= feeds.WAKES_PER_ITERATION and len(steps) >= 6
    assert [b.next().is_set() for b in broadcasts] == [False] * len(broadcasts)


async def test_a_running_jobs_feed_does_not_ask_why_it_waits() -> None:
    """The pending job's reason is polled every few seconds; a running job's feed skips the
    poll's whole work (describing the job again: 3 % of a server following 150 jobs)."""
    from distrun.core.job import JobState

    asked: list[str] = []

    class Source:
        def describe_job(self, *args: Any) -> Any:
            asked.append("describe")
            return type("Job", (), {"state": JobState.PENDING})()

        async def waiting_reason(self, *args: Any) -> str | None:
            asked.append("reason")
            return "waiting for a node"

    feed: Any = type("Feed", (), {})()
    feed.source, feed.api, feed.obj, feed.spec, feed.pods, feed.restarts = (
        Source(), None, {}, None, {}, {},
    )  # fmt: skip
    feed.waiting, feed.updates = None, 0
    feed._update = lambda: setattr(feed, "updates", feed.updates + 1)
    feed.job = type("Job", (), {"state": JobState.RUNNING})()
    await feeds.JobFeed._refresh_waiting(feed)
    assert asked == [], "running, nothing said before: nothing to do"
    feed.job = type("Job", (), {"state": JobState.PENDING})()
    await feeds.JobFeed._refresh_waiting(feed)
    assert asked == ["describe", "reason"] and feed.waiting == "waiting for a node"
    assert feed.updates == 1


async def test_feeds_started_together_look_again_at_different_moments(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A server's feeds start together when its viewers reconnect; looking again in step, they
    # would wake every viewer in one loop iteration every RECHECK_SECONDS.
    sleeps: list[list[float]] = []

    async def recorded_sleep(seconds: float) -> None:
        sleeps[-1].append(seconds)
        if len(sleeps[-1]) == 3:
            raise asyncio.CancelledError

    monkeypatch.setattr(feeds.asyncio, "sleep", recorded_sleep)
    for _ in range(20):
        sleeps.append([])
        feed: Any = type("Feed", (), {})()
        feed.changed = Broadcast()
        woken = feed.changed.next()
        with pytest.raises(asyncio.CancelledError):
            await feeds.JobFeed._recheck(feed)
        assert woken.is_set()
    firsts = [first for first, *_ in sleeps]
    assert all(0 <= first <= feeds.RECHECK_SECONDS for first in firsts)
    assert max(firsts) - min(firsts) > feeds.RECHECK_SECONDS / 4  # spread over the interval
    assert all(rest == [feeds.RECHECK_SECONDS] * 2 for _, *rest in sleeps)
