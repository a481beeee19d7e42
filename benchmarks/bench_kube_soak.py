"""Kubernetes soak: many jobs, many viewers, one real API server; what distrun's followers cost
the API server, counted by the API server itself, against the naive baseline in the same run.

    PYTHONPATH=server_ext python benchmarks/bench_kube_soak.py [--jobs 50] [--replicas 4]
        [--viewers 4] [--phase-seconds 60] [--rate 2]
    PYTHONPATH=server_ext python benchmarks/bench_kube_soak.py --quick   # 10 jobs, 20 s phases
    PYTHONPATH=server_ext python benchmarks/bench_kube_soak.py --pods 200,600,1200 --replicas 8
        --viewers 4 --phase-seconds 30 --rate 1   # the curve: the shared phases at each size
    ... --harness-nice 10   # the viewers and the cluster niced, the servers measured not

The tier's control plane (etcd, kube-apiserver, kwok playing the kubelet on as many fake nodes
as the pods need) and the real Training Operator v1.9.4 run `--jobs` PyTorchJobs of
`--replicas` replicas, submitted by alice through distrun's Kubeflow engine; every replica
"prints" a numbered line `--rate` times a second (written to the log kwok serves): a job's
replicas together, as data-parallel replicas print, and the jobs each at its own moment in the
second, as jobs started apart do (`--in-step`: all 1,200 lines at once). Then, on the
same running jobs, one phase after another, each `--phase-seconds` long:

  quiet     nobody follows: the cluster's own requests (operator, kwok, scheduler), subtracted
            from the phases below;
  shared    one distrun server (a real jupyter_server), `--viewers` websocket viewers per job;
  shared-1  the same server, one viewer per job, as soon as the first phase's viewers have
            gone: the load must not grow with viewers, and every viewer must be served (a
            refused one is counted apart, with the server's reason);
  naive     the baseline, one follow per viewer as before 2026-11-25: every viewer its own
            KubeflowEngine in this process, so each runs its own job watch, pod watch and log
            stream per replica, exactly as one `follow` did then;
  2 servers two distrun servers (two hub users' servers), half the viewers each.

Each phase is measured once its viewers have connected and caught up (every viewer has, of
each replica, the line written as the phase began; WARM_UP_LIMIT at most): the steady state.
What getting there took (seconds, requests) is printed apart. For each: the pod-log streams and watches open at the API server in mid-phase
(`apiserver_longrunning_requests`) and the requests it served during the phase
(`apiserver_request_total`), per minute, less the quiet phase's. Every viewer checks every line
(seqs gap-free from where it started, each text the line written). For the shared server: its
event-loop lag (p99, max: a 10 ms sleep's overshoot, measured inside the server by the probe of
bench_soak.py) and its RSS at the start and end of its phases. Exits 1 if a line was lost,
repeated or altered, or a viewer refused.

With `--pods`, the cluster grows through the sizes given (jobs of `--replicas` pods each, all
in one namespace); at each size the quiet phase, then a fresh server's two shared phases (the
naive and two-server phases are left out: at 1,200 pods they would be 4,800 engines).
"""

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _common import REPO, percentile, use_repo_package

use_repo_package()
sys.path.insert(0, str(REPO))

import kubernetes
import kubernetes_asyncio
import psutil
from tests.k8s.apiserver_metrics import apiserver_load
from tests.k8s.binaries import ensure_all
from tests.k8s.cluster import FakeNode, KubeCluster, PodLog
from tests.k8s.controllers import start_training_operator
from tests.k8s.distrun_server import (
    NAMESPACE_TEMPLATE,
    DistrunServer,
    engine_config,
    prepare_server_identity,
    user_namespace,
)

from bench_soak import LAG_PROBE
from distrun.client.log_resume import rows_of_runs
from distrun.core import jobids
from distrun.core.logs import LogBatch
from distrun.core.spec import JobSpec, Limits
from distrun.engines.kube.kubeflow import KubeflowEngine

# A collection as the probe records it: (generation, seconds, objects left to scan after a full
# one, collected, CPU seconds, [objects scanned, its largest containers] or None)
GcPause = tuple[int, float, int | None, int, float, list[Any] | None]
PODS_PER_NODE = 100
WRITE_SLOTS = 20  # moments in each second at which the jobs write, a share of them each
WARM_UP = 5.0  # seconds for a phase's viewers to connect and catch up before measuring, at least
WARM_UP_LIMIT = 180.0  # seconds, at most: measured from then on, caught up or not
NAMESPACE = user_namespace("alice")
STREAM_PATH = ("distrun", "jobs", "{}", "logs", "stream")


