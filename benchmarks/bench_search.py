"""What a sweep that learns saves: TPE against random search, and ASHA against running every
trial to its end, each beside its baseline in the same run.

    python benchmarks/bench_search.py [--seeds 10] [--budget 500] [--asha-trials 24]

1. Search (core/search.py, the searches a sweep's runner asks and tells, no jobs): on a noisy
   2-D Branin (optimum 0.397887, Gaussian noise sd 0.05 on what the search sees) and a 4-D
   function with one categorical (Hartmann-3 times a factor the categorical picks, optimum
   -3.86278 only with the first value, noise sd 0.05), how many trials each search needs until
   the true value of a trial's point is within 5 % of the optimum, two trials in flight (as
   `%parallel=2`: TPE asks the next while one still runs, Optuna's constant liar). Median over
   the seeds; a search that never gets there within the budget counts as budget + 1 (">").
2. ASHA (core/early_stop.py in the runner, client/sweep_runner.py): the same sweep of
   `--asha-trials` trials on the local engine, 3 at a time, each trial a process whose every
   step costs 0.3 s (27 steps), its loss a known function of its parameter (the points in a
   shuffled order, the same in both runs); once with every
   trial run to its end, once with %earlyStop=asha:1:3. Wall time of each, and whether the
   best trial of the full run is the best of the ASHA run too. 24 trials by default: the
   first trials at a rung have few to be compared with and go on, so a sweep of a dozen
   trials saves less (docs/sweeps.md gives both).
"""

import argparse
import asyncio
import math
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import require_local_engine, use_repo_package

NOISE = 0.05
WITHIN = 0.05  # of the optimum
PARALLEL = 2

BRANIN_OPTIMUM = 0.397887
HARTMANN_OPTIMUM = -3.86278
FACTORS = {"a": 1.0, "b": 0.9, "c": 0.8, "d": 0.6}
_A = [[3.0, 10, 30], [0.1, 10, 35], [3.0, 10, 30], [0.1, 10, 35]]
_P = [
    [0.3689, 0.1170, 0.2673],
    [0.4699, 0.4387, 0.7470],
    [0.1091, 0.8732, 0.5547],
    [0.03815, 0.5743, 0.8828],
]
_ALPHA = [1.0, 1.2, 3.0, 3.2]


def branin(p: dict[str, Any]) -> float:
    x, y = p["x"], p["y"]
    b, c = 5.1 / (4 * math.pi**2), 5 / math.pi
    return float((y - b * x**2 + c * x - 6) ** 2 + 10 * (1 - 1 / (8 * math.pi)) * math.cos(x) + 10)


def hartmann_choice(p: dict[str, Any]) -> float:
    xs = (p["x1"], p["x2"], p["x3"])
    total = 0.0
    for alpha, a_row, p_row in zip(_ALPHA, _A, _P, strict=True):
        total += alpha * math.exp(
            -sum(a * (x - q) ** 2 for a, x, q in zip(a_row, xs, p_row, strict=True))
        )
    return -total * FACTORS[p["kind"]]


def spaces() -> dict[str, tuple[Any, Callable[[dict[str, Any]], float], float]]:
    from distrun.core.sweep import Choice, Param, Uniform

    return {
        "noisy Branin (2-D)": (
            (Param("x", Uniform(-5.0, 10.0)), Param("y", Uniform(0.0, 15.0))),
            branin,
            BRANIN_OPTIMUM,
        ),
        "Hartmann-3 x categorical (4-D)": (
            (
                Param("x1", Uniform(0.0, 1.0)),
                Param("x2", Uniform(0.0, 1.0)),
                Param("x3", Uniform(0.0, 1.0)),
                Param("kind", Choice(tuple(FACTORS))),
            ),
            hartmann_choice,
            HARTMANN_OPTIMUM,
        ),
    }


def trials_to_reach(
    search_name: str,
    params: Any,
    function: Callable[[dict[str, Any]], float],
    optimum: float,
    seed: int,
    budget: int,
) -> int:
    """Trials until one's true value is within WITHIN of `optimum`, PARALLEL in flight."""
    from distrun.core.search import searcher
    from distrun.core.sweep import Objective, SweepSpec, check

    spec = SweepSpec(
        params,
        search=search_name,  # type: ignore[arg-type]
        trials=budget,
        parallel=PARALLEL,
        objective=Objective("value", "min"),
        seed=seed,
    )
    check(spec)
    search = searcher(spec)
    noise = random.Random(seed + 10**6)
    in_flight: list[tuple[int, dict[str, Any]]] = []
    for number in range(budget):
        proposal = search.ask(number)
        if abs(function(proposal.params) - optimum) <= WITHIN * abs(optimum):
            return number + 1
        in_flight.append((number, proposal.params))
        if len(in_flight) == PARALLEL:
            done, point = in_flight.pop(0)
            seen = function(point) + noise.gauss(0, NOISE)
            search.tell(done, "complete", [(1, seen)], seen)
    return budget + 1


