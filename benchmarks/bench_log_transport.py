"""What following many logs costs the server over HTTP/1.1 (a TLS connection per log) and over
HTTP/2 (engines/kube/h2_logs.py: up to 100 logs a connection).

    python benchmarks/bench_log_transport.py [--streams 1200] [--group 8] [--interval 1.0]
                                             [--seconds 10] [--rounds 3]

A TLS server in a process of its own writes a short line on each of `--streams` followed logs
every `--interval` seconds, each job's `--group` logs together (data-parallel replicas log in
step) and each job at its own moment in the interval, as the soak's pods do; it speaks
HTTP/1.1 (aiohttp) on one port and HTTP/2 (the h2 library) on another. Each arm runs in a
fresh process of its own that follows every log through `KubeApi.stream_log` and
`StreamedLines`, as the Kubernetes engine does, with `log_http2` off or on, and reports:

- CPU a line: this process's CPU time over `--seconds`, once every log is streaming, per line;
- memory a log: its RSS once every log is streaming, less its RSS before the first was opened,
  per log (glibc's free pages trimmed before each reading, as the server's trim does).

Arms alternate, `--rounds` each; medians and the spread are printed, and the ratios.
"""

import argparse
import asyncio
import ctypes
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import REPO, free_port, use_repo_package

use_repo_package()
sys.path.insert(0, str(REPO))

import psutil
from kubernetes_asyncio import client
from tests.unit.test_kube_tls_buffer import self_signed

from distrun.engines.kube.client import KubeApi, StreamedLines, return_large_blocks

LINE = b"2026-11-27T00:00:00.000000000Z step 100 loss 0.1234 " + b"x" * 40 + b"\n"

SERVER = """
import asyncio, random, ssl, sys
sys.path.insert(0, REPO)
from aiohttp import web
from tests.unit.test_kube_h2_logs import H2Server

http1_port, http2_port, cert, key, interval, group = sys.argv[1:7]
interval, group = float(interval), int(group)

def context(protocol):
    made = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    made.load_cert_chain(cert, key)
    made.set_alpn_protocols([protocol])
    return made

def phase(pod):
    # A job's replicas (`group` logs in a row) write at the same moment, as data-parallel
    # replicas do; jobs at their own moments.
    return random.Random(int(pod.rsplit("-", 1)[1]) // group).uniform(0, interval)

async def http1_log(request):
    response = web.StreamResponse()
    await response.prepare(request)
    await asyncio.sleep(phase(request.match_info["pod"]))
    try:
        while True:
            await response.write(LINE)
            await asyncio.sleep(interval)
    except ConnectionError:
        return response

async def http2_log(server, stream_id, headers):
    server.respond(stream_id)
    await asyncio.sleep(phase(headers[":path"].split("/")[6]))
    while stream_id not in server.reset:
        await server.send(stream_id, LINE)
        await asyncio.sleep(interval)

async def main():
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/pods/{pod}/log", http1_log)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", int(http1_port), ssl_context=context("http/1.1")).start()
    loop = asyncio.get_running_loop()
    connections = []
    await loop.create_server(
        lambda: H2Server(http2_log, connections), "127.0.0.1", int(http2_port),
        ssl=context("h2"),
    )
    await asyncio.Event().wait()

asyncio.run(main())
"""


def trimmed_rss() -> int:
    ctypes.CDLL(None).malloc_trim(0)
    return int(psutil.Process().memory_info().rss)


