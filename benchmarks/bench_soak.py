"""Soak: many concurrent jobs, each watched by several websocket viewers, on one real server.

    python benchmarks/bench_soak.py [--jobs 50] [--replicas 4] [--viewers 4] [--duration 180]
    python benchmarks/bench_soak.py --quick     # 10 jobs for 20 s: a check that it all works
    python benchmarks/bench_soak.py --compare   # first a baseline soak without distrun's two
                                                # load measures, then with them; side by side

One `jupyter_server` process with the distrun extension and the local engine runs `--jobs` jobs
of `--replicas` replicas; each replica prints numbered lines at `--rate` lines per second for
`--duration` seconds, then `done <count>`. Each job has `--viewers` websocket viewers (the
default is issue 6's 50 x 4 = 200 websockets); the last viewer of each job disconnects and
resumes every 10-40 s. Every viewer checks every line: seqs gap-free and in order per replica,
each text the line the replica wrote, and a `done` line that counts them all.

Figures printed: lines delivered, the server's event-loop lag (max and p99 of the overshoot of
a 10 ms sleep, measured inside the server by a probe extension loaded beside distrun) after
`--warmup` seconds, against the 100 ms bound; the garbage collections' pauses and, after each
full one, the objects the next one will scan; the server's RSS, open file descriptors and
threads after warm-up and at the end. Exits 1 if any line was lost, repeated or altered or a
job did not succeed; lag and memory are reported, not enforced (`--strict` enforces them too).

Two settings keep the loop responsive under load: the server freezes its start-up heap
(`DistrunApp.freeze_startup_heap`), so full garbage collections stop scanning it, and the local
engine runs replicas at niceness 10 (`LocalEngine.nice`), below the server. `--nice` and
`--no-freeze` set them for the soak; `--compare` first runs a baseline with neither (niceness 0,
no freeze), then the soak as set, and prints both side by side.
"""

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import (
    free_port,
    percentile,
    require_local_engine,
    server_command,
    use_repo_package,
)

LAG_BOUND = 0.100
SERVER_START_TIMEOUT = 120.0
SAMPLE_EVERY = 2.0

REPLICA_CODE = """\
import os, sys, time
replica = os.environ["DISTRUN_REPLICA"]
rate = float(os.environ["SOAK_RATE"])
end = time.monotonic() + float(os.environ["SOAK_DURATION"])
busy = os.environ["SOAK_BUSY"] == "1"
i = 0
while time.monotonic() < end:
    sys.stdout.write(f"{replica} {i:08d} {'x' * 60}\\n")
    sys.stdout.flush()
    i += 1
    pause_until = time.monotonic() + 1 / rate
    if busy:  # compute between lines, as training does, instead of sleeping
        while time.monotonic() < pause_until:
            pass
    else:
        time.sleep(1 / rate)
print("done", i, flush=True)
"""

