"""Log streaming through a real jupyter_server with the distrun extension, against the floor:
the same replica processes read straight from their pipes.

    python benchmarks/bench_log_stream.py [--lines-per-replica 10000] [--repetitions 3]

Eight replicas of one generic job each print lines carrying their write time (`time.time()`).
The server side is the whole path a user meets: the local engine captures the lines, the
websocket `/distrun/jobs/{id}/logs/stream` sends them, a client here receives them. Latency is
receipt time minus write time per line; throughput is lines received per second from the start
signal to the last line. Two loads: flat out (every replica writes as fast as it can) and paced
(each replica writes 200 lines per second, so latency is not queueing behind a backlog). The
replicas print "ready" and wait for a start file, so both sides measure only the streaming.
"""

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import (
    BenchServer,
    median,
    ms,
    percentile,
    skip,
    use_repo_package,
)

REPLICAS = 8
PACED_INTERVAL = 0.005  # seconds between lines of one replica: 200 lines/s each
PACED_LINES = 400  # two seconds
RUN_TIMEOUT = 100.0

REPLICA_CODE = """\
import os, sys, time
from pathlib import Path

lines = int(os.environ["BENCH_LINES"])
interval = float(os.environ["BENCH_INTERVAL"])
start_file = Path(os.environ["BENCH_START_FILE"])
print("ready", flush=True)
give_up = time.time() + 60
while not start_file.exists():
    if time.time() > give_up:
        sys.exit("no start signal within 60 s")
    time.sleep(0.002)
padding = "x" * 60
for i in range(lines):
    sys.stdout.write(f"{time.time():.6f} {i:08d} {padding}\\n")
    sys.stdout.flush()
    if interval:
        time.sleep(interval)
"""


@dataclass
class Receiver:
    """Counts what one run received; touches the start file once every replica is ready."""

    start_file: Path
    expected: int
    ready: int = 0
    started_at: float = 0.0
    last_at: float = 0.0
    latencies: list[float] = field(default_factory=list)
    usage_messages: int = 0  # version 3's, where offered

    def receive(self, texts: list[str], now: float) -> None:
        for text in texts:
            if text == "ready":
                self.ready += 1
                if self.ready == REPLICAS:
                    self.started_at = time.time()
                    self.start_file.touch()
            elif text[:1].isdigit():
                self.latencies.append(now - float(text.split(" ", 1)[0]))
                self.last_at = now

    @property
    def done(self) -> bool:
        return len(self.latencies) >= self.expected

    def result(self) -> "Result":
        return Result(
            p50=percentile(self.latencies, 0.50),
            p99=percentile(self.latencies, 0.99),
            lines_per_second=len(self.latencies) / max(self.last_at - self.started_at, 1e-9),
            usage_messages=self.usage_messages,
        )


@dataclass(frozen=True)
class Result:
    p50: float
    p99: float
    lines_per_second: float
    usage_messages: int = 0


def replica_env(lines: int, interval: float, start_file: Path) -> dict[str, str]:
    return {
        "BENCH_LINES": str(lines),
        "BENCH_INTERVAL": str(interval),
        "BENCH_START_FILE": str(start_file),
    }


