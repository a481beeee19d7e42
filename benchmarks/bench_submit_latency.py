"""Submit-to-first-log-line latency of a 3-replica generic job through the local engine, against
the floor: the same 3 Python processes started from a fixed shell script.

    python benchmarks/bench_submit_latency.py [--repetitions 7]

Both sides run the same one-line program per replica. For each we time, from the moment we ask
for the job, the first line any replica prints and the moment every replica has printed its line.
The local engine's first line is also split into where its time went, from the job's own
records: submit to the supervisor starting the replicas (status `started_at`), to the first
line captured (its log time), to the first line received by the follower.
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

REPLICAS = 3
REPLICA_CODE = 'import os\nprint("hello from", os.environ.get("RANK", "?"), flush=True)\n'
# Fixed text; the interpreter and the program path arrive as arguments, never interpolated.
SHELL_LAUNCHER = 'for r in 0 1 2; do RANK=$r "$0" "$1" & done; wait'


def bare_processes(script: Path) -> tuple[float, float]:
    """Seconds to the first line and to every replica's line, straight from a shell script."""
    start = time.perf_counter()
    launcher = subprocess.Popen(
        ["/bin/sh", "-c", SHELL_LAUNCHER, sys.executable, str(script)], stdout=subprocess.PIPE
    )
    assert launcher.stdout is not None
    launcher.stdout.readline()
    first = time.perf_counter() - start
    for _ in range(REPLICAS - 1):
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
    engine: "Engine", owner: str, breakdowns: list[Breakdown] | None = None
) -> tuple[float, float]:
    from distrun.core.logs import LogBatch
    from distrun.core.spec import JobSpec

    spec = JobSpec.from_dict(
        {"framework": "generic", "roles": {"worker": {"replicas": REPLICAS}}, "code": REPLICA_CODE}
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
            if every is None and len(seen) == REPLICAS:
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
    args = parser.parse_args()
    use_repo_package()
    require_local_engine()
    from distrun.core.spec import Limits

    local_engine_class = importlib.import_module("distrun.engines.local").LocalEngine

    with tempfile.TemporaryDirectory(prefix="distrun-bench-") as tmp:
        script = Path(tmp) / "replica.py"
        script.write_text(REPLICA_CODE)
        engine = local_engine_class(Path(tmp) / "state", Limits())
        bare_processes(script)  # warm the page cache for both sides
        await through_local_engine(engine, "bench")
        bare, local = [], []
        breakdowns: list[Breakdown] = []
        for _ in range(args.repetitions):
            bare.append(bare_processes(script))
            local.append(await through_local_engine(engine, "bench", breakdowns))
        await engine.close()

    print(f"submit-to-first-log-line, {REPLICAS} replicas, median of {args.repetitions} runs")
    print(f"{'':24}{'first line':>14}{'every replica':>16}")
    for name, runs in (("bare shell + python", bare), ("local engine", local)):
        first, every = median([r[0] for r in runs]), median([r[1] for r in runs])
        print(f"{name:24}{ms(first):>14}{ms(every):>16}")
    overhead = median([r[0] for r in local]) - median([r[0] for r in bare])
    print(f"local engine overhead on the first line: {ms(overhead).strip()}")
    if breakdowns:
        started = median([b.to_started for b in breakdowns])
        captured = median([b.to_captured for b in breakdowns])
        received = median([b.to_received for b in breakdowns])
        print(
            f"local engine first line, from submit (medians; log times have 1 ms resolution): "
            f"replicas started {ms(started).strip()}, first line captured "
            f"{ms(captured).strip()}, received {ms(received).strip()}"
        )


if __name__ == "__main__":
    asyncio.run(main())