# A server extension that measures its own event loop: how late a 10 ms sleep wakes up, and
# how much CPU the loop's thread used meanwhile (lag with little CPU is the machine's load
# delaying the whole process, not code blocking the loop).
LAG_PROBE = """\
import array, asyncio, collections, gc, heapq, json, os, time

def _jupyter_server_extension_points():
    return [{"module": "soak_lag_probe"}]

_gc_started = [0.0, 0.0]  # perf_counter, thread_time
_gc_young = [None]  # the generation collected, looked at before the collection's clock starts
_gc_pauses = []  # (generation, seconds, heap, collected, cpu, young) of each collection since the last flush
_CONTAINERS = (list, dict, set, tuple, collections.deque)

def _young_census(generation):
    # How many objects a young or middle collection scans, its largest containers (their
    # references are what it follows) and its commonest types.
    objects = gc.get_objects(generation)
    sized = (
        (len(obj), type(obj).__qualname__) for obj in objects if isinstance(obj, _CONTAINERS)
    )
    kinds = collections.Counter(type(obj).__qualname__ for obj in objects)
    return [len(objects), heapq.nlargest(3, sized), kinds.most_common(6)]

def _on_gc(phase, info):
    if phase == "start":
        generation = info["generation"]
        asked = os.environ.get("SOAK_YOUNG_CENSUS") == "1"  # costs the loop ~5 ms a 20k objects
        _gc_young[0] = _young_census(generation) if asked and generation < 2 else None
        _gc_started[0], _gc_started[1] = time.perf_counter(), time.thread_time()
        return
    seconds = round(time.perf_counter() - _gc_started[0], 5)
    cpu = round(time.thread_time() - _gc_started[1], 5)
    # After a full collection: the objects the next one scans (frozen ones are not counted).
    # Counting takes ~1 ms, once or twice a run.
    heap = len(gc.get_objects(2)) if info["generation"] == 2 else None
    _gc_pauses.append((info["generation"], seconds, heap, info["collected"], cpu, _gc_young[0]))
    # A file: what the heap holds, once, at the first full collection that leaves more than
    # SOAK_HEAP_CENSUS_OVER objects (the start-up heap, before it is frozen, is ~260k).
    census = os.environ.get("SOAK_HEAP_CENSUS")
    over = int(os.environ.get("SOAK_HEAP_CENSUS_OVER", "400000"))
    if heap and census and heap > over and not os.path.exists(census):
        types = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
        with open(census, "w") as out:
            json.dump(types.most_common(40), out)

_slow = []  # (seconds, what) of each callback that held the loop 50 ms or more
_handle_run = asyncio.events.Handle._run
# The latest callbacks (began, seconds, kind), a ring of columns: what a late probe waited
# behind. Not a tuple each: 50,000 of them young were half of what a young collection scanned.
_RECENT = 50_000
_recent_began, _recent_seconds = array.array("d", bytes(8 * _RECENT)), array.array("d", bytes(8 * _RECENT))
_recent_kind = [""] * _RECENT
_recent_next = [0]
_late = []  # (lag, [(kind, count, seconds)]) of each probe 100 ms late or more

def _timed_run(handle):
    # asyncio's own slow-callback warning needs debug mode, which records a stack for every
    # callback scheduled: too costly to measure with.
    began = time.perf_counter()
    _handle_run(handle)
    seconds = time.perf_counter() - began
    owner = getattr(handle._callback, "__self__", None)
    task = owner if isinstance(owner, asyncio.Task) else None
    if task is not None:
        kind = getattr(task.get_coro(), "__qualname__", "task")
    else:
        kind = getattr(handle._callback, "__qualname__", type(handle._callback).__name__)
    at = _recent_next[0] % _RECENT
    _recent_began[at], _recent_seconds[at], _recent_kind[at] = began, seconds, kind
    _recent_next[0] += 1
    if seconds >= 0.05:
        _slow.append((round(seconds, 4), repr(task or handle)[:300]))

def _waited_behind(since):
    # The callbacks run since `since` (perf_counter), by kind: the most time first.
    kinds = {}
    newest = _recent_next[0]
    for index in range(newest - 1, max(newest - _RECENT, 0) - 1, -1):
        at = index % _RECENT
        began, seconds, kind = _recent_began[at], _recent_seconds[at], _recent_kind[at]
        if began < since:
            break
        count, total = kinds.get(kind, (0, 0.0))
        kinds[kind] = (count + 1, total + seconds)
    ranked = sorted(kinds.items(), key=lambda item: -item[1][1])[:8]
    return [(kind, count, round(total, 4)) for kind, (count, total) in ranked]

def _census(path):
    # What the heap holds, asked for by a file beside the lag file (bench_kube_soak.py, once a
    # phase is measured): the C heap's use (glibc's mallinfo2), the tracked objects by type
    # (their shallow sizes; the frozen start-up heap included), the tasks.
    import ctypes, sys
    figures = {"rss_kib": _status_kib("VmRSS")}
    try:
        class _Info(ctypes.Structure):
            _fields_ = [(name, ctypes.c_size_t) for name in (
                "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                "uordblks", "fordblks", "keepcost")]
        mallinfo2 = ctypes.CDLL(None).mallinfo2
        mallinfo2.restype = _Info
        info = mallinfo2()
        figures["heap_mib"] = {
            "arena": info.arena >> 20, "in_use": info.uordblks >> 20,
            "free": info.fordblks >> 20, "mapped": info.hblkhd >> 20, "mapped_blocks": info.hblks}
    except (OSError, AttributeError):
        pass
    counts, sizes = collections.Counter(), collections.Counter()
    for obj in gc.get_objects():
        kind = type(obj).__qualname__
        counts[kind] += 1
        sizes[kind] += sys.getsizeof(obj)
    figures["objects"] = sum(counts.values())
    figures["frozen"] = gc.get_freeze_count()
    figures["tasks"] = len(asyncio.all_tasks())
    figures["by_size"] = [(kind, counts[kind], sizes[kind] >> 10) for kind, _ in sizes.most_common(25)]
    with open(path, "w") as out:
        json.dump(figures, out)

def _status_kib(key):
    with open("/proc/self/status") as status:
        for row in status:
            if row.startswith(key + ":"):
                return int(row.split()[1])
    return 0

async def _probe(path):
    loop = asyncio.get_running_loop()
    window, flushed = [], time.monotonic()
    while True:
        start, cpu, began = loop.time(), time.thread_time(), time.perf_counter()
        await asyncio.sleep(0.01)
        lag = loop.time() - start - 0.01
        window.append((round(lag, 5), round(time.thread_time() - cpu, 5)))
        if lag >= 0.1:
            _late.append((round(lag, 4), _waited_behind(began)))
        if os.path.exists(path + ".census-asked"):
            os.unlink(path + ".census-asked")
            _census(path + ".census")
        if time.monotonic() - flushed >= 1.0:
            with open(path, "a") as out:
                out.write(json.dumps(
                    {"time": time.time(), "lags": window, "gc": _gc_pauses, "slow": _slow,
                     "late": _late}
                ))
                out.write("\\n")
            window, flushed = [], time.monotonic()
            _gc_pauses.clear()
            _slow.clear()
            _late.clear()

def _load_jupyter_server_extension(serverapp):
    gc.callbacks.append(_on_gc)
    asyncio.events.Handle._run = _timed_run
    serverapp.io_loop.add_callback(
        lambda: asyncio.ensure_future(_probe(os.environ["SOAK_LAG_FILE"]))
    )
"""


