"""What a followed log line costs the server to read off its TLS connection, as asyncio reads
it and as `share_tls_buffer` sets the connection up.

    python benchmarks/bench_tls_read.py [--connections 100] [--interval 0.05] [--seconds 4]
                                        [--rounds 3]

A TLS server in a process of its own (aiohttp) writes one short line on each of
`--connections` streamed responses every `--interval` seconds, as a pod's log does; this
process reads them all with aiohttp, the way the Kubernetes engine follows logs, and counts
its own CPU time a line. Both arms run with `return_large_blocks` in force, as in the server:

- asyncio: the connection as asyncio makes it (SSLObject.read asked for 256 KiB at a time);
- distrun: after `share_tls_buffer` (the loop's one read buffer, handed to the TLS object in
  slices, the plaintext taken a record at most at a time).

Arms alternate, `--rounds` each; medians and the spread are printed, and the ratio.
"""

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, free_port, use_repo_package

use_repo_package()
sys.path.insert(0, str(REPO))

import aiohttp
from tests.unit.test_kube_tls_buffer import self_signed

from distrun.engines.kube.client import return_large_blocks, share_tls_buffer

LINE = b"2026-11-27T00:00:00.000000000Z step 100 loss 0.1234 " + b"x" * 40 + b"\n"

SERVER = """
import asyncio, ssl, sys
from aiohttp import web

interval = float(sys.argv[4])

async def log(request):
    response = web.StreamResponse()
    await response.prepare(request)
    try:
        while True:
            await response.write(LINE)
            await asyncio.sleep(interval)
    except ConnectionError:  # the reader left
        return response

context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
context.load_cert_chain(sys.argv[2], sys.argv[3])
app = web.Application()
app.router.add_get("/log", log)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), ssl_context=context, print=None)
"""


async def cpu_per_line(
    url: str, connections: int, seconds: float, shared: bool
) -> tuple[float, float]:
    """Microseconds of this process's CPU a line, and lines a second, over `seconds` of reading
    every connection."""
    lines = 0

    async def follow(session: aiohttp.ClientSession, stop: asyncio.Event) -> None:
        nonlocal lines
        async with session.get(url, ssl=False) as response:
            if shared:
                share_tls_buffer(response)
            while not stop.is_set():
                chunk = await response.content.readany()
                lines += chunk.count(b"\n")

    stop = asyncio.Event()
    async with aiohttp.ClientSession() as session:
        tasks = [asyncio.create_task(follow(session, stop)) for _ in range(connections)]
        await asyncio.sleep(1.0)  # every connection open and streaming
        counted, cpu = lines, time.process_time()
        await asyncio.sleep(seconds)
        used, read = time.process_time() - cpu, lines - counted
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return used / max(read, 1) * 1e6, read / seconds


async def measure(args: argparse.Namespace, url: str) -> dict[str, list[tuple[float, float]]]:
    figures: dict[str, list[tuple[float, float]]] = {"asyncio": [], "distrun": []}
    for _ in range(args.rounds):
        for arm, values in figures.items():
            shared = arm == "distrun"
            values.append(await cpu_per_line(url, args.connections, args.seconds, shared))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between lines")
    parser.add_argument("--seconds", type=float, default=4.0, help="measured, per round and arm")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    return_large_blocks()
    with tempfile.TemporaryDirectory() as work:
        self_signed(Path(work))  # writes cert.pem and key.pem there
        cert, key = Path(work) / "cert.pem", Path(work) / "key.pem"
        port = free_port()
        script = SERVER.replace("LINE", repr(LINE))
        server = subprocess.Popen(
            [sys.executable, "-c", script, str(port), str(cert), str(key), str(args.interval)]
        )
        try:
            time.sleep(2.0)  # the server listening
            figures = asyncio.run(measure(args, f"https://127.0.0.1:{port}/log"))
        finally:
            server.terminate()
            server.wait()
    print(
        f"{args.connections} TLS log streams, a line each every {args.interval * 1000:.0f} ms; "
        "this process's CPU a line read, median (spread) of "
        f"{args.rounds} rounds of {args.seconds:.0f} s:"
    )
    medians = {}
    for arm, rounds in figures.items():
        values = [cpu for cpu, _ in rounds]
        medians[arm] = statistics.median(values)
        rate = statistics.median(rate for _, rate in rounds)
        print(
            f"  {arm:8} {medians[arm]:6.1f} us  ({min(values):.1f}-{max(values):.1f}), "
            f"{rate:,.0f} lines/s"
        )
    ratio = medians["distrun"] / medians["asyncio"]
    print(f"  distrun / asyncio: {ratio:.2f}x")


if __name__ == "__main__":
    main()
