"""Recovery from failures on the local engine (issue 32), each figure beside its baseline
measured in the same run:

1. failure -> every replica running again (whole-job restart of 3 replicas; goal <= 1 s),
   beside submit -> every replica running for a fresh job;
2. failure -> training resumed at the checkpoint's step (PyTorch DDP, gloo, 3 replicas: the
   first step of the restarted run), beside submit -> first step of a fresh job;
3. goodput (useful steps / wall time) of a training run with 3 injected failures (SIGKILL of
   a random replica, each after a random quarter to half of the training time of its run, the
   same failures for every disturbed run) against the same run undisturbed (goal >= 0.85):
   restarted in interpreters that imported the job's modules ahead (restart_interpreters.py),
   restarted cold (an engine with no interpreters ahead, `waiting_interpreters=0`: what the
   engine did before), and restarting the job from scratch (no checkpoint: what users have
   without them).

    python benchmarks/bench_recovery.py [--repeat 5] [--steps 400] [--step-seconds 0.1]
        [--no-training] [--runs 1]
"""

import argparse
import asyncio
import json
import os
import random
import re
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

from _common import REPO, median, ms, require_local_engine, skip, use_repo_package

use_repo_package()

from distrun.core.job import Job, JobState
from distrun.core.logs import LogBatch
from distrun.core.spec import JobSpec, Limits
from distrun.engines.local.engine import LocalEngine

OWNER = "bench"
REPLICAS = ["master-0", "worker-0", "worker-1"]
ROLES = {"master": {"replicas": 1}, "worker": {"replicas": 2}}
WAITING = "import time\nprint('up', flush=True)\ntime.sleep(3600)\n"
STARTS_RE = re.compile(r"^rank 0 starts at step (\d+) \(restart (\d+)\)$")
STEP_RE = re.compile(r"^step (\d+) loss=")


def status_of(engine: LocalEngine, job_id: str) -> dict[str, Any]:
    return dict(json.loads((engine._jobs_dir / job_id / "status.json").read_text()))