def text(replica: str, seq: int) -> str:
    return f"{replica} {seq:08d} " + "x" * 60


# --- viewers ----------------------------------------------------------------------------------


@dataclass
class Viewer:
    """Checks every line of one job it is given, from where it started."""

    job_id: str
    next_seq: dict[str, int] = field(default_factory=dict)
    received: int = 0
    errors: list[str] = field(default_factory=list)
    refused: bool = False  # the server said why in an error message, then closed

    def check(self, rows: list[tuple[str, int, str]]) -> None:
        for replica, seq, line in rows:
            expected = self.next_seq.setdefault(replica, seq)  # a viewer starts mid-log
            if seq != expected:
                self.errors.append(f"{self.job_id} {replica}: seq {seq}, expected {expected}")
            elif line != text(replica, seq):
                self.errors.append(f"{self.job_id} {replica} line {seq}: {line[:60]!r}")
            self.next_seq[replica] = seq + 1
        self.received += len(rows)


async def websocket_viewer(server: DistrunServer, viewer: Viewer, stop: asyncio.Event) -> None:
    path = [part.format(viewer.job_id) for part in STREAM_PATH]
    ws = await server.websocket("alice", *path)
    try:
        while not stop.is_set():
            reading = asyncio.ensure_future(ws.read_message())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not reading.done():
                reading.cancel()
                break
            message = reading.result()
            if message is None:
                why = f"code {ws.close_code}, {ws.close_reason!r}"
                viewer.errors.append(f"{viewer.job_id}: the server closed the stream ({why})")
                return
            event = json.loads(message)
            if event["type"] == "error":
                viewer.errors.append(f"{viewer.job_id}: refused: {event.get('message')}")
                viewer.refused = True
                return
            if event["type"] == "runs":
                rows = rows_of_runs(event["runs"])
                viewer.check([(r, seq, line) for r, seq, _, line in rows])
    finally:
        ws.close()