async def follow_all(
    port: int, cert: Path, http2: bool, streams: int, seconds: float
) -> dict[str, Any]:
    """One arm, in this process: every log followed, then measured for `seconds`."""
    configuration = client.Configuration(host=f"https://127.0.0.1:{port}")
    configuration.ssl_ca_cert = str(cert)
    configuration.tls_server_name = "localhost"
    api = KubeApi(client.ApiClient(configuration), http2_logs=http2)
    lines = 0
    started: set[int] = set()

    async def follow(n: int) -> None:
        nonlocal lines
        async with api.stream_log("ns", f"pod-{n}", "main") as response:
            async for _line in StreamedLines(response):
                lines += 1
                started.add(n)

    before = trimmed_rss()
    tasks = [asyncio.create_task(follow(n)) for n in range(streams)]
    while len(started) < streams:
        await asyncio.sleep(0.1)
        if any(task.done() for task in tasks):
            raise SystemExit(f"a follow ended: {next(t for t in tasks if t.done()).exception()!r}")
    await asyncio.sleep(1.0)
    during = trimmed_rss()
    counted, cpu = lines, time.process_time()
    await asyncio.sleep(seconds)
    used, read = time.process_time() - cpu, lines - counted
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    connections = len(api.log_connections()) if http2 else streams
    await api.close()
    return {
        "cpu_us": used / max(read, 1) * 1e6,
        "kib_per_log": (during - before) / streams / 1024,
        "lines_per_s": read / seconds,
        "connections": connections,
    }


def run_arm(args: argparse.Namespace, port: int, cert: Path, http2: bool) -> dict[str, Any]:
    command = [
        sys.executable, __file__, "--arm", "http2" if http2 else "http1", "--port", str(port),
        "--cert", str(cert), "--streams", str(args.streams), "--seconds", str(args.seconds),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--streams", type=int, default=1200)
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between lines")
    parser.add_argument("--group", type=int, default=8, help="logs a job: written together")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured, per round and arm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--arm", choices=["http1", "http2"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--cert", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    return_large_blocks()
    if args.arm:
        result = asyncio.run(
            follow_all(args.port, args.cert, args.arm == "http2", args.streams, args.seconds)
        )
        print(json.dumps(result))
        return
    with tempfile.TemporaryDirectory() as work:
        self_signed(Path(work))  # writes cert.pem and key.pem there
        cert, key = Path(work) / "cert.pem", Path(work) / "key.pem"
        ports = {"http1": free_port(), "http2": free_port()}
        script = SERVER.replace("LINE", repr(LINE)).replace("REPO", repr(str(REPO)))
        server = subprocess.Popen(
            [sys.executable, "-c", script, str(ports["http1"]), str(ports["http2"]),
             str(cert), str(key), str(args.interval), str(args.group)]
        )  # fmt: skip
        figures: dict[str, list[dict[str, Any]]] = {"http1": [], "http2": []}
        try:
            time.sleep(2.0)  # the server listening
            for _ in range(args.rounds):
                arms = list(figures)
                random.shuffle(arms)
                for arm in arms:
                    figures[arm].append(run_arm(args, ports[arm], cert, arm == "http2"))
        finally:
            server.terminate()
            server.wait()
    report(args, figures)


def report(args: argparse.Namespace, figures: dict[str, list[dict[str, Any]]]) -> None:
    print(
        f"{args.streams} followed logs (jobs of {args.group}), a line each every "
        f"{args.interval:g} s; "
        f"median (spread) of {args.rounds} rounds, {args.seconds:g} s measured each:"
    )
    medians: dict[str, dict[str, float]] = {}
    for arm, rounds in figures.items():
        medians[arm] = {}
        parts = []
        for key, unit in (("cpu_us", "us CPU a line"), ("kib_per_log", "KiB a log")):
            values = [r[key] for r in rounds]
            medians[arm][key] = statistics.median(values)
            parts.append(f"{medians[arm][key]:7.1f} {unit} ({min(values):.1f}-{max(values):.1f})")
        rate = statistics.median(r["lines_per_s"] for r in rounds)
        connections = rounds[-1]["connections"]
        print(f"  {arm}: {', '.join(parts)}, {rate:,.0f} lines/s, {connections} connections")
    for key, what in (("cpu_us", "CPU a line"), ("kib_per_log", "memory a log")):
        print(f"  http2 / http1, {what}: {medians['http2'][key] / medians['http1'][key]:.2f}x")


if __name__ == "__main__":
    main()
