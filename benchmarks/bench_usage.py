"""What sampling each replica's usage costs: the supervisor's CPU with sampling against the same
job without, and the log websocket's throughput with usage messages against without.

    python benchmarks/bench_usage.py [--replicas 8] [--children 2] [--seconds 20]
        [--lines-per-replica 40000] [--repetitions 3] [--only sampling|stream]

Sampling: a job of 8 replicas, each a sleeping Python process with 2 sleeping children (a
DataLoader's workers, say: 24 processes to read), on the local engine with `usage_interval`
1.0 and 0 (no sampling), interleaved. Once every replica is up, the supervisor's CPU time
(user + system, from psutil) is read at the start and the end of a `--seconds` window; its
CPU per second of wall time is compared. The goal: sampling costs at most 1 % of one core per
8 replicas.

Stream: 8 replicas print `--lines-per-replica` lines flat out (bench_log_stream.py's job),
followed through a real jupyter_server over the websocket, once by a client of version 3
(usage messages, sampling on) and once by a client of version 2 with sampling off (a second
server configured with `usage_interval` 0), interleaved. The goal: throughput within 5 %.
"""

import argparse
import asyncio
import tempfile
import time
from contextlib import aclosing
from pathlib import Path

from _common import BenchServer, median, require_local_engine, skip, use_repo_package

SAMPLED_CODE = """\
import os, subprocess, sys, time
children = [
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    for _ in range(int(os.environ["BENCH_CHILDREN"]))
]
print("ready", flush=True)
time.sleep(600)
"""


async def supervisor_cpu_per_second(
    state_dir: Path, interval: float, replicas: int, children: int, seconds: float
) -> float:
    """The supervisor's CPU seconds per wall second over `seconds`, once every replica is up."""
    import psutil

    from distrun.core.logs import LogBatch
    from distrun.core.spec import JobSpec, Limits
    from distrun.engines.local.engine import LocalEngine
    from distrun.engines.local.jobdir import JobFiles, read_json

    engine = LocalEngine(state_dir, Limits(), usage_interval=interval, warm_supervisor=False)
    spec = JobSpec.from_dict(
        {
            "framework": "generic",
            "roles": {"worker": {"replicas": replicas}},
            "code": SAMPLED_CODE,
            "env": {"BENCH_CHILDREN": str(children)},
        }
    )
    job = await engine.submit(spec, "bench")
    try:
        ready = 0
        async with aclosing(engine.follow(job.id, "bench")) as events:
            async for event in events:
                if isinstance(event, LogBatch):
                    ready += sum(line.text == "ready" for line in event.lines)
                    if ready == replicas:
                        break
        await asyncio.sleep(1.0)  # the children are up, the first samples taken
        pid = read_json(JobFiles(state_dir / "jobs" / job.id).supervisor)["pid"]
        supervisor = psutil.Process(pid)
        before, started = supervisor.cpu_times(), time.monotonic()
        await asyncio.sleep(seconds)
        after, ended = supervisor.cpu_times(), time.monotonic()
    finally:
        await engine.cancel(job.id, "bench")
        await engine.close()
    used = (after.user + after.system) - (before.user + before.system)
    return used / (ended - started)


async def sampling(args: argparse.Namespace, root: Path) -> None:
    require_local_engine()
    on: list[float] = []
    off: list[float] = []
    for run in range(args.repetitions):
        for interval, results in ((1.0, on), (0.0, off)):
            state = root / f"sampling-{run}-{interval}"
            results.append(
                await supervisor_cpu_per_second(
                    state, interval, args.replicas, args.children, args.seconds
                )
            )
    processes = args.replicas * (1 + args.children)
    print(
        f"Sampling: {args.replicas} replicas ({processes} processes), {args.seconds:g} s "
        f"windows, {args.repetitions} runs each, interleaved"
    )
    print(f"  supervisor CPU, sampling every 1 s: {_percent(on)}")
    print(f"  supervisor CPU, no sampling:        {_percent(off)}")
    cost = median(on) - median(off)
    per_8 = cost * 8 / args.replicas
    print(
        f"  sampling costs {cost * 100:.2f} % of one core (medians), {per_8 * 100:.2f} % per 8 "
        f"replicas: goal <= 1 % {'met' if per_8 <= 0.01 else 'NOT met'}"
    )