async def engine_viewer(engine: KubeflowEngine, viewer: Viewer, stop: asyncio.Event) -> None:
    events = engine.follow(viewer.job_id, "alice")
    try:
        while not stop.is_set():
            getting = asyncio.ensure_future(anext(events))
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({getting, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not getting.done():
                getting.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await getting
                break
            event = getting.result()
            if isinstance(event, LogBatch):
                viewer.check([(line.replica, line.seq, line.text) for line in event.lines])
    finally:
        await events.aclose()


# --- the cluster and the jobs -----------------------------------------------------------------


@dataclass
class Jobs:
    logs: dict[str, dict[str, PodLog]]  # job id -> replica -> its log
    written: dict[str, int] = field(default_factory=dict)  # job id -> lines in each replica's

    @property
    def ids(self) -> list[str]:
        return list(self.logs)

    async def write_on(self, rate: float, stop: asyncio.Event, in_step: bool) -> None:
        """One more numbered line in every replica's log, `rate` times a second (jobs added
        meanwhile included, each numbered from its own first line). A job's replicas write
        together, as data-parallel replicas do; the jobs, each at its own moment in the second
        (WRITE_SLOTS of them), as jobs started apart do, unless `in_step`: all at once."""
        slots = 1 if in_step else WRITE_SLOTS
        start, ticks = time.monotonic(), 0
        while not stop.is_set():
            for job_id, job_logs in list(self.logs.items())[ticks % slots :: slots]:
                seq = self.written.get(job_id, 0)
                for replica, log in job_logs.items():
                    log.write(text(replica, seq))
                self.written[job_id] = seq + 1
            ticks += 1
            delay = start + ticks / (rate * slots) - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(delay, 0))


def add_nodes(cluster: KubeCluster, pods: int) -> None:
    core = kubernetes.client.CoreV1Api(cluster.admin)
    for index in range(pods // PODS_PER_NODE + 1):
        node = FakeNode(f"kwok-soak-{index}").manifest()
        capacity = {"cpu": "1000", "memory": "4Ti", "pods": str(PODS_PER_NODE + 10)}
        node["status"]["capacity"] = node["status"]["allocatable"] = capacity
        with contextlib.suppress(kubernetes.client.ApiException):
            core.create_node(node)


async def submit_jobs(
    cluster: KubeCluster, admin: Any, jobs: Jobs, count: int, replicas: int
) -> None:
    """`count` more PyTorchJobs of alice's into `jobs`, each replica's log registered before
    its pod exists."""
    engine = KubeflowEngine(
        api_client=admin,
        namespace=NAMESPACE,
        limits=Limits(max_jobs_per_user=len(jobs.logs) + count + 1),
    )
    spec = JobSpec.from_dict(
        {"framework": "pytorch", "code": "pass\n", "roles": {"worker": {"replicas": replicas - 1}}}
    )
    drawn = jobids.new_job_id
    try:
        for _ in range(count):
            job_id = drawn(spec.name)
            jobs.logs[job_id] = {
                replica: cluster.pod_log(NAMESPACE, f"{job_id}-{replica}")
                for replica in spec.replica_names()
            }
            jobids.new_job_id = lambda _name, job_id=job_id: job_id  # type: ignore[misc]
            await engine.submit(spec, "alice")
    finally:
        jobids.new_job_id = drawn
        await engine.close()


async def wait_running(admin: Any, jobs: Jobs, replicas: int) -> None:
    core = kubernetes_asyncio.client.CoreV1Api(admin)
    while True:
        pods = (await core.list_namespaced_pod(NAMESPACE)).items
        running = sum(pod.status.phase == "Running" for pod in pods)
        if running >= len(jobs.logs) * replicas:
            return
        print(f"  {running} of {len(jobs.logs) * replicas} pods running ...", flush=True)
        await asyncio.sleep(3)


# --- phases -----------------------------------------------------------------------------------


@dataclass
class PhaseResult:
    name: str
    viewers: int
    log_streams: int
    watches: int
    requests_per_minute: float
    lines: int
    errors: list[str]
    refused: int = 0  # viewers the server refused (each error says why)
    busiest: list[tuple[str, int]] = field(default_factory=list)
    warm_up: tuple[float, int, int] = (0.0, 0, 0)  # seconds, requests less quiet's, caught up
    warm_busiest: list[tuple[str, int]] = field(default_factory=list)  # served most meanwhile
    lag: tuple[float, float] | None = None  # p99, max
    # Of the probes that woke 50 ms late or more: the loop thread's CPU over their wall time
    # (the rest is the OS not running the server), and their count.
    stall_cpu: tuple[float, int] | None = None
    worst_probes: list[tuple[float, float]] = field(default_factory=list)  # (lag, CPU), latest
    # The latest probes' waits: (lag, [(callback kind, count, seconds)]), the most time first.
    late: list[tuple[float, list[tuple[str, int, float]]]] = field(default_factory=list)
    slow_warm_up: list[tuple[float, str]] = field(default_factory=list)  # callbacks >= 50 ms
    slow_phase: list[tuple[float, str]] = field(default_factory=list)
    gc_pauses: list[GcPause] = field(default_factory=list)
    census: dict[str, Any] | None = None  # what the server's heap held as the phase ended
    rss_mib: list[float] = field(default_factory=list)  # at the start, middle and end
    pods: int = 0
    # CPU seconds a second over the phase: the server's process, this process (the viewers),
    # and the whole machine's (of its cores), so a late loop can be told busy from crowded out.
    cpu: tuple[float, float, float] | None = None


Starter = Callable[[Viewer, asyncio.Event], Awaitable[None]]


async def phase(
    name: str,
    admin: Any,
    seconds: float,
    viewers: list[tuple[Viewer, Starter]],
    quiet: float,
    server: DistrunServer | None = None,
    lag_file: Path | None = None,
    jobs: Jobs | None = None,
) -> PhaseResult:
    """The API server's load over `seconds` while `viewers` follow (after `warm_up`), and the
    RSS of `server` at the start, middle and end, and its event-loop lag while measured."""
    rss: list[float] = []

    def sample() -> None:
        if server is not None:
            rss.append(server.process.memory_kib("VmRSS") / 1024)

    stop = asyncio.Event()
    before = await apiserver_load(admin)
    warm_began, warm_since = time.monotonic(), time.time()
    tasks = [asyncio.create_task(start(viewer, stop)) for viewer, start in viewers]
    try:
        caught_up = await warm_up([viewer for viewer, _ in viewers], jobs)
        since = time.time()
        start = await apiserver_load(admin)
        warm_seconds = time.monotonic() - warm_began
        warm_requests = start.requests_since(before) - quiet * warm_seconds / 60
        sample()
        received = sum(viewer.received for viewer, _ in viewers)
        cpu_before = cpu_seconds(server)
        began = time.monotonic()
        await asyncio.sleep(seconds / 2)
        middle = await apiserver_load(admin)
        sample()
        await asyncio.sleep(seconds / 2)
        end = await apiserver_load(admin)
        sample()
        elapsed = time.monotonic() - began
        cpu_after = cpu_seconds(server)
        cpu = (
            (cpu_after[0] - cpu_before[0]) / elapsed,
            (cpu_after[1] - cpu_before[1]) / elapsed,
            (cpu_after[2] - cpu_before[2]) / elapsed,
        )
        until = time.time()  # the viewers' leaving is not the phase's
        census = None if lag_file is None else await heap_census(lag_file)
    finally:
        stop.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    probes = [] if lag_file is None else lag_probes(lag_file, since, until)
    errors = [error for viewer, _ in viewers for error in viewer.errors]
    errors += [repr(outcome) for outcome in outcomes if isinstance(outcome, BaseException)]
    return PhaseResult(
        name,
        len(viewers),
        middle.log_streams(),
        middle.watches("pods") + middle.watches("pytorchjobs"),
        end.requests_since(start) * 60 / elapsed - quiet,
        sum(viewer.received for viewer, _ in viewers) - received,
        errors,
        refused=sum(viewer.refused for viewer, _ in viewers),
        busiest=end.busiest_since(start),
        warm_up=(warm_seconds, round(warm_requests), caught_up),
        warm_busiest=start.busiest_since(before, 6),
        lag=None if lag_file is None else lag_figures(lag_file, since, until),
        stall_cpu=None if lag_file is None else stall_cpu(probes),
        worst_probes=sorted(probes)[-3:],
        late=[] if lag_file is None else late_probes(lag_file, since, until)[-3:],
        slow_warm_up=[] if lag_file is None else slow_callbacks(lag_file, warm_since, since),
        slow_phase=[] if lag_file is None else slow_callbacks(lag_file, since, until),
        gc_pauses=[] if lag_file is None else gc_pauses(lag_file, since, until),
        rss_mib=rss,
        census=census,
        cpu=cpu if server is not None else None,
    )


def cpu_seconds(server: DistrunServer | None) -> tuple[float, float, float]:
    """CPU seconds so far: the server's process, this one, and the machine's (all cores)."""
    own = psutil.Process().cpu_times()
    machine = psutil.cpu_times()
    if server is None or server.process.process is None:
        theirs = 0.0
    else:
        times = psutil.Process(server.process.process.pid).cpu_times()
        theirs = times.user + times.system
    # Niced processes' time is apart on Linux (a soak run at `nice 10` counts it too).
    busy = machine.user + machine.system + getattr(machine, "nice", 0.0)
    return theirs, own.user + own.system, busy


async def warm_up(viewers: list[Viewer], jobs: Jobs | None) -> int:
    """Until every viewer has, of each replica of its job, the line written as the phase began
    (connected and caught up: what is measured after is the steady state, what it cost to get
    there is reported apart), at least WARM_UP seconds, at most WARM_UP_LIMIT; how many had."""
    targets = {} if jobs is None else dict(jobs.written)

    def caught_up(viewer: Viewer) -> bool:
        assert jobs is not None
        target = targets.get(viewer.job_id, 0)
        return all(viewer.next_seq.get(r, 0) >= target for r in jobs.logs[viewer.job_id])

    began = time.monotonic()
    await asyncio.sleep(WARM_UP)
    while time.monotonic() - began < WARM_UP_LIMIT and not all(map(caught_up, viewers)):
        await asyncio.sleep(1.0)
    return sum(map(caught_up, viewers))


def on_server(server: DistrunServer) -> Starter:
    return lambda viewer, stop: websocket_viewer(server, viewer, stop)


def lag_figures(lag_file: Path, since: float, until: float) -> tuple[float, float] | None:
    probes = lag_probes(lag_file, since, until)
    lags = [lag for lag, _cpu in probes]
    return (percentile(lags, 0.99), max(lags)) if lags else None


def lag_probes(lag_file: Path, since: float, until: float) -> list[tuple[float, float]]:
    """The probe's (lag, CPU seconds of the loop's thread meanwhile) between `since` and
    `until` (by the end of the probe's one-second window)."""
    if not lag_file.exists():
        return []
    return [
        (lag, cpu)
        for window in map(json.loads, lag_file.read_text().splitlines())
        if since <= window["time"] <= until
        for lag, cpu in window["lags"]
    ]


def stall_cpu(probes: list[tuple[float, float]]) -> tuple[float, int] | None:
    stalls = [(lag, cpu) for lag, cpu in probes if lag >= 0.05]
    if not stalls:
        return None
    return sum(cpu for _, cpu in stalls) / sum(lag + 0.01 for lag, _ in stalls), len(stalls)


def late_probes(
    lag_file: Path, since: float, until: float
) -> list[tuple[float, list[tuple[str, int, float]]]]:
    """The probes 100 ms late or more, the least late first, each with the callbacks it waited
    behind (by kind: how many ran, for how long)."""
    if not lag_file.exists():
        return []
    late = [
        (lag, [(kind, count, seconds) for kind, count, seconds in kinds])  # JSON's lists as tuples
        for window in map(json.loads, lag_file.read_text().splitlines())
        if since <= window["time"] <= until
        for lag, kinds in window.get("late", [])
    ]
    return sorted(late, key=lambda probe: probe[0])


def gc_pauses(lag_file: Path, since: float, until: float) -> list[GcPause]:
    """Each garbage collection between `since` and `until`, as the probe recorded it."""
    if not lag_file.exists():
        return []
    return [
        tuple(pause)
        for window in map(json.loads, lag_file.read_text().splitlines())
        if since <= window["time"] <= until
        for pause in window["gc"]
    ]


async def heap_census(lag_file: Path) -> dict[str, Any] | None:
    """What the server's heap holds now, from its probe (a census of every object: a second
    or so of its loop, so taken once a phase is measured)."""
    asked, answer = Path(f"{lag_file}.census-asked"), Path(f"{lag_file}.census")
    answer.unlink(missing_ok=True)
    asked.touch()
    for _ in range(600):
        await asyncio.sleep(0.1)
        if answer.exists() and not asked.exists():
            with contextlib.suppress(ValueError):
                census: dict[str, Any] = json.loads(answer.read_text())
                return census
    return None


def slow_callbacks(lag_file: Path, since: float, until: float) -> list[tuple[float, str]]:
    """The callbacks that held the server's loop 50 ms or more between `since` and `until`."""
    if not lag_file.exists():
        return []
    return [
        (seconds, what)
        for window in map(json.loads, lag_file.read_text().splitlines())
        if since <= window["time"] < until
        for seconds, what in window.get("slow", [])
    ]


def server_with_probe(
    kubeconfig: Path, work: Path, viewers: int, settings: dict[str, Any],
    engine_settings: dict[str, Any],
) -> tuple[DistrunServer, Path]:  # fmt: skip
    """A distrun server with the event-loop probe of bench_soak.py loaded beside it."""
    probe_dir = work / f"probe-{len(list(work.iterdir()))}"
    probe_dir.mkdir()
    (probe_dir / "soak_lag_probe.py").write_text(LAG_PROBE)
    lag_file = probe_dir / "lag.jsonl"
    os.environ["SOAK_LAG_FILE"] = str(lag_file)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(probe_dir), os.environ["PYTHONPATH"]])
    extensions = {"distrun": True, "soak_lag_probe": True}
    engines = engine_config(kubeconfig)
    for engine in engines.values():
        engine["kwargs"] = {**engine["kwargs"], **engine_settings}
    server = DistrunServer(
        engines,
        extra_config={
            "ServerApp": {"jpserver_extensions": extensions},
            # One user watches every job here: more websockets than one user may hold.
            "DistrunApp": {"max_streams_per_user": viewers + 10, **settings},
        },
    )
    return server, lag_file


