"""What a sweep costs over running its trials by hand: the same short trials on the local engine,
two at a time, once as a sweep (client/sweep_runner.py: every line of each trial's first replica
parsed for the objective, the median rule judged at each report) and once by a plain loop that
submits a job and follows it to its end in each of two slots.

    python benchmarks/bench_sweep.py [--trials 8] [--repetitions 3]

For each we time the whole run and the scheduling gap: how long after a trial ends the trial
that takes its slot is created (from the engine's own records, `finished_at` and `created_at`).
"""

import argparse
import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from _common import median, ms, require_local_engine, use_repo_package

if TYPE_CHECKING:
    from distrun.client.engine_client import EngineClient

PARALLEL = 2
TRIAL_CODE = """\
import time
import distrun
lr = distrun.params(lr=0.1)["lr"]
loss = 1.0
for step in range(1, 6):
    loss *= 1 - lr
    print(f"step {step} loss={loss:.6f}", flush=True)
    time.sleep(0.05)
"""


def template() -> Any:
    from distrun.core.spec import JobSpec

    return JobSpec.from_dict(
        {"framework": "generic", "code": TRIAL_CODE, "roles": {"worker": {"replicas": 1}}}
    )


def rates(trials: int) -> list[float]:
    return [round(0.05 * (i + 1), 4) for i in range(trials)]


async def as_sweep(client: "EngineClient", trials: int) -> list[str]:
    from distrun.client.sweep_runner import SweepRun
    from distrun.core.sweep import Objective, Param, SweepSpec, Values

    sweep = SweepSpec(
        params=(Param("lr", Values(tuple(rates(trials)))),),
        parallel=PARALLEL,
        objective=Objective("loss", "min"),
    )
    run = SweepRun(client, template(), sweep)
    done = await run.run()
    return [trial.job_id for trial in done if trial.job_id is not None]


async def by_hand(client: "EngineClient", trials: int) -> list[str]:
    """Two slots, each submitting the next job and following it to its end."""
    import dataclasses

    from distrun.client.base import StatusEvent
    from distrun.core.trial_env import params_env

    queue = list(rates(trials))
    ids: list[str] = []

    async def slot() -> None:
        while queue:
            lr = queue.pop(0)
            spec = template()
            spec = dataclasses.replace(spec, env={**spec.env, **params_env({"lr": lr})})
            job = await client.submit(spec)
            ids.append(job["id"])
            async for event in client.follow(job["id"]):
                if isinstance(event, StatusEvent) and event.job["state"] in (
                    "succeeded",
                    "failed",
                    "cancelled",
                ):
                    break

    await asyncio.gather(*(slot() for _ in range(PARALLEL)))
    return ids


async def measure(
    client: "EngineClient", run: Callable[["EngineClient", int], Awaitable[list[str]]], trials: int
) -> tuple[float, list[float]]:
    """(wall seconds, scheduling gaps in seconds)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    ids = await run(client, trials)
    wall = loop.time() - start
    jobs = [await client.get_job(job_id) for job_id in ids]
    for job in jobs:
        assert job["state"] == "succeeded", job
    starts = sorted(job["created_at"] for job in jobs)
    ends = sorted(job["finished_at"] for job in jobs)
    gaps = [starts[k] - ends[k - PARALLEL] for k in range(PARALLEL, len(jobs))]
    return wall, gaps


async def main(trials: int, repetitions: int) -> None:
    from distrun.client.engine_client import EngineClient

    with tempfile.TemporaryDirectory() as state:
        client = EngineClient(state_dir=Path(state))
        results: dict[str, list[tuple[float, list[float]]]] = {"sweep": [], "by hand": []}
        await measure(client, by_hand, PARALLEL)  # warm-up: imports, the first supervisor
        for _ in range(repetitions):
            results["sweep"].append(await measure(client, as_sweep, trials))
            results["by hand"].append(await measure(client, by_hand, trials))
        await client.close()
    print(f"{trials} trials of a 1-replica job, {PARALLEL} at a time, {repetitions} runs each")
    summary = {}
    for name, runs in results.items():
        walls = [wall for wall, _ in runs]
        gaps = [gap for _, run_gaps in runs for gap in run_gaps]
        summary[name] = (median(walls), median(gaps))
        print(
            f"  {name:8}  wall median {median(walls):6.2f} s (runs {min(walls):.2f}-"
            f"{max(walls):.2f})   gap median {ms(median(gaps))} (max {ms(max(gaps))})"
        )
    (sweep_wall, sweep_gap), (hand_wall, hand_gap) = summary["sweep"], summary["by hand"]
    print(
        f"  sweep / by hand: wall {sweep_wall / hand_wall:.2f}x, "
        f"gap {ms(sweep_gap - hand_gap)} more per trial"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    use_repo_package()
    require_local_engine()
    asyncio.run(main(args.trials, args.repetitions))
