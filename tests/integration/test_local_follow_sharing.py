"""Followers of one job share the reading of its logs, and each still gets every line once."""

import asyncio
from collections.abc import Callable
from contextlib import aclosing
from typing import Any

import pytest

from distrun.core.job import Job
from distrun.core.logs import LogBatch
from distrun.engines.local import capabilities, inotify
from distrun.engines.local.engine import LocalEngine
from tests.reliability.helpers import spec

pytestmark = pytest.mark.integration

WAIT = 60.0
LINES = 300
# Two replicas print numbered lines slowly enough that followers sit at the head.
SLOW_CODE = f"""
    import os, sys, time
    for i in range({LINES}):
        print(os.environ["DISTRUN_REPLICA"], i, flush=True)
        time.sleep(0.01)
"""


class Collector:
    """Every batch one follower received, in order."""

    def __init__(self) -> None:
        self.batches: list[LogBatch] = []

    @property
    def lines(self) -> int:
        return sum(len(batch.lines) for batch in self.batches)

    def texts_by_replica(self) -> dict[str, list[str]]:
        result: dict[str, list[str]] = {}
        for batch in self.batches:
            for line in batch.lines:
                result.setdefault(line.replica, []).append(line.text)
        return result

    def seqs_by_replica(self) -> dict[str, list[int]]:
        result: dict[str, list[int]] = {}
        for batch in self.batches:
            for line in batch.lines:
                result.setdefault(line.replica, []).append(line.seq)
        return result


async def collect(engine: LocalEngine, job: Job, into: Collector, **kwargs: Any) -> None:
    async with aclosing(engine.follow(job.id, "alice", **kwargs)) as events:
        async for event in events:
            if isinstance(event, LogBatch):
                into.batches.append(event)


async def wait_until(check: Callable[[], bool], what: str) -> None:
    async def poll() -> None:
        while not check():
            await asyncio.sleep(0.01)

    try:
        await asyncio.wait_for(poll(), WAIT)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


def every_line_once(collector: Collector, first: int = 0) -> bool:
    expected = {f"worker-{r}": [f"worker-{r} {i}" for i in range(first, LINES)] for r in range(2)}
    return collector.texts_by_replica() == expected


def shared(batches: list[LogBatch], others: list[LogBatch]) -> list[LogBatch]:
    ids = {id(batch) for batch in others}
    return [batch for batch in batches if id(batch) in ids]


async def test_followers_at_the_same_cursor_receive_the_same_batch_objects(
    local_engine: LocalEngine,
) -> None:
    job = await local_engine.submit(spec(SLOW_CODE, replicas=2), "alice")
    first, second = Collector(), Collector()
    await asyncio.wait_for(
        asyncio.gather(collect(local_engine, job, first), collect(local_engine, job, second)),
        WAIT,
    )
    assert every_line_once(first) and every_line_once(second)
    assert len(shared(second.batches, first.batches)) == len(second.batches)
    assert local_engine._watchers == {}


async def test_a_late_follower_catches_up_on_its_own_then_shares_the_head(
    local_engine: LocalEngine,
) -> None:
    job = await local_engine.submit(spec(SLOW_CODE, replicas=2), "alice")
    early, late = Collector(), Collector()
    reading = asyncio.create_task(collect(local_engine, job, early))
    await wait_until(lambda: early.lines >= 100, "the first 100 lines")
    await asyncio.wait_for(collect(local_engine, job, late), WAIT)
    await asyncio.wait_for(reading, WAIT)
    assert every_line_once(early) and every_line_once(late)
    caught_up = shared(late.batches, early.batches)
    assert caught_up, "the late follower never joined the shared head"
    assert late.batches[-1] is caught_up[-1]
    assert late.batches[0] not in caught_up  # its first batch was its own catch-up read


async def test_followers_of_a_subset_or_ahead_of_the_head_read_on_their_own_without_loss(
    local_engine: LocalEngine,
) -> None:
    job = await local_engine.submit(spec(SLOW_CODE, replicas=2), "alice")
    everything, one_replica, ahead = Collector(), Collector(), Collector()
    since = {"worker-0": 200, "worker-1": 250}
    await asyncio.wait_for(
        asyncio.gather(
            collect(local_engine, job, everything),
            collect(local_engine, job, one_replica, replicas={"worker-1"}),
            collect(local_engine, job, ahead, since=since),
        ),
        WAIT,
    )
    assert every_line_once(everything)
    assert one_replica.seqs_by_replica() == {"worker-1": list(range(LINES))}
    assert ahead.seqs_by_replica() == {
        "worker-0": list(range(200, LINES)),
        "worker-1": list(range(250, LINES)),
    }
    assert not shared(one_replica.batches, everything.batches)


async def test_following_without_inotify_polls_and_still_gets_every_line(
    make_local_engine: Callable[..., LocalEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inotify.Inotify, "create", classmethod(lambda cls: None))
    engine = make_local_engine()
    job = await engine.submit(spec(SLOW_CODE, replicas=2), "alice")
    first, second = Collector(), Collector()
    await asyncio.wait_for(
        asyncio.gather(collect(engine, job, first), collect(engine, job, second)), WAIT
    )
    assert every_line_once(first) and every_line_once(second)
    assert engine._inotify_instance is None and engine._watchers == {}


async def test_the_last_follower_leaving_removes_every_inotify_watch(
    local_engine: LocalEngine,
) -> None:
    if not capabilities.current().inotify:
        pytest.skip("inotify is on its portable path here (DISTRUN_LOCAL_PORTABLE): no watches")
    jobs = [await local_engine.submit(spec(SLOW_CODE, replicas=2), "alice") for _ in range(3)]
    collectors = [Collector() for _ in jobs]
    await asyncio.wait_for(
        asyncio.gather(
            *(collect(local_engine, j, c) for j, c in zip(jobs, collectors, strict=True))
        ),
        WAIT,
    )
    assert all(every_line_once(collector) for collector in collectors)
    assert local_engine._inotify_instance is not None  # Linux: watched, not polled
    assert local_engine._inotify_handlers == {} and local_engine._watchers == {}