async def shared_phases(
    args: argparse.Namespace, jobs: Jobs, admin: Any, server: DistrunServer, lag_file: Path,
    quiet_rate: float,
) -> list[PhaseResult]:  # fmt: skip
    """`--viewers` websocket viewers per job on one server, then one per job (the places the
    first phase's viewers left must be free again)."""
    many = [(Viewer(job), on_server(server)) for job in jobs.ids for _ in range(args.viewers)]
    shared = await phase(
        f"shared, {args.viewers} viewers a job", admin, args.phase_seconds, many, quiet_rate,
        server, lag_file, jobs,
    )  # fmt: skip
    one_each = [(Viewer(job), on_server(server)) for job in jobs.ids]
    single = await phase(
        "shared, 1 viewer a job", admin, args.phase_seconds, one_each, quiet_rate, server, lag_file,
        jobs,
    )  # fmt: skip
    return [shared, single]


async def run_phases(
    args: argparse.Namespace, jobs: Jobs, admin: Any, kubeconfig: Path
) -> list[PhaseResult]:
    work = Path(tempfile.mkdtemp(prefix="distrun-kube-soak-"))
    seconds = args.phase_seconds
    quiet = await phase("quiet", admin, seconds, [], 0.0)
    quiet_rate = quiet.requests_per_minute
    results = [quiet]
    viewers = len(jobs.ids) * args.viewers
    first, lag_file = server_with_probe(
        kubeconfig, work, viewers, args.server_config, args.engine_config
    )
    second, _ = server_with_probe(kubeconfig, work, viewers, args.server_config, args.engine_config)
    await start_server(first, args)
    await start_server(second, args)
    try:
        results += await shared_phases(args, jobs, admin, first, lag_file, quiet_rate)
        results.append(await naive_phase(args, jobs, admin, kubeconfig, quiet_rate))
        halves = [
            (Viewer(job), on_server(first if index % 2 else second))
            for job in jobs.ids
            for index in range(args.viewers)
        ]
        results.append(await phase("2 servers", admin, seconds, halves, quiet_rate, jobs=jobs))
    finally:
        await asyncio.to_thread(first.stop)
        await asyncio.to_thread(second.stop)
    return results