async def poll(check: Callable[[], Any], timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = check()
        except (OSError, ValueError, KeyError):
            found = None
        if found:
            return found
        await asyncio.sleep(0.002)
    raise TimeoutError("the engine did not get there in time")


def all_running_since(engine: LocalEngine, job_id: str, attempt: int) -> float | None:
    """When the last replica of `attempt` started, once every one runs."""
    status = status_of(engine, job_id)
    replicas = status["replicas"]
    if status.get("attempt", 1) != attempt or any(r["state"] != "running" for r in replicas):
        return None
    return float(max(r["started_at"] for r in replicas))


async def restart_latency(engine: LocalEngine, repeat: int) -> tuple[list[float], list[float]]:
    waiting = {"framework": "pytorch", "roles": ROLES, "code": WAITING}
    spec = JobSpec.from_dict({**waiting, "max_restarts": repeat})
    fresh = []
    for _ in range(repeat):
        submitted = time.time()
        job = await engine.submit(JobSpec.from_dict(waiting), OWNER)
        fresh.append(await poll(lambda j=job: all_running_since(engine, j.id, 1)) - submitted)
        await engine.cancel(job.id, OWNER)
    job = await engine.submit(spec, OWNER)
    await poll(lambda: all_running_since(engine, job.id, 1))
    restarts = []
    for attempt in range(2, repeat + 2):
        victim = status_of(engine, job.id)["pids"]["worker-1"]
        killed = time.time()
        os.kill(victim, signal.SIGKILL)
        running = await poll(lambda a=attempt: all_running_since(engine, job.id, a))
        restarts.append(running - killed)
    await engine.cancel(job.id, OWNER)
    return fresh, restarts


def training_spec(steps: int, step_seconds: float, checkpoints: bool, kills: int) -> JobSpec:
    code = (REPO / "examples" / "pytorch_ddp_checkpoint.py").read_text()
    return JobSpec.from_dict(
        {
            "framework": "pytorch",
            "name": "recovery",
            "roles": ROLES,
            "code": code,
            "env": {
                "OMP_NUM_THREADS": "1",
                "TRAIN_STEPS": str(steps),
                "CHECKPOINT_EVERY": "10" if checkpoints else str(steps + 1),
                "STEP_SECONDS": str(step_seconds),
            },
            "max_restarts": kills,
        }
    )


async def train(
    engine: LocalEngine, spec: JobSpec, offsets: list[float], victims: list[str]
) -> tuple[Job, float, list[float], float]:
    """Runs `spec` to its end, killing `victims[k]` once the k-th run has trained for
    `offsets[k]` seconds; the job, its wall time (submit to end), failure -> first step of the
    next run for each kill, and submit -> first step."""
    submitted = time.time()
    job = await engine.submit(spec, OWNER)
    progress = {"restart": -1, "start": 0, "step": -1}
    first_step: dict[int, float] = {}  # restart -> when its first step was printed

    async def follow() -> None:
        async with aclosing(engine.follow(job.id, OWNER)) as events:
            async for event in events:
                if not isinstance(event, LogBatch):
                    continue
                for line in event.lines:
                    if line.replica != "master-0":
                        continue
                    if started := STARTS_RE.match(line.text):
                        progress.update(start=int(started[1]), restart=int(started[2]), step=-1)
                    elif stepped := STEP_RE.match(line.text):
                        progress["step"] = int(stepped[1])
                        first_step.setdefault(progress["restart"], line.time)

    following = asyncio.create_task(follow())
    killed_at = []
    for kill, (offset, victim) in enumerate(zip(offsets, victims, strict=True)):

        def reached(kill: int = kill, offset: float = offset) -> bool:
            began = first_step.get(kill)
            return (
                progress["restart"] == kill and began is not None and time.time() >= began + offset
            )

        await poll(reached, timeout=1800)
        pid = status_of(engine, job.id)["pids"][victim]
        killed_at.append(time.time())
        os.kill(pid, signal.SIGKILL)
    await following
    final = await engine.get_job(job.id, OWNER)
    wall = (final.finished_at or time.time()) - submitted
    resumed = [first_step[k + 1] - killed for k, killed in enumerate(killed_at)]
    return final, wall, resumed, first_step[0] - submitted


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="restarts measured in part 1")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--step-seconds", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--no-training", action="store_true", help="part 1 only (no torch)")
    parser.add_argument("--runs", type=int, default=1, help="repeat part 2 and 3 (spread)")
    args = parser.parse_args()
    require_local_engine()
    if not args.no_training:
        try:
            import torch  # noqa: F401
        except ImportError:
            skip("torch is not installed (pip install -e '.[training]')")
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as state:
        # nice=0: on a shared, busy machine niced replicas importing torch would starve.
        engine = LocalEngine(Path(state) / "ahead", Limits(), grace_seconds=1.0, nice=0)
        cold = LocalEngine(
            Path(state) / "cold", Limits(), grace_seconds=1.0, nice=0, waiting_interpreters=0
        )
        try:
            fresh, restarts = await restart_latency(engine, args.repeat)
            print(f"1. whole-job restart of 3 replicas, {args.repeat} times (median):")
            print(f"   failure -> every replica running again {ms(median(restarts))}")
            print(f"   baseline: submit -> every replica running {ms(median(fresh))}")
            if args.no_training:
                return
            for run in range(args.runs):
                print(f"run {run + 1} of {args.runs}, load average {os.getloadavg()[0]:.2f}")
                await training_runs(engine, cold, args, rng)
        finally:
            await engine.close()
            await cold.close()


async def training_runs(
    engine: LocalEngine, cold: LocalEngine, args: argparse.Namespace, rng: random.Random
) -> None:
    """Parts 2 and 3: the same failures for every disturbed run, a random replica after a
    random quarter to half of the run's training time in each run."""
    training = args.steps * args.step_seconds
    offsets = [rng.uniform(0.25, 0.5) * training for _ in range(3)]
    victims = [rng.choice(REPLICAS) for _ in range(3)]
    runs = {}
    for name, on, checkpoints, kills in (
        ("undisturbed", engine, True, 0),
        ("3 failures, ahead", engine, True, 3),
        ("3 failures, cold restarts", cold, True, 3),
        ("3 failures, from scratch", cold, False, 3),
    ):
        spec = training_spec(args.steps, args.step_seconds, checkpoints, kills)
        final, wall, resumed, first = await train(on, spec, offsets[:kills], victims[:kills])
        if final.state != JobState.SUCCEEDED:
            raise SystemExit(f"{name}: the job {final.state.value}: {final.reason}")
        runs[name] = (wall, resumed, first)
    base_wall, _, base_first = runs["undisturbed"]
    print(f"2. DDP over gloo, 3 replicas, {args.steps} steps of >= {args.step_seconds} s:")
    for name in ("3 failures, ahead", "3 failures, cold restarts"):
        resumed = runs[name][1]
        print(
            f"   {name}: failure -> training resumed at the checkpoint "
            f"{ms(median(resumed))} (median; {', '.join(ms(r) for r in resumed)})"
        )
    print(f"   baseline: submit -> first step of a fresh job {ms(base_first)}")
    print("3. goodput (the same useful steps / wall time), against undisturbed:")
    for name, (wall, _, _) in runs.items():
        print(f"   {name:26s} {wall:7.1f} s  goodput {base_wall / wall:5.2f}")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
