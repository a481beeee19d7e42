"""The chaos tier: real PyTorch DDP over gloo through the local engine, a random replica killed
with SIGKILL at random moments three times in one run. The job recovers by itself (whole-job
restart, resume from the last checkpoint) and ends with exactly the weights of a run that was
never disturbed."""

import asyncio
import json
import os
import random
import re
import signal
import time
from collections import defaultdict
from contextlib import aclosing
from pathlib import Path

import pytest

from distrun.core.checkpoint_env import IMPORTS_FILE
from distrun.core.job import JobState
from distrun.core.logs import JobUpdate, LogBatch
from distrun.core.spec import JobSpec
from distrun.engines.local.engine import LocalEngine

from .harness import OWNER, assert_succeeded, describe, example_code, needs_module, run_to_end

pytestmark = [pytest.mark.integration, pytest.mark.training, needs_module("torch")]

KILLS = 3
STEPS = 60
SEED = int(os.environ.get("DISTRUN_CHAOS_SEED", "20261126"))
STARTS_RE = re.compile(r"^rank 0 starts at step (\d+) \(restart (\d+)\)$")
STEP_RE = re.compile(r"^step (\d+) loss=")
SHA_RE = re.compile(r"^weights_sha=([0-9a-f]{64})$")
AHEAD_RE = re.compile(r"^\[distrun\] \S+ starts in an interpreter that imported the job's \d+ ")


def chaos_spec() -> JobSpec:
    return JobSpec.from_dict(
        {
            "framework": "pytorch",
            "name": "chaos",
            # Two ranks: gloo's ring all-reduce then adds a + b, the same bits in any layout.
            # With three, an element's sum order follows its place in DDP's bucket, which DDP
            # rebuilds after the first step of every process: a resumed run would differ from
            # an undisturbed one in the last bits, though not in the loss it prints.
            "roles": {"master": {"replicas": 1}, "worker": {"replicas": 1}},
            "code": example_code("pytorch_ddp_checkpoint.py"),
            "env": {
                "OMP_NUM_THREADS": "1",
                "TRAIN_STEPS": str(STEPS),
                "CHECKPOINT_EVERY": "5",
                "STEP_SECONDS": "0.05",
            },
            "max_restarts": KILLS,
        }
    )


def recorded_a_while_ago(record: Path, since: float) -> bool:
    """Whether this run recorded its imports a second ago or more: the supervisor has started
    the next run's interpreters by then (restart_interpreters.py)."""
    try:
        written = record.stat().st_mtime
    except FileNotFoundError:
        return False
    return since - 0.1 <= written <= time.time() - 1.0


def final_shas(printed: dict[str, list[str]]) -> set[str]:
    return {m[1] for lines in printed.values() for line in lines if (m := SHA_RE.match(line))}


@pytest.mark.timeout(1800)
async def test_three_random_kills_recover_to_the_undisturbed_runs_exact_weights(
    unniced_engine: LocalEngine,
) -> None:
    local_engine = unniced_engine
    undisturbed, quiet = await run_to_end(local_engine, chaos_spec(), timeout=900)
    assert_succeeded(undisturbed, quiet)
    expected = final_shas(quiet)
    assert len(expected) == 1, f"the ranks disagree: {expected}"

    rng = random.Random(SEED)
    job = await local_engine.submit(chaos_spec(), OWNER)
    printed: dict[str, list[str]] = defaultdict(list)
    progress = {"restart": -1, "start": 0, "step": -1}  # of rank 0 in the newest run
    run_started = [0.0]  # when rank 0 of the newest run said where it starts
    record = local_engine._jobs_dir / job.id / "checkpoints" / IMPORTS_FILE
    last = job

    async def follow() -> None:
        nonlocal last
        async with aclosing(local_engine.follow(job.id, OWNER)) as events:
            async for event in events:
                if isinstance(event, JobUpdate):
                    last = event.job
                    continue
                if not isinstance(event, LogBatch):
                    continue
                for line in event.lines:
                    printed[line.replica].append(line.text)
                    if line.replica != "master-0":
                        continue
                    if started := STARTS_RE.match(line.text):
                        progress.update(start=int(started[1]), restart=int(started[2]), step=-1)
                        run_started[0] = time.time()
                    elif stepped := STEP_RE.match(line.text):
                        progress["step"] = int(stepped[1])

    following = asyncio.create_task(follow())
    killed = []
    try:
        async with asyncio.timeout(900):
            for kill in range(KILLS):
                steps_in = rng.randint(6, 14)  # a random moment, past one checkpoint of this run
                while not (
                    progress["restart"] == kill
                    and progress["step"] >= progress["start"] + steps_in
                    and recorded_a_while_ago(record, since=run_started[0])
                ):
                    assert not following.done(), f"the job ended early\n{describe(printed)}"
                    await asyncio.sleep(0.01)
                victim = rng.choice(["master-0", "worker-0"])
                status = json.loads((local_engine._jobs_dir / job.id / "status.json").read_text())
                os.kill(status["pids"][victim], signal.SIGKILL)
                killed.append((victim, progress["step"]))
            await following
    finally:
        following.cancel()
    final = await local_engine.get_job(job.id, OWNER)

    assert_succeeded(final, printed)
    assert final.attempt == KILLS + 1, describe(printed)
    failures = [e for e in final.timeline if e.kind == "failed"]
    assert [(e.replica, e.signal) for e in failures] == [(v, "SIGKILL") for v, _ in killed]
    resumed = [e.step for e in final.timeline if e.kind == "resumed"]
    assert len(resumed) == KILLS, (resumed, killed)
    assert final_shas(printed) == expected, f"kills {killed}\n{describe(printed)}"
    # Every replica restarted in an interpreter that imported the job's modules ahead
    # (restart_interpreters.py), and the weights above are still exactly the undisturbed run's.
    ahead = {r: sum(AHEAD_RE.match(line) is not None for line in printed[r]) for r in printed}
    assert all(count == KILLS for count in ahead.values()), (ahead, describe(printed))
    assert last.state == JobState.SUCCEEDED