async def start_server(server: DistrunServer, args: argparse.Namespace) -> None:
    """Starts a measured server; with --harness-nice, at the priority the harness left (0)."""
    await asyncio.to_thread(server.start)
    if args.harness_nice and server.process.process is not None:
        try:
            psutil.Process(server.process.process.pid).nice(0)
        except psutil.AccessDenied:
            print("  (the server could not be given back priority 0: it runs niced too)")


async def curve_step(
    args: argparse.Namespace, jobs: Jobs, admin: Any, kubeconfig: Path, pods: int
) -> list[PhaseResult]:
    """At `pods` pods: the quiet phase, then a fresh server's two shared phases."""
    work = Path(tempfile.mkdtemp(prefix="distrun-kube-soak-"))
    quiet = await phase("quiet", admin, args.phase_seconds, [], 0.0)
    server, lag_file = server_with_probe(
        kubeconfig, work, len(jobs.ids) * args.viewers, args.server_config, args.engine_config
    )
    await start_server(server, args)
    try:
        shared = await shared_phases(args, jobs, admin, server, lag_file, quiet.requests_per_minute)
    finally:
        await asyncio.to_thread(server.stop)
    results = [quiet, *shared]
    for result in results:
        result.pods = pods
    return results


async def naive_phase(
    args: argparse.Namespace, jobs: Jobs, admin: Any, kubeconfig: Path, quiet_rate: float
) -> PhaseResult:
    """Every viewer its own engine: its own feed, as every `follow` had before sharing."""
    engines = [
        KubeflowEngine(kubeconfig=str(kubeconfig), namespace=NAMESPACE_TEMPLATE)
        for _ in range(len(jobs.ids) * args.viewers)
    ]
    viewers: list[tuple[Viewer, Starter]] = [
        (Viewer(job), lambda viewer, stop, engine=engine: engine_viewer(engine, viewer, stop))
        for engine, job in zip(
            engines,
            itertools.chain.from_iterable(itertools.repeat(job, args.viewers) for job in jobs.ids),
            strict=True,
        )
    ]
    try:
        return await phase(
            "naive (a follow per viewer)", admin, args.phase_seconds, viewers, quiet_rate,
            jobs=jobs,
        )  # fmt: skip
    finally:
        await asyncio.gather(*(engine.close() for engine in engines))


