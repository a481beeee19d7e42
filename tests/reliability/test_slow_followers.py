"""Slow, stalled and abandoned readers of a job's logs (followers of the engine).

A follower that reads slowly or not at all must not make the server hold more memory or slow
the other followers down; one that goes away (its generator closed, its task cancelled, or
simply dropped) must leave no task, file descriptor or poller behind.
"""

import asyncio
import gc
import random
import tracemalloc
from contextlib import aclosing

import pytest

from distrun.core.job import JobState
from distrun.core.logs import LogBatch
from distrun.core.spec import JobSpec
from distrun.engines.local.engine import LocalEngine

from .helpers import (
    NUMBERED_LINES_CODE,
    WAIT,
    EngineFactory,
    SequenceChecker,
    first_batch,
    follow_to_end,
    open_fds,
    read_all,
    spec,
    wait_until,
)

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


def numbered_job(replicas: int, lines: int) -> JobSpec:
    env = {"FIDELITY_LINES": str(lines), "FIDELITY_SEED": "11"}
    return spec(NUMBERED_LINES_CODE, replicas=replicas, env=env)


async def test_a_stalled_and_a_slow_follower_hold_no_memory_and_hold_up_no_one(
    local_engine: LocalEngine,
) -> None:
    lines = 40_000  # four replicas: about 6 MiB of log, long lines included
    job = await local_engine.submit(numbered_job(4, lines), "alice")
    names = [replica.name for replica in job.replicas]
    tracemalloc.start()
    try:
        stalled = local_engine.follow(job.id, "alice", max_batch=100)
        stalled_checker = SequenceChecker(names)
        stalled_checker.check((await first_batch(stalled)).lines)
        held_after_first_batch, _ = tracemalloc.get_traced_memory()

        slow_checker = SequenceChecker(names)

        async def read_slowly() -> None:
            async with aclosing(local_engine.follow(job.id, "alice", max_batch=100)) as events:
                async for event in events:
                    if isinstance(event, LogBatch):
                        slow_checker.check(event.lines)
                        await asyncio.sleep(0.01)

        slow = asyncio.create_task(read_slowly())
        fast_checker = SequenceChecker(names)
        async with aclosing(local_engine.follow(job.id, "alice")) as events:
            final = await asyncio.wait_for(read_all(events, fast_checker), WAIT)
        gc.collect()
        held_at_the_end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert final is not None and final.state == JobState.SUCCEEDED, final
    assert fast_checker.next_seq == dict.fromkeys(names, lines)
    # The fast follower got everything while the slow one was still at it and the stalled one
    # sat on its first batch.
    assert not slow.done() and slow_checker.received < fast_checker.received
    assert stalled_checker.received <= 100
    written = sum(
        (local_engine._jobs_dir / job.id / "logs" / f"{name}.log").stat().st_size for name in names
    )
    growth = held_at_the_end - held_after_first_batch
    print(
        f"\n{written / MiB:.1f} MiB written while stalled; memory held grew {growth / MiB:.2f} MiB"
    )
    assert written > 5 * MiB
    assert growth < 2 * MiB

    # The stalled follower, woken at last, still gets every line exactly once.
    async with aclosing(stalled) as events:
        final = await asyncio.wait_for(read_all(events, stalled_checker), WAIT)
    assert stalled_checker.next_seq == dict.fromkeys(names, lines)
    slow.cancel()
    await asyncio.gather(slow, return_exceptions=True)
    assert local_engine._watchers == {}


async def test_followers_closed_cancelled_or_dropped_mid_stream_leave_nothing_behind(
    make_local_engine: EngineFactory,
) -> None:
    # Without a supervisor waiting for the next job: its pipe would count as a descriptor left.
    local_engine = make_local_engine(warm_supervisor=False)
    # Enough log to be mid-read when cancelled: long lines make each read take a while.
    job = await local_engine.submit(numbered_job(4, 100_000), "alice")
    fds_before = open_fds()
    tasks_before = asyncio.all_tasks()
    rng = random.Random(3)

    async def read_forever() -> None:
        async for _ in local_engine.follow(job.id, "alice", max_batch=rng.choice((1, 50, 5000))):
            pass

    for round_ in range(60):
        how = round_ % 3
        if how == 0:  # the generator is closed after a few events
            events = local_engine.follow(job.id, "alice")
            async with aclosing(events):
                for _ in range(rng.randint(1, 5)):
                    await anext(events)
        elif how == 1:  # the task is cancelled at a random moment, reading or waiting
            task = asyncio.create_task(read_forever())
            for _ in range(rng.randint(0, 30)):
                await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        else:  # the generator is dropped without closing: the loop's finalizer closes it
            dropped = local_engine.follow(job.id, "alice")
            await anext(dropped)
            await anext(dropped)
            del dropped

    gc.collect()
    await wait_until(lambda: local_engine._watchers == {}, "every poller stopped", 15)
    await wait_until(lambda: open_fds() <= fds_before, "every log file closed", 15)
    left = lambda: asyncio.all_tasks() - tasks_before - {asyncio.current_task()}
    await wait_until(lambda: not left(), lambda: f"every task ended (left: {left()})", 15)
    final, _ = await follow_to_end(local_engine, job)
    assert final.state == JobState.SUCCEEDED, final.reason
    assert local_engine._watchers == {}
    assert open_fds() <= fds_before