def _percent(values: list[float]) -> str:
    runs = ", ".join(f"{v * 100:.2f}" for v in values)
    return f"median {median(values) * 100:.2f} % of one core ({runs})"


async def stream(args: argparse.Namespace, root: Path) -> None:
    import bench_log_stream as logs
    from distrun.core.stream_versions import STREAM_PROTOCOLS, V3_USAGE

    without = {"local": {"class": "distrun.engines.local.engine.LocalEngine",
                         "kwargs": {"usage_interval": 0}}}  # fmt: skip
    servers = {"on": BenchServer(root / "on"), "off": BenchServer(root / "off")}
    for name, server in servers.items():
        server.root.mkdir()
        server.launch(**({"engines": without} if name == "off" else {}))
    import psutil

    rates: dict[str, list[float]] = {"on": [], "off": []}
    cpu_per_line: dict[str, list[float]] = {"on": [], "off": []}
    usage_messages: list[int] = []
    try:
        for server in servers.values():
            await server.wait_until_ready()
        for run in range(args.repetitions):
            for name, protocols in (("on", [V3_USAGE]), ("off", list(STREAM_PROTOCOLS))):
                assert servers[name].process is not None
                server_process = psutil.Process(servers[name].process.pid)
                before = server_process.cpu_times()
                result = await logs.through_server(
                    servers[name],
                    args.lines_per_replica,
                    0.0,
                    root / f"start-{run}-{name}",
                    protocols=protocols,
                )
                after = server_process.cpu_times()
                used = (after.user + after.system) - (before.user + before.system)
                cpu_per_line[name].append(used / (logs.REPLICAS * args.lines_per_replica))
                rates[name].append(result.lines_per_second)
                if name == "on":
                    usage_messages.append(result.usage_messages)
    finally:
        for server in servers.values():
            server.stop()
    if not all(usage_messages):
        skip(f"a version 3 stream carried no usage message: {usage_messages}")
    print(
        f"Stream: {logs.REPLICAS} replicas x {args.lines_per_replica:,} lines flat out, "
        f"{args.repetitions} runs each, interleaved"
    )
    for name, title in (("on", "v3, sampling and usage messages"), ("off", "v2, no sampling")):
        runs = ", ".join(f"{r:,.0f}" for r in rates[name])
        print(f"  {title:33} median {median(rates[name]):10,.0f} lines/s ({runs})")
    ratio = median(rates["on"]) / median(rates["off"])
    print(
        f"  usage messages per run: {usage_messages}; on/off {ratio:.3f}: goal within 5 % "
        f"{'met' if ratio >= 0.95 else 'NOT met'}"
    )
    # The server's CPU per streamed line: what usage messages add to its work, steadier than
    # wall-clock throughput on a loaded machine.
    for name in ("on", "off"):
        runs = ", ".join(f"{c * 1e6:.2f}" for c in cpu_per_line[name])
        print(
            f"  server CPU per line, usage {name:3}: median {median(cpu_per_line[name]) * 1e6:.2f} us ({runs})"
        )
    cpu_ratio = median(cpu_per_line["on"]) / median(cpu_per_line["off"])
    print(f"  server CPU per line on/off: {cpu_ratio:.3f}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--children", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--lines-per-replica", type=int, default=40_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--only", choices=["sampling", "stream"])
    args = parser.parse_args()
    use_repo_package()
    with tempfile.TemporaryDirectory(prefix="distrun-bench-") as tmp:
        if args.only in (None, "sampling"):
            await sampling(args, Path(tmp))
        if args.only in (None, "stream"):
            await stream(args, Path(tmp))


if __name__ == "__main__":
    asyncio.run(main())