# --- report -----------------------------------------------------------------------------------


INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")


def report(results: list[PhaseResult], args: argparse.Namespace) -> int:
    if INOTIFY_INSTANCES.exists():
        # kwok reads logs with the kubelet's own code, an inotify instance per followed log:
        # past this limit (128 by default) follows fail at once and are made again, as on a
        # real node.
        limit = int(INOTIFY_INSTANCES.read_text())
        print(f"\nfs.inotify.max_user_instances here: {limit}")
        most = max(result.pods for result in results)
        if limit < most:
            print(
                f"  below the {most} pods followed: kwok's follows past it fail and are made "
                "again (a request storm of the cluster's, not distrun's); raise it with "
                f"`sysctl -w fs.inotify.max_user_instances={2 * most}`"
            )
    if args.harness_nice:
        print(f"\nthe harness at nice {args.harness_nice}, the measured servers at 0")
    print(
        f"\n{args.replicas} replicas a job, {args.rate} lines/s each "
        f"({'every job at the same moment' if args.in_step else 'each job at its own moment'}), "
        f"phases of "
        f"{args.phase_seconds:.0f} s; requests/min less the quiet phase's at the same size:"
    )
    print(
        f"{'pods':>5} {'phase':30} {'viewers':>7} {'log streams':>11} {'watches*':>9} "
        f"{'requests/min':>12} {'lines':>9} {'lost/bad':>8} {'refused':>7} "
        f"{'lag p99/max ms':>15} {'RSS MiB':>13}"
    )
    for result in results:
        lag = "" if result.lag is None else f"{result.lag[0] * 1000:.0f}/{result.lag[1] * 1000:.0f}"
        rss = "" if not result.rss_mib else f"{result.rss_mib[0]:.0f}-{max(result.rss_mib):.0f}"
        print(
            f"{result.pods:>5} {result.name:30} {result.viewers:>7} {result.log_streams:>11} "
            f"{result.watches:>9} {result.requests_per_minute:>12.0f} {result.lines:>9,} "
            f"{len(result.errors) - result.refused:>8} {result.refused:>7} {lag:>15} {rss:>13}"
        )
    print("  * pod and PyTorchJob watches open, the operator's and kwok's included (every phase)")
    print(f"  measured once every viewer had caught up (or after {WARM_UP_LIMIT:.0f} s); before:")
    for result in results:
        if result.viewers:
            seconds, requests, caught_up = result.warm_up
            print(
                f"  warm-up of {result.name} at {result.pods} pods: {seconds:.0f} s, "
                f"{requests:,} requests beyond the cluster's own, "
                f"{caught_up} of {result.viewers} viewers caught up; served most: "
                + ", ".join(f"{kind} {count}" for kind, count in result.warm_busiest)
            )
    print("  lag: the shared server's event loop (a 10 ms sleep's overshoot; bound 100 ms)")
    if os.environ.get("SOAK_YOUNG_CENSUS") == "1":
        print(
            "  SOAK_YOUNG_CENSUS=1: each young collection's census ran on the server's loop, "
            "and the lag above includes it (a diagnostic run, not a measurement)"
        )
    for result in results:
        if result.cpu is not None:
            server, viewers, machine = result.cpu
            print(
                f"  {result.name} at {result.pods} pods: CPU a second: the server {server:.2f}, "
                f"the viewers (this process) {viewers:.2f}, the machine {machine:.2f} of "
                f"{psutil.cpu_count()}"
            )
        if result.stall_cpu is not None:
            share, count = result.stall_cpu
            print(
                f"  {result.name} at {result.pods} pods: {count} probes 50 ms late or more, "
                f"the loop's thread on CPU {share:.0%} of their time (the rest: not scheduled)"
            )
            print(
                "    the latest: "
                + ", ".join(
                    f"{lag * 1000:.0f} ms (the loop's thread on CPU {cpu * 1000:.0f} ms)"
                    for lag, cpu in reversed(result.worst_probes)
                )
            )
        for lag, kinds in reversed(result.late):
            print(
                f"    {lag * 1000:.0f} ms late, behind: "
                + ", ".join(
                    f"{kind} x{count} {seconds * 1000:.0f} ms" for kind, count, seconds in kinds[:5]
                )
            )
        if result.gc_pauses:
            longest = max(result.gc_pauses, key=lambda pause: pause[1])
            full = [pause for pause in result.gc_pauses if pause[0] == 2]
            heaps = [pause[2] for pause in full if pause[2] is not None]
            print(
                f"  {result.name} at {result.pods} pods: {len(result.gc_pauses)} collections, "
                f"the longest {longest[1] * 1000:.0f} ms (generation {longest[0]}); "
                f"{len(full)} full, {max(heaps, default=0):,} objects after them at most"
            )
            for generation in (0, 1, 2):
                of_generation = [p for p in result.gc_pauses if p[0] == generation]
                if of_generation:
                    pauses = sorted(p[1] for p in of_generation)
                    worst = max(of_generation, key=lambda pause: pause[1])
                    scanned = "" if worst[5] is None else f", scanned {worst[5]}"
                    print(
                        f"    generation {generation}: {len(pauses)}, median "
                        f"{percentile(pauses, 0.5) * 1000:.1f} ms, max {pauses[-1] * 1000:.0f} ms,"
                        f" {sum(pauses) * 1000:.0f} ms in all; the longest: CPU "
                        f"{worst[4] * 1000:.0f} ms, collected {worst[3]:,}{scanned}"
                    )
        if result.census:
            print_census(result)
        for when, slow in (("warm-up", result.slow_warm_up), ("phase", result.slow_phase)):
            if slow:
                total = sum(seconds for seconds, _ in slow)
                print(
                    f"  {result.name} at {result.pods} pods, {when}: {len(slow)} callbacks held "
                    f"the loop 50 ms or more ({total:.1f} s in all); the longest:"
                )
                for seconds, what in sorted(slow, reverse=True)[:5]:
                    print(f"    {seconds * 1000:6.0f} ms  {what[:200]}")
    for result in results:
        served = ", ".join(f"{kind} {count}" for kind, count in result.busiest)
        print(f"  served most in {result.name} at {result.pods} pods: {served}")
    errors = [error for result in results for error in result.errors]
    for error in errors[:20]:
        print("  ERROR", error)
    return 1 if errors else 0