async def through_pipes(lines: int, interval: float, start_file: Path) -> Result:
    receiver = Receiver(start_file, REPLICAS * lines)
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **replica_env(lines, interval, start_file)}
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", REPLICA_CODE, env=env, stdout=asyncio.subprocess.PIPE
        )
        for _ in range(REPLICAS)
    ]

    async def read(process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        partial = b""
        while chunk := await process.stdout.read(1 << 16):
            now = time.time()
            *complete, partial = (partial + chunk).split(b"\n")
            receiver.receive([line.decode() for line in complete], now)
        await process.wait()

    try:
        await asyncio.wait_for(asyncio.gather(*(read(p) for p in processes)), RUN_TIMEOUT)
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
    return receiver.result()


async def through_server(
    server: BenchServer,
    lines: int,
    interval: float,
    start_file: Path,
    deflate: bool = False,
    protocols: list[str] | None = None,
) -> Result:
    """The job followed over the websocket, offering `protocols` (default: a client of lines)."""
    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    spec = {
        "framework": "generic",
        "name": "logbench",
        "roles": {"worker": {"replicas": REPLICAS}},
        "code": REPLICA_CODE,
        "env": replica_env(lines, interval, start_file),
    }
    status, job = await server.request("POST", "/distrun/jobs", {"spec": spec})
    if status != 201:
        skip(f"POST /distrun/jobs answered {status}, not 201:\n{server.log_tail()}")
    ws_url = server.url.replace("http", "ws", 1) + f"/distrun/jobs/{job['id']}/logs/stream"
    from distrun.core.stream_versions import STREAM_PROTOCOLS

    connection = await websocket_connect(
        HTTPRequest(ws_url, headers=server.headers()),
        max_message_size=256 << 20,
        subprotocols=protocols or list(STREAM_PROTOCOLS),
        compression_options={} if deflate else None,  # permessage-deflate offered, or not
    )
    extensions = connection.headers.get("Sec-WebSocket-Extensions", "")
    if deflate != ("permessage-deflate" in extensions):
        skip(f"permessage-deflate {'not ' if deflate else ''}negotiated: {extensions!r}")
    receiver = Receiver(start_file, REPLICAS * lines)
    seqs: dict[str, list[int]] = {}

    async def receive() -> None:
        while (frame := await connection.read_message()) is not None:
            now = time.time()
            message = json.loads(frame)
            if message["type"] == "runs":
                receiver.receive([text for run in message["runs"] for text in run["texts"]], now)
                for run in message["runs"]:
                    first = run["seq"]
                    seqs.setdefault(run["replica"], []).extend(
                        range(first, first + len(run["texts"]))
                    )
            elif message["type"] == "usage":
                receiver.usage_messages += 1
            elif message["type"] == "error":
                skip(f"the log stream sent an error: {message['message']}")
            elif message["type"] == "end":
                break

    try:
        await asyncio.wait_for(receive(), RUN_TIMEOUT)
    finally:
        connection.close()
        if not receiver.done:  # stop replicas that would otherwise wait for the start signal
            await server.request("POST", f"/distrun/jobs/{job['id']}/cancel", {})
    if not receiver.done:
        skip(f"the stream ended after {len(receiver.latencies)} of {receiver.expected} lines")
    whole = list(range(lines + 1))  # "ready", then the lines
    if len(seqs) != REPLICAS or any(sorted(got) != whole for got in seqs.values()):
        skip("the stream lost or repeated lines: " + str({r: len(got) for r, got in seqs.items()}))
    return receiver.result()


def report(title: str, pipes: list[Result], server: list[Result]) -> None:
    print(title)
    print(f"{'':28}{'p50 latency':>14}{'p99 latency':>14}{'lines/s':>12}")
    for name, runs in (("straight from pipes", pipes), ("jupyter_server websocket", server)):
        p50 = median([r.p50 for r in runs])
        p99 = median([r.p99 for r in runs])
        rate = median([r.lines_per_second for r in runs])
        print(f"{name:28}{ms(p50):>14}{ms(p99):>14}{rate:12,.0f}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines-per-replica", type=int, default=10_000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument(
        "--deflate",
        action="store_true",
        help="the server offers permessage-deflate (DistrunApp.log_stream_compression) and "
        "the client takes it, as a browser does",
    )
    args = parser.parse_args()
    use_repo_package()
    with tempfile.TemporaryDirectory(prefix="distrun-bench-") as tmp:
        root = Path(tmp)
        server = BenchServer(root)
        try:
            server.launch(log_stream_compression=args.deflate)
            await server.wait_until_ready()
            loads = {
                "flat out": (args.lines_per_replica, 0.0),
                "paced, 200 lines/s per replica": (PACED_LINES, PACED_INTERVAL),
            }
            results: dict[str, tuple[list[Result], list[Result]]] = {}
            run = 0
            for load, (lines, interval) in loads.items():
                pipes, served = [], []
                for _ in range(args.repetitions):
                    run += 1
                    pipes.append(await through_pipes(lines, interval, root / f"start-{run}-p"))
                    served.append(
                        await through_server(
                            server, lines, interval, root / f"start-{run}-s", args.deflate
                        )
                    )
                results[load] = (pipes, served)
        finally:
            server.stop()

    for load, (pipes, served) in results.items():
        lines = args.lines_per_replica if load == "flat out" else PACED_LINES
        deflate = ", permessage-deflate" if args.deflate else ""
        report(
            f"{REPLICAS} replicas x {lines:,} lines, {load}{deflate}; "
            f"median of {args.repetitions} runs",
            pipes,
            served,
        )


if __name__ == "__main__":
    asyncio.run(main())
