"""What a progress bar costs the server and a viewer's connection, against the same output
written as lines.

    python benchmarks/bench_progress_bars.py [--replicas 4] [--seconds 10] [--repetitions 3]

Each replica of a generic job writes 100 updates a second for `--seconds`: a bar redrawn in
place (`\\r`, as tqdm or Keras draw it) in the measured run, the same text ending in `\\n` in
the baseline run. One websocket viewer follows the job through a real jupyter_server with the
local engine. Measured per replica and second of output: the server process's CPU time (from
/proc, during the output only) and the bytes the websocket delivered. The engine passes an
unfinished line on at most every 0.25 s, so the bar should cost no more than the lines; the
target is within 2x of the baseline on both.
"""

import argparse
import asyncio
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from _common import BenchServer, median, skip, use_repo_package

RUN_TIMEOUT = 120.0
UPDATES_PER_SECOND = 100

REPLICA_CODE = """\
import os, sys, time
from pathlib import Path

seconds = float(os.environ["BENCH_SECONDS"])
end = "\\r" if os.environ["BENCH_MODE"] == "bar" else "\\n"
start_file = Path(os.environ["BENCH_START_FILE"])
print("ready", flush=True)
while not start_file.exists():
    time.sleep(0.002)
updates = int(seconds * 100)
began = time.monotonic()
for i in range(updates):
    done = 40 * (i + 1) // updates
    text = f"epoch 1: {100 * (i + 1) // updates:3d}%|{'#' * done:<40}| {i + 1}/{updates} loss={1 / (i + 1):.4f}"
    sys.stdout.write(("\\r" + text) if end == "\\r" else (text + "\\n"))
    sys.stdout.flush()
    time.sleep(max(0.0, began + (i + 1) / 100 - time.monotonic()))
print("\\nfinished", flush=True)
"""


@dataclass(frozen=True)
class Cost:
    cpu_seconds: float  # the server's, during the output
    bytes_received: int  # over the websocket, during the output
    messages: int


def server_cpu_seconds(pid: int) -> float:
    """utime + stime of the process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def one_run(server: BenchServer, mode: str, replicas: int, seconds: float, tmp: Path) -> Cost:
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    start_file = tmp / f"start-{mode}-{time.monotonic_ns()}"
    spec = {
        "framework": "generic",
        "name": f"bars-{mode}",
        "roles": {"worker": {"replicas": replicas}},
        "code": REPLICA_CODE,
        "env": {
            "BENCH_SECONDS": str(seconds),
            "BENCH_MODE": mode,
            "BENCH_START_FILE": str(start_file),
        },
    }
    status, job = await server.request("POST", "/distrun/jobs", {"spec": spec})
    if status != 201:
        skip(f"POST /distrun/jobs answered {status}:\n{server.log_tail()}")
    url = server.url.replace("http", "ws", 1) + f"/distrun/jobs/{job['id']}/logs/stream"
    from distrun.core.stream_versions import STREAM_PROTOCOLS

    connection = await websocket_connect(
        HTTPRequest(url, headers=server.headers()), subprotocols=list(STREAM_PROTOCOLS)
    )
    assert server.process is not None
    ready = finished = received = messages = 0
    cpu_before = 0.0
    while (frame := await asyncio.wait_for(connection.read_message(), RUN_TIMEOUT)) is not None:
        message = json.loads(frame)
        if message["type"] == "runs":
            texts = [text for run in message["runs"] for text in run["texts"]]
            ready += texts.count("ready")
            finished += texts.count("finished")
            if ready == replicas and not start_file.exists():
                cpu_before = server_cpu_seconds(server.process.pid)
                start_file.touch()
                continue
        if start_file.exists() and finished < replicas:
            received += len(frame)
            messages += 1
        if finished == replicas:
            break
    cpu = server_cpu_seconds(server.process.pid) - cpu_before
    connection.close()
    return Cost(cpu, received, messages)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    use_repo_package()
    runs: dict[str, list[Cost]] = {"bar": [], "lines": []}
    with tempfile.TemporaryDirectory(prefix="distrun-bench-bars-") as tmp:
        server = BenchServer(Path(tmp))
        try:
            server.launch()
            await server.wait_until_ready()
            for _ in range(args.repetitions):
                for mode in ("lines", "bar"):
                    runs[mode].append(
                        await one_run(server, mode, args.replicas, args.seconds, Path(tmp))
                    )
        finally:
            server.stop()
    per = args.replicas * args.seconds
    print(
        f"{args.replicas} replicas x {args.seconds:g} s x {UPDATES_PER_SECOND} updates/s, one "
        f"websocket viewer; median of {args.repetitions} runs (per replica and second of output)"
    )
    print(f"{'':34}{'server CPU':>14}{'bytes sent':>14}{'messages':>10}")
    results = {}
    for mode, title in (("lines", "lines (baseline)"), ("bar", "a bar redrawn in place")):
        cpu = median([r.cpu_seconds for r in runs[mode]]) / per
        sent = median([r.bytes_received for r in runs[mode]]) / per
        count = median([r.messages for r in runs[mode]]) / per
        results[mode] = (cpu, sent)
        print(f"{title:34}{cpu * 1000:11.2f} ms{sent:11,.0f} B{count:10.1f}")
    cpu_ratio = results["bar"][0] / results["lines"][0]
    bytes_ratio = results["bar"][1] / results["lines"][1]
    print(f"{'bar / lines':34}{cpu_ratio:13.2f}x{bytes_ratio:13.2f}x   (target: both <= 2x)")
    for mode in ("lines", "bar"):
        spread = ", ".join(f"{r.cpu_seconds / per * 1000:.2f}" for r in runs[mode])
        print(f"  {mode} server CPU per run (ms per replica-second): {spread}")


if __name__ == "__main__":
    asyncio.run(main())