def expected_line(replica: str, seq: int) -> str:
    return f"{replica} {seq:08d} {'x' * 60}"


@dataclass
class Viewer:
    """One websocket viewer of one job; checks every line it receives."""

    job_id: str
    resumes: bool
    next_seq: dict[str, int] = field(default_factory=dict)
    done: dict[str, int] = field(default_factory=dict)  # replica -> the count in its done line
    received: int = 0
    reconnects: int = 0
    ended: bool = False
    errors: list[str] = field(default_factory=list)

    def check(self, rows: list[list[Any]]) -> None:
        for replica, seq, _, text in rows:
            expected = self.next_seq.get(replica, 0)
            if seq != expected:
                self.errors.append(f"{replica}: seq {seq}, expected {expected}")
            elif text.startswith("done "):
                self.done[replica] = int(text.split()[1])
            elif text != expected_line(replica, seq):
                self.errors.append(f"{replica} line {seq} reads {text[:80]!r}")
            self.next_seq[replica] = seq + 1
        self.received += len(rows)

    @property
    def complete(self) -> bool:
        """Every replica's done line came, after exactly the lines it counted."""
        return bool(self.done) and all(
            self.next_seq.get(replica) == count + 1 for replica, count in self.done.items()
        )


@dataclass(frozen=True)
class Settings:
    """What distrun does against load, as set for one soak."""

    nice: int  # the local engine's replica niceness
    freeze: bool  # the server freezes its start-up heap

    def __str__(self) -> str:
        frozen = "frozen" if self.freeze else "not frozen"
        return f"replicas at niceness {self.nice}, the server's start-up heap {frozen}"


@dataclass
class Outcome:
    """One soak's verdict and the figures compared side by side."""

    code: int  # 0, or 1 on loss (or, with --strict, lag or memory over bound)
    lag_max: float | None = None
    lag_p99: float | None = None
    loop_cpu_p99: float | None = None
    loop_cpu_max: float | None = None
    gc_max: float | None = None
    load: float = 0.0
    heap: int | None = None  # median of the objects left in the oldest generation after full GCs


