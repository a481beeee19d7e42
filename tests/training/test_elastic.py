"""`%elastic` on the local engine with real PyTorch DDP over gloo under torch's elastic agent: a
replica killed mid-training, the others re-form the group without it and go on, the replica
restarted by distrun rejoins, and the job succeeds with the loss still going down."""

import asyncio
import json
import os
import re
import signal
from collections import defaultdict
from contextlib import aclosing

import pytest

from distrun.core.logs import LogBatch
from distrun.core.spec import JobSpec
from distrun.engines.local.engine import LocalEngine

from .harness import OWNER, assert_succeeded, describe, example_code, needs_module

pytestmark = [pytest.mark.integration, pytest.mark.training, needs_module("torch")]

STEP_RE = re.compile(r"^step (\d+) world (\d+) loss=([0-9.]+(?:e[-+]?\d+)?)$")
VICTIM = "worker-1"


def elastic_spec() -> JobSpec:
    return JobSpec.from_dict(
        {
            "framework": "pytorch",
            "name": "elastic",
            "roles": {"master": {"replicas": 1}, "worker": {"replicas": 2}},
            "elastic": "2:3",
            "code": example_code("pytorch_elastic.py"),
            "env": {
                "OMP_NUM_THREADS": "1",
                "TRAIN_STEPS": "600",
                "CHECKPOINT_EVERY": "5",
                "STEP_SECONDS": "0.1",
            },
        }
    )


def steps_of(lines: list[str]) -> list[tuple[int, int, float]]:
    """(step, world size, loss) of every step a replica trained, the first time it trained it
    (a re-formed group goes on from the last checkpoint: a few steps twice)."""
    seen: dict[int, tuple[int, int, float]] = {}
    for line in lines:
        if match := STEP_RE.match(line):
            seen.setdefault(int(match[1]), (int(match[1]), int(match[2]), float(match[3])))
    return [seen[step] for step in sorted(seen)]


@pytest.mark.timeout(1200)
async def test_a_killed_replica_leaves_the_group_going_on_and_rejoins_when_restarted(
    unniced_engine: LocalEngine,
) -> None:
    engine = unniced_engine
    job = await engine.submit(elastic_spec(), OWNER)
    printed: dict[str, list[str]] = defaultdict(list)
    worlds: list[int] = []  # the group's size at each step printed, in the order printed

    async def follow() -> None:
        async with aclosing(engine.follow(job.id, OWNER)) as events:
            async for event in events:
                if isinstance(event, LogBatch):
                    for line in event.lines:
                        printed[line.replica].append(line.text)
                        if line.replica == "master-0" and (match := STEP_RE.match(line.text)):
                            worlds.append(int(match[2]))

    following = asyncio.create_task(follow())
    try:
        async with asyncio.timeout(900):
            while worlds.count(3) < 20:  # trained a while with every replica
                assert not following.done(), f"the job ended early\n{describe(printed)}"
                await asyncio.sleep(0.05)
            status = json.loads((engine._jobs_dir / job.id / "status.json").read_text())
            os.killpg(status["pids"][VICTIM], signal.SIGKILL)  # the agent and its training
            killed_at = len(worlds)
            await following
    finally:
        following.cancel()
    final = await engine.get_job(job.id, OWNER)

    assert_succeeded(final, printed)
    after = worlds[killed_at:]
    assert 2 in after, f"the others went on without {VICTIM}\n{describe(printed)}"
    assert 3 in after[after.index(2) :], f"{VICTIM} rejoined\n{describe(printed)}"
    failures = [e for e in final.timeline if e.kind == "failed"]
    assert [e.replica for e in failures] == [VICTIM]
    steps = steps_of(printed["master-0"])
    assert [step for step, _, _ in steps] == list(range(600)), "every step trained"
    losses = [loss for _, _, loss in steps]
    first, last = sum(losses[:20]) / 20, sum(losses[-20:]) / 20
    assert last < first / 4, f"the loss went down: {first:.4f} -> {last:.4f}"