def print_census(result: PhaseResult) -> None:
    census = result.census or {}
    heap = census.get("heap_mib", {})
    print(
        f"  {result.name} at {result.pods} pods, heap as it ended: RSS "
        f"{census['rss_kib'] / 1024:.0f} MiB; C heap (mallinfo2) arena {heap.get('arena')} MiB, "
        f"in use {heap.get('in_use')}, free {heap.get('free')}, mapped {heap.get('mapped')} "
        f"({heap.get('mapped_blocks')} blocks); {census['objects']:,} objects tracked "
        f"({census['frozen']:,} frozen), {census['tasks']} tasks; largest by shallow size:"
    )
    for kind, count, kib in census["by_size"][:15]:
        print(f"    {kind:40} {count:>9,} {kib / 1024:8.1f} MiB")


async def soak(args: argparse.Namespace) -> int:
    sizes = args.pods or [args.jobs * args.replicas]
    with KubeCluster(ensure_all(print)) as cluster:
        kubeconfig = prepare_server_identity(cluster)
        add_nodes(cluster, max(sizes))
        start_training_operator(cluster, cluster.binaries.training_operator, NAMESPACE)
        async with cluster.api_client() as admin:
            jobs = Jobs({})
            stop_writing = asyncio.Event()
            writer = asyncio.create_task(jobs.write_on(args.rate, stop_writing, args.in_step))
            results: list[PhaseResult] = []
            try:
                for pods in sizes:
                    more = pods // args.replicas - len(jobs.ids)
                    print(f"submitting {more} more jobs ({pods} pods) ...", flush=True)
                    await submit_jobs(cluster, admin, jobs, more, args.replicas)
                    await wait_running(admin, jobs, args.replicas)
                    if args.pods:
                        results += await curve_step(args, jobs, admin, kubeconfig, pods)
                    else:
                        results += await run_phases(args, jobs, admin, kubeconfig)
                        for result in results:
                            result.pods = pods
            finally:
                stop_writing.set()
                await writer
    return report(results, args)


