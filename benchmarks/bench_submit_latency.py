"""Submit-to-first-log-line latency of an N-replica generic job (3 by default) through the local
engine, against the floor: the same N Python processes started from a fixed shell script.

    python benchmarks/bench_submit_latency.py [--repetitions 7] [--replicas 3]

Both sides run the same one-line program per replica. For each we time, from the moment we ask
for the job, the first line any replica prints and the moment every replica has printed its line.
The local engine runs three ways: warm (its next job's supervisor started and waiting, with the
first replica's interpreter started ahead beside it, as after a person's pause between runs: the
benchmark waits a second before each submission), warm without that interpreter
(`waiting_interpreters=0`: every replica's interpreter starts on the submit), and cold (an
engine without a waiting supervisor: every job starts its own interpreter first). The
engine's first line is also split into where its time went, from the job's own records: submit
to the supervisor starting the replicas (status `started_at`), to the first line captured (its
log time), to the first line received by the follower.
"""

import argparse
import asyncio
import importlib
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from _common import median, ms, require_local_engine, skip, use_repo_package

if TYPE_CHECKING:
    from distrun.engines.protocol import Engine

REPLICA_CODE = 'import os\nprint("hello from", os.environ.get("RANK", "?"), flush=True)\n'
# Fixed text; the interpreter, the program path and the count arrive as arguments, never
# interpolated.
SHELL_LAUNCHER = 'r=0; while [ $r -lt "$2" ]; do RANK=$r "$0" "$1" & r=$((r+1)); done; wait'
PAUSE_SECONDS = 1.0  # before each warm submission: the next supervisor is up by then


def bare_processes(script: Path, replicas: int) -> tuple[float, float]:
    """Seconds to the first line and to every replica's line, straight from a shell script."""
    start = time.perf_counter()
    launcher = subprocess.Popen(
        ["/bin/sh", "-c", SHELL_LAUNCHER, sys.executable, str(script), str(replicas)],
        stdout=subprocess.PIPE,
    )
    assert launcher.stdout is not None
    launcher.stdout.readline()
    first = time.perf_counter() - start
    for _ in range(replicas - 1):
        launcher.stdout.readline()
    every = time.perf_counter() - start
    launcher.wait()
    return first, every


@dataclass(frozen=True)
class Breakdown:
    """Seconds of the local engine's first line: submit to replicas started, to the first line
    captured by the supervisor, to that line received by the follower."""

    to_started: float
    to_captured: float
    to_received: float


async def through_local_engine(
    engine: "Engine", owner: str, replicas: int, breakdowns: list[Breakdown] | None = None
) -> tuple[float, float]:
    from distrun.core.logs import LogBatch
    from distrun.core.spec import JobSpec

    spec = JobSpec.from_dict(
        {"framework": "generic", "roles": {"worker": {"replicas": replicas}}, "code": REPLICA_CODE}
    )
    start = time.perf_counter()
    wall_start = time.time()
    job = await engine.submit(spec, owner)
    first: float | None = None
    every: float | None = None
    captured: float | None = None
    received_at = 0.0
    seen: set[str] = set()
    async for event in engine.follow(job.id, owner):
        if isinstance(event, LogBatch) and event.lines:
            now = time.perf_counter() - start
            if first is None:
                first, received_at = now, time.time()
                captured = min(line.time for line in event.lines)
            seen.update(line.replica for line in event.lines)
            if every is None and len(seen) == replicas:
                every = now
    final = await engine.get_job(job.id, owner)
    if final.state.value != "succeeded":
        skip(f"the benchmark job did not succeed: {final.state.value}, {final.reason}")
    if first is None or every is None or captured is None:
        skip(f"the benchmark job's replicas did not all print: {sorted(seen)}")
    if breakdowns is not None and final.started_at is not None:
        breakdowns.append(
            Breakdown(
                final.started_at - wall_start, captured - wall_start, received_at - wall_start
            )
        )
    return first, every


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=7)
    parser.add_argument("--replicas", type=int, default=3)
    args = parser.parse_args()
    use_repo_package()
    require_local_engine()
    from distrun.core.spec import Limits

    local_engine_class = importlib.import_module("distrun.engines.local").LocalEngine
    replicas = args.replicas

    with tempfile.TemporaryDirectory(prefix="distrun-bench-") as tmp:
        script = Path(tmp) / "replica.py"
        script.write_text(REPLICA_CODE)
        warm = local_engine_class(Path(tmp) / "warm", Limits())
        no_interpreter = local_engine_class(
            Path(tmp) / "no-interpreter", Limits(), waiting_interpreters=0
        )
        cold = local_engine_class(Path(tmp) / "cold", Limits(), warm_supervisor=False)
        bare_processes(script, replicas)  # warm the page cache for every side
        await through_local_engine(cold, "bench", replicas)
        bare, warm_runs, no_interpreter_runs, cold_runs = [], [], [], []
        warm_parts: list[Breakdown] = []
        no_interpreter_parts: list[Breakdown] = []
        cold_parts: list[Breakdown] = []
        for _ in range(args.repetitions):
            bare.append(bare_processes(script, replicas))
            cold_runs.append(await through_local_engine(cold, "bench", replicas, cold_parts))
            for engine, runs, parts in (
                (warm, warm_runs, warm_parts),
                (no_interpreter, no_interpreter_runs, no_interpreter_parts),
            ):
                await engine.prepare()
                await asyncio.sleep(PAUSE_SECONDS)
                runs.append(await through_local_engine(engine, "bench", replicas, parts))
        for engine in (warm, no_interpreter, cold):
            await engine.close()

    print(f"submit-to-first-log-line, {replicas} replicas, median of {args.repetitions} runs")
    print(f"{'':36}{'first line':>14}{'every replica':>16}{'ratio':>8}")
    floor = median([r[0] for r in bare])
    sides = (
        ("bare shell + python", bare),
        ("local engine, warm", warm_runs),
        ("local engine, warm, no interpreter", no_interpreter_runs),
        ("local engine, cold", cold_runs),
    )
    for name, runs in sides:
        first, every = median([r[0] for r in runs]), median([r[1] for r in runs])
        print(f"{name:36}{ms(first):>14}{ms(every):>16}{first / floor:>7.2f}x")
    for name, parts in (
        ("warm", warm_parts),
        ("warm, no interpreter", no_interpreter_parts),
        ("cold", cold_parts),
    ):
        started = median([b.to_started for b in parts])
        captured = median([b.to_captured for b in parts])
        received = median([b.to_received for b in parts])
        print(
            f"{name}: from submit (medians; log times have 1 ms resolution): replicas started "
            f"{ms(started).strip()}, first line captured {ms(captured).strip()}, received "
            f"{ms(received).strip()}"
        )


if __name__ == "__main__":
    asyncio.run(main())
