"""Nothing lost: every line of every replica reaches a reader exactly once and in order, whatever
the replicas write and however often the reader disconnects or the server is replaced.

Unfinished lines (progress bars being redrawn) reach the reader as partial updates between
the lines: each for a line not received yet, never shifting or repeating a finished line's seq.

`DISTRUN_FIDELITY_LINES` sets the lines per replica (200,000 by default, as issue 6 asks);
`DISTRUN_FIDELITY_SEED` replays a run (the seed is in every failure message).
"""

import asyncio
import os
import random
import time
from contextlib import aclosing

import pytest

from distrun.core.job import Job, JobState
from distrun.core.logs import JobUpdate, LogBatch, PartialUpdate
from distrun.engines.local.engine import LocalEngine

from .helpers import NUMBERED_LINES_CODE, WAIT, EngineFactory, SequenceChecker, spec
from .numbered_lines import BAR_EVERY

pytestmark = pytest.mark.integration

REPLICAS = 8
RESUMES = 5
LINES_PER_REPLICA = int(os.environ.get("DISTRUN_FIDELITY_LINES", "200000"))


def fidelity_seed() -> int:
    return int(os.environ.get("DISTRUN_FIDELITY_SEED") or random.randrange(1 << 30))


async def test_eight_flat_out_replicas_reach_a_resuming_reader_exactly_once_across_a_restart(
    make_local_engine: EngineFactory,
) -> None:
    seed = fidelity_seed()
    rng = random.Random(seed)
    engine: LocalEngine = make_local_engine()
    env = {"FIDELITY_LINES": str(LINES_PER_REPLICA), "FIDELITY_SEED": str(seed)}
    job = await engine.submit(spec(NUMBERED_LINES_CODE, replicas=REPLICAS, env=env), "alice")
    replicas = [replica.name for replica in job.replicas]
    total = REPLICAS * LINES_PER_REPLICA
    # Five disconnects and one server replacement, each after a random number of lines.
    stops = sorted(rng.sample(range(1, total), RESUMES + 1))
    replace_server_at = rng.randrange(len(stops))
    checker = SequenceChecker(replicas)
    last: Job = job
    mid_run_stops = 0
    started = time.monotonic()

    for segment, stop in enumerate([*stops, None]):
        async with aclosing(engine.follow(job.id, "alice", since=checker.cursor())) as events:
            async for event in events:
                if isinstance(event, LogBatch):
                    checker.check(event.lines)
                    if stop is not None and checker.received >= stop:
                        break
                elif isinstance(event, PartialUpdate):
                    checker.check_partial(event.lines)
                elif isinstance(event, JobUpdate):
                    last = event.job
        if stop is None:
            break
        mid_run_stops += not last.state.terminal
        if segment == replace_server_at:
            await engine.close()
            engine = make_local_engine()  # a new server over the same state directory
        await asyncio.sleep(rng.random() * 0.2)  # away for a while; the replicas write on
        assert time.monotonic() - started < 5 * WAIT, f"too slow (seed {seed})"

    elapsed = time.monotonic() - started
    print(
        f"\n{total:,} lines from {REPLICAS} replicas in {elapsed:.1f} s, "
        f"{RESUMES} resumes and 1 server replacement ({mid_run_stops} while running), seed {seed}"
    )
    assert last.state == JobState.SUCCEEDED, f"{last.reason} (seed {seed})"
    assert checker.next_seq == dict.fromkeys(replicas, LINES_PER_REPLICA), f"seed {seed}"
    if LINES_PER_REPLICA > BAR_EVERY:  # progress bars were drawn: their states were seen
        assert checker.partials > 0, f"no unfinished line was seen (seed {seed})"
    assert checker.received == total