def server_setting(text: str) -> tuple[str, Any]:
    name, equals, value = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(f"{text!r}: write NAME=VALUE")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--viewers", type=int, default=4, help="per job")
    parser.add_argument("--phase-seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=2.0, help="lines per second per replica")
    parser.add_argument("--quick", action="store_true", help="10 jobs, 20 s phases")
    parser.add_argument(
        "--in-step",
        action="store_true",
        help="every job's replicas write at the same moment (the worst case), not each job at "
        "its own moment in the second",
    )
    parser.add_argument(
        "--pods",
        type=lambda text: [int(part) for part in text.split(",")],
        help="the curve: sizes in pods, one after the other in the same cluster, e.g. "
        "200,600,1200 (jobs of --replicas; quiet and the two shared phases at each)",
    )
    parser.add_argument(
        "--server-config",
        action="append",
        default=[],
        metavar="TRAIT=VALUE",
        help="a DistrunApp setting for the servers measured, e.g. young_collection_threshold=5000 "
        "(VALUE read as JSON, else as a string); repeatable",
    )
    parser.add_argument(
        "--engine-config",
        action="append",
        default=[],
        metavar="KWARG=VALUE",
        help="a Kubernetes engine setting for the servers measured, e.g. log_http2=false "
        "(VALUE read as JSON, else as a string); repeatable",
    )
    parser.add_argument(
        "--harness-nice",
        type=int,
        default=0,
        metavar="N",
        help="run the harness (this process's viewers, the cluster, the operator) at nice N and "
        "the measured servers at 0, as if the viewers' browsers and the cluster ran elsewhere "
        "(on this 2-core machine they take over half of it)",
    )
    args = parser.parse_args()
    if args.harness_nice:
        os.nice(args.harness_nice)  # before the cluster starts: its processes inherit it
    args.server_config = dict(map(server_setting, args.server_config))
    args.engine_config = dict(map(server_setting, args.engine_config))
    if args.quick:
        args.jobs, args.phase_seconds = 10, 20.0
    sys.exit(asyncio.run(soak(args)))


if __name__ == "__main__":
    main()