class Server:
    def __init__(self, root: Path, jobs: int, settings: "Settings") -> None:
        self.root = root
        self.settings = settings
        self.port = free_port()
        self.token = os.urandom(16).hex()
        self.lag_file = root / "lag.jsonl"
        self.process: asyncio.subprocess.Process | None = None
        self.jobs = jobs
        self.cpu_at_end = 0.0

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    async def start(self) -> None:
        probe_dir = self.root / "probe"
        probe_dir.mkdir(parents=True)
        (probe_dir / "soak_lag_probe.py").write_text(LAG_PROBE)
        config = {
            "ServerApp": {"jpserver_extensions": {"distrun": True, "soak_lag_probe": True}},
            "DistrunApp": {
                "state_dir": str(self.root / "state"),
                "max_jobs_per_user": self.jobs + 10,
                "freeze_startup_heap": self.settings.freeze,
                "engines": {
                    "local": {
                        "class": "distrun.engines.local.LocalEngine",
                        "kwargs": {"nice": self.settings.nice},
                    }
                },
            },
        }
        argv, env = server_command(self.root, self.port, self.token, config)
        env["PYTHONPATH"] = os.pathsep.join([str(probe_dir), os.environ["PYTHONPATH"]])
        env["SOAK_LAG_FILE"] = str(self.lag_file)
        with (self.root / "server.log").open("wb") as log:
            # A session of its own, as a server started from its own terminal or service has:
            # Linux's autogroup scheduler then weighs it apart from this process, whose 200
            # viewers stand in for browsers on other machines.
            self.process = await asyncio.create_subprocess_exec(
                *argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.returncode is not None:
                sys.exit(f"jupyter_server exited at start; see {self.root / 'server.log'}")
            try:
                await self.request("GET", "/distrun/engines")
                return
            except OSError:
                await asyncio.sleep(0.2)
        sys.exit(f"jupyter_server did not answer within {SERVER_START_TIMEOUT:.0f} s")

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        from tornado.httpclient import AsyncHTTPClient

        response = await AsyncHTTPClient().fetch(
            f"http://127.0.0.1:{self.port}{path}",
            method=method,
            headers=self.headers,
            body=None if body is None else json.dumps(body),
            request_timeout=300,
        )
        return json.loads(response.body or b"null")

    async def view(self, viewer: Viewer, rng: random.Random) -> None:
        """Reads the job's stream to its end; a resuming viewer reconnects now and then."""
        from tornado.httpclient import HTTPRequest
        from tornado.websocket import websocket_connect

        from distrun.client.log_resume import rows_of_runs

        while not viewer.ended:
            since = ",".join(f"{replica}:{seq}" for replica, seq in viewer.next_seq.items())
            url = f"ws://127.0.0.1:{self.port}/distrun/jobs/{viewer.job_id}/logs/stream"
            request = HTTPRequest(
                f"{url}?since={since}" if since else url, headers=self.headers, request_timeout=300
            )
            from distrun.core.stream_versions import STREAM_PROTOCOLS

            ws = await websocket_connect(
                request, max_message_size=64 << 20, subprotocols=list(STREAM_PROTOCOLS)
            )
            leave_at = time.monotonic() + rng.uniform(10, 40) if viewer.resumes else None
            while (message := await ws.read_message()) is not None:
                event = json.loads(message)
                if event["type"] == "runs":
                    viewer.check(rows_of_runs(event["runs"]))
                elif event["type"] == "end":
                    viewer.ended = True
                elif event["type"] == "error":
                    viewer.errors.append(f"stream error: {event['message']}")
                    viewer.ended = True
                if leave_at is not None and time.monotonic() > leave_at and not viewer.ended:
                    ws.close()
                    viewer.reconnects += 1
                    break

    def resources(self) -> dict[str, float]:
        assert self.process is not None
        proc = Path(f"/proc/{self.process.pid}")
        status = dict(
            line.split(":", 1) for line in (proc / "status").read_text().splitlines() if ":" in line
        )
        return {
            "rss_mib": int(status["VmRSS"].split()[0]) / 1024,
            "fds": len(os.listdir(proc / "fd")),
            "threads": int(status["Threads"]),
        }

    def cpu_seconds(self) -> float:
        """User + system CPU the server process has used so far: the work it did, which the
        machine's load does not inflate the way it inflates lag."""
        assert self.process is not None
        stat = Path(f"/proc/{self.process.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def windows_since(self, since: float) -> list[dict[str, Any]]:
        """The probe's one-second windows after `since`: "lags", each probe's (lag, CPU seconds
        of the loop's thread meanwhile), and "gc", each garbage collection's (generation,
        seconds, and after a full one the objects left in the oldest generation)."""
        if not self.lag_file.exists():
            return []
        windows = map(json.loads, self.lag_file.read_text().splitlines())
        return [window for window in windows if window["time"] >= since]


async def soak(args: argparse.Namespace, root: Path, settings: "Settings") -> Outcome:
    print(f"\n== soak: {settings}")
    server = Server(root, args.jobs, settings)
    await server.start()
    rng = random.Random(args.seed)
    try:
        spec = {
            "framework": "generic",
            "roles": {"worker": {"replicas": args.replicas}},
            "code": REPLICA_CODE,
            "env": {
                "SOAK_RATE": str(args.rate),
                "SOAK_DURATION": str(args.duration),
                "SOAK_BUSY": "1" if args.busy else "0",
            },
        }
        started = time.time()
        jobs = await asyncio.gather(
            *(server.request("POST", "/distrun/jobs", {"spec": spec}) for _ in range(args.jobs))
        )
        viewers = [
            Viewer(job["id"], resumes=index == args.viewers - 1)
            for job in jobs
            for index in range(args.viewers)
        ]
        print(f"{len(jobs)} jobs x {args.replicas} replicas, {len(viewers)} websocket viewers")
        viewing = asyncio.gather(*(server.view(viewer, rng) for viewer in viewers))
        samples: list[tuple[float, dict[str, float]]] = []
        while not viewing.done():
            await asyncio.wait([viewing], timeout=SAMPLE_EVERY)
            samples.append((time.time(), server.resources()))
            received = sum(viewer.received for viewer in viewers)
            print(f"  {time.time() - started:6.0f} s  {received:>10,} lines  {samples[-1][1]}")
        await viewing
        server.cpu_at_end = server.cpu_seconds()
        finals = [await server.request("GET", f"/distrun/jobs/{job['id']}") for job in jobs]
    finally:
        await server.stop()
    return report(args, started, viewers, finals, samples, server)


def report(
    args: argparse.Namespace,
    started: float,
    viewers: list[Viewer],
    finals: list[dict[str, Any]],
    samples: list[tuple[float, dict[str, float]]],
    server: Server,
) -> Outcome:
    warm = started + args.warmup
    failed_jobs = [job["id"] for job in finals if job["state"] != "succeeded"]
    broken = [viewer for viewer in viewers if viewer.errors or not viewer.complete]
    received = sum(viewer.received for viewer in viewers)
    print(
        f"\nlines delivered to viewers: {received:,} ({received / (time.time() - started):,.0f}/s)"
    )
    print(f"reconnects of resuming viewers: {sum(viewer.reconnects for viewer in viewers)}")
    if received:
        print(
            f"server CPU (user + system) until the last line: {server.cpu_at_end:.1f} s, "
            f"{server.cpu_at_end / received * 1e6:.1f} us per delivered line"
        )

    windows = server.windows_since(warm)
    probes = [(lag, cpu) for window in windows for lag, cpu in window["lags"]]
    outcome = Outcome(code=0, load=os.getloadavg()[0])
    lag_ok = True
    if probes:
        lags = [lag for lag, _ in probes]
        busy = [cpu for _, cpu in probes]
        worst, p99 = max(lags), percentile(lags, 0.99)
        outcome.lag_max, outcome.lag_p99 = worst, p99
        outcome.loop_cpu_p99, outcome.loop_cpu_max = percentile(busy, 0.99), max(busy)
        lag_ok = worst <= LAG_BOUND
        print(
            f"event-loop lag after warm-up ({len(lags):,} probes): max {worst * 1000:.1f} ms, "
            f"p99 {p99 * 1000:.1f} ms, median {statistics.median(lags) * 1000:.1f} ms "
            f"(bound {LAG_BOUND * 1000:.0f} ms: {'OK' if lag_ok else 'OVER'})"
        )
        print(
            f"  CPU the loop's thread used within one probe: max {max(busy) * 1000:.1f} ms, "
            f"p99 {percentile(busy, 0.99) * 1000:.1f} ms (lag beyond it is the machine's load, "
            f"load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)"
        )
        pauses = [pause for window in windows for pause in window["gc"]]
        full = [(seconds, heap) for gen, seconds, heap, _ in pauses if gen == 2]
        outcome.gc_max = max((seconds for _, seconds, *_ in pauses), default=0.0)
        print(
            f"  garbage collections: {len(pauses):,}, the longest {outcome.gc_max * 1000:.1f} ms; "
            f"{len(full)} full, the longest {max(full, default=(0.0, 0))[0] * 1000:.1f} ms"
        )
        if full:
            outcome.heap = int(statistics.median(heap for _, heap in full))
            print(
                f"  objects a full collection scans (left after each): "
                f"{', '.join(f'{heap:,}' for _, heap in full)}"
            )
    else:
        print("event-loop lag: no probe samples after warm-up (run longer than --warmup)")

    after_warmup = [values for when, values in samples if when >= warm]
    memory_ok = True
    if len(after_warmup) >= 4:
        quarter = max(1, len(after_warmup) // 4)
        first = statistics.median(v["rss_mib"] for v in after_warmup[:quarter])
        last = statistics.median(v["rss_mib"] for v in after_warmup[-quarter:])
        memory_ok = last <= first * 1.10 + 10
        print(
            f"server RSS after warm-up: {first:.0f} MiB -> {last:.0f} MiB at the end "
            f"({'flat' if memory_ok else 'GROWING'}); fds {after_warmup[0]['fds']:.0f} -> "
            f"{after_warmup[-1]['fds']:.0f}, threads {after_warmup[0]['threads']:.0f} -> "
            f"{after_warmup[-1]['threads']:.0f}"
        )

    if failed_jobs:
        print(f"LOSS: {len(failed_jobs)} jobs did not succeed: {failed_jobs[:5]}")
    for viewer in broken[:10]:
        print(f"LOSS: a viewer of {viewer.job_id}: {viewer.errors[:3] or 'incomplete'}")
    if failed_jobs or broken:
        outcome.code = 1
        return outcome
    print("nothing lost: every viewer got every line of every replica exactly once, in order")
    if args.strict and not (lag_ok and memory_ok):
        outcome.code = 1
    return outcome


def compare(baseline: Outcome, measured: Outcome) -> None:
    """The two soaks side by side: what distrun's load measures buy."""

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:8.1f} ms"

    print(f"\n{'event-loop lag after warm-up':<34}{'baseline':>14}{'as set':>14}")
    for label, field_name in (
        ("max", "lag_max"),
        ("p99", "lag_p99"),
        ("loop CPU within a probe, p99", "loop_cpu_p99"),
        ("loop CPU within a probe, max", "loop_cpu_max"),
        ("longest GC pause", "gc_max"),
    ):
        print(
            f"  {label:<32}{ms(getattr(baseline, field_name)):>14}"
            f"{ms(getattr(measured, field_name)):>14}"
        )
    print(f"  {'load average at the end':<32}{baseline.load:>14.1f}{measured.load:>14.1f}")
    heaps = [f"{heap:,}" if heap is not None else "-" for heap in (baseline.heap, measured.heap)]
    print(f"  {'objects a full GC scans, median':<32}{heaps[0]:>14}{heaps[1]:>14}")
    if baseline.lag_max and measured.lag_max:
        print(f"  max lag, as set / baseline: {measured.lag_max / baseline.lag_max:.2f}")


async def run(args: argparse.Namespace, root: Path) -> int:
    settings = Settings(nice=args.nice, freeze=not args.no_freeze)
    if not args.compare:
        return (await soak(args, root / "soak", settings)).code
    baseline = await soak(args, root / "baseline", Settings(nice=0, freeze=False))
    measured = await soak(args, root / "measured", settings)
    compare(baseline, measured)
    return max(baseline.code, measured.code)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--viewers", type=int, default=4)
    parser.add_argument("--duration", type=float, default=180.0, help="seconds each replica writes")
    parser.add_argument("--rate", type=float, default=20.0, help="lines per second per replica")
    parser.add_argument("--warmup", type=float, default=30.0, help="seconds not measured")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--busy", action="store_true", help="replicas compute between lines instead of sleeping"
    )
    parser.add_argument("--strict", action="store_true", help="also fail on lag or memory")
    parser.add_argument("--quick", action="store_true", help="10 jobs for 20 s")
    parser.add_argument("--nice", type=int, default=10, help="the local engine's replica niceness")
    parser.add_argument(
        "--no-freeze", action="store_true", help="the server does not freeze its start-up heap"
    )
    parser.add_argument(
        "--compare", action="store_true", help="first a baseline with neither measure, then this"
    )
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.duration, args.warmup = 10, 20.0, 5.0
    use_repo_package()
    require_local_engine()
    import tempfile

    with tempfile.TemporaryDirectory(prefix="distrun-soak-") as root:
        sys.exit(asyncio.run(run(args, Path(root))))


if __name__ == "__main__":
    main()