def bench_searches(seeds: int, budget: int) -> None:
    print(
        f"1. Trials until within {WITHIN:.0%} of the optimum ({seeds} seeds, budget {budget}, "
        f"{PARALLEL} in flight, noise sd {NOISE})"
    )
    for name, (params, function, optimum) in spaces().items():
        counts: dict[str, list[int]] = {"random": [], "tpe": []}
        started = time.monotonic()
        for seed in range(seeds):
            for search_name, found in counts.items():
                found.append(trials_to_reach(search_name, params, function, optimum, seed, budget))
        medians = {s: statistics.median(c) for s, c in counts.items()}
        print(f"  {name}  ({time.monotonic() - started:.0f} s)")
        for search_name, found in counts.items():
            missed = sum(c > budget for c in found)
            shown = " ".join(str(c) if c <= budget else f">{budget}" for c in found)
            print(
                f"    {search_name:6}  median {_count(medians[search_name], budget):>6}  "
                f"(missed {missed}/{seeds})  per seed: {shown}"
            )
        ratio = medians["tpe"] / medians["random"]
        bound = " at most" if medians["random"] > budget else ""
        print(f"    tpe / random: {ratio:.2f}{bound} (goal: at most 0.5)")


def _count(value: float, budget: int) -> str:
    return f">{budget}" if value > budget else f"{value:g}"


# --- ASHA on real jobs -----------------------------------------------------------------------

STEPS = 27
STEP_SECONDS = 0.3
ASHA_CODE = f"""\
import time
import distrun
p = distrun.params(q=0.5)
for step in range(1, {STEPS + 1}):
    time.sleep({STEP_SECONDS})
    loss = (p["q"] - 0.37) ** 2 + 1.0 / step
    print(f"step {{step}} loss={{loss:.6f}}", flush=True)
"""


async def asha_sweep(client: Any, trials: int, asha: bool) -> tuple[float, Any]:
    from distrun.client.sweep_runner import SweepRun
    from distrun.core.spec import JobSpec
    from distrun.core.sweep import EarlyStop, Objective, Param, SweepSpec, Values

    template = JobSpec.from_dict(
        {"framework": "generic", "code": ASHA_CODE, "roles": {"worker": {"replicas": 1}}}
    )
    # In an order of no pattern (a sweep in increasing quality would keep every trial).
    points = [round((k + 0.5) / trials, 4) for k in range(trials)]
    random.Random(1).shuffle(points)
    sweep = SweepSpec(
        params=(Param("q", Values(tuple(points))),),
        parallel=3,
        objective=Objective("loss", "min"),
        early_stop=EarlyStop("asha", 1, reduction=3) if asha else None,
    )
    run = SweepRun(client, template, sweep)
    started = time.monotonic()
    await run.run()
    return time.monotonic() - started, run


async def bench_asha(trials: int, repetitions: int) -> None:
    from distrun.client.engine_client import EngineClient

    print(
        f"2. ASHA (asha:1:3) against every trial to its end: {trials} trials on the local "
        f"engine, 3 at a time, {STEPS} steps of {STEP_SECONDS} s each"
    )
    with tempfile.TemporaryDirectory() as state:
        client = EngineClient(state_dir=Path(state))
        await asha_sweep(client, 3, asha=False)  # warm-up: imports, the first supervisor
        walls: dict[bool, list[float]] = {False: [], True: []}
        steps: dict[bool, list[int]] = {False: [], True: []}
        same_best = []
        for _ in range(repetitions):
            full_wall, full = await asha_sweep(client, trials, asha=False)
            asha_wall, cut = await asha_sweep(client, trials, asha=True)
            walls[False].append(full_wall)
            walls[True].append(asha_wall)
            full_best, cut_best = full.best(), cut.best()
            same_best.append(
                full_best is not None
                and cut_best is not None
                and full_best.params == cut_best.params
                and cut_best.state == "succeeded"
            )
            stopped = sum(t.state == "stopped" for t in cut.trials)
            steps[False].append(_steps_run(full))
            steps[True].append(_steps_run(cut))
            print(
                f"  run: every trial {full_wall:.1f} s ({steps[False][-1]} steps), asha "
                f"{asha_wall:.1f} s ({steps[True][-1]} steps, {stopped} of {trials} stopped), "
                f"best {full_best.params if full_best else '-'} / "
                f"{cut_best.params if cut_best else '-'}"
            )
        await client.close()
    full_median, asha_median = statistics.median(walls[False]), statistics.median(walls[True])
    print(
        f"  median wall: every trial {full_median:.1f} s, asha {asha_median:.1f} s: "
        f"{full_median / asha_median:.2f}x less (goal: at least 2x); steps run "
        f"{statistics.median(steps[False]) / statistics.median(steps[True]):.2f}x fewer; the "
        f"best trial found by asha in {sum(same_best)}/{repetitions} runs"
    )


def _steps_run(run: Any) -> int:
    """The steps the trials reported: what they cost, whatever the machine's load."""
    return sum(int(trial.history[-1][0]) for trial in run.trials if trial.history)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--budget", type=int, default=500)
    parser.add_argument("--asha-trials", type=int, default=24)
    parser.add_argument("--asha-repetitions", type=int, default=2)
    parser.add_argument("--only", choices=("search", "asha"))
    args = parser.parse_args()
    use_repo_package()
    if args.only != "asha":
        bench_searches(args.seeds, args.budget)
    if args.only != "search":
        require_local_engine()
        asyncio.run(bench_asha(args.asha_trials, args.asha_repetitions))
