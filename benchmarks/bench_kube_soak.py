"""Kubernetes soak: many jobs, many viewers, one real API server; what distrun's followers cost
the API server, counted by the API server itself, against the naive baseline in the same run.

    PYTHONPATH=server_ext python benchmarks/bench_kube_soak.py [--jobs 50] [--replicas 4]
        [--viewers 4] [--phase-seconds 60] [--rate 2]
    PYTHONPATH=server_ext python benchmarks/bench_kube_soak.py --quick   # 10 jobs, 20 s phases

The tier's control plane (etcd, kube-apiserver, kwok playing the kubelet on as many fake nodes
as the pods need) and the real Training Operator v1.9.4 run `--jobs` PyTorchJobs of
`--replicas` replicas, submitted by alice through distrun's Kubeflow engine; every replica
"prints" a numbered line `--rate` times a second (written to the log kwok serves). Then, on the
same running jobs, one phase after another, each `--phase-seconds` long:

  quiet     nobody follows: the cluster's own requests (operator, kwok, scheduler), subtracted
            from the phases below;
  shared    one distrun server (a real jupyter_server), `--viewers` websocket viewers per job;
  shared-1  the same server, one viewer per job: the load must not grow with viewers;
  naive     the baseline, one follow per viewer as before 2026-11-25: every viewer its own
            KubeflowEngine in this process, so each runs its own job watch, pod watch and log
            stream per replica, exactly as one `follow` did then;
  2 servers two distrun servers (two hub users' servers), half the viewers each.

For each: the pod-log streams and watches open at the API server in mid-phase
(`apiserver_longrunning_requests`) and the requests it served during the phase
(`apiserver_request_total`), per minute, less the quiet phase's. Every viewer checks every line
(seqs gap-free from where it started, each text the line written). For the shared server: its
event-loop lag (p99, max: a 10 ms sleep's overshoot, measured inside the server by the probe of
bench_soak.py) and its RSS at the start and end of its phases. Exits 1 if a line was lost,
repeated or altered.
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

PODS_PER_NODE = 100
WARM_UP = 5.0  # seconds for a phase's viewers to connect and catch up before measuring
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
                viewer.errors.append(f"{viewer.job_id}: the server closed the stream")
                return
            event = json.loads(message)
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
    written: int = 0  # lines written to each replica so far

    @property
    def ids(self) -> list[str]:
        return list(self.logs)

    async def write_on(self, rate: float, stop: asyncio.Event) -> None:
        """One more numbered line in every replica's log, `rate` times a second."""
        start = time.monotonic()
        while not stop.is_set():
            for job_logs in self.logs.values():
                for replica, log in job_logs.items():
                    log.write(text(replica, self.written))
            self.written += 1
            delay = start + self.written / rate - time.monotonic()
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


async def submit_jobs(cluster: KubeCluster, admin: Any, count: int, replicas: int) -> Jobs:
    """`count` PyTorchJobs of alice's, each replica's log registered before its pod exists."""
    engine = KubeflowEngine(
        api_client=admin, namespace=NAMESPACE, limits=Limits(max_jobs_per_user=count + 1)
    )
    spec = JobSpec.from_dict(
        {"framework": "pytorch", "code": "pass\n", "roles": {"worker": {"replicas": replicas - 1}}}
    )
    jobs = Jobs({})
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
    return jobs


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
    busiest: list[tuple[str, int]] = field(default_factory=list)
    lag: tuple[float, float] | None = None  # p99, max
    rss_mib: list[float] = field(default_factory=list)  # at the start, middle and end


Starter = Callable[[Viewer, asyncio.Event], Awaitable[None]]


async def phase(
    name: str,
    admin: Any,
    seconds: float,
    viewers: list[tuple[Viewer, Starter]],
    quiet: float,
    server: DistrunServer | None = None,
) -> PhaseResult:
    """The API server's load over `seconds` while `viewers` follow (after a warm-up), and the
    RSS of `server` at the start, middle and end."""
    rss: list[float] = []

    def sample() -> None:
        if server is not None:
            rss.append(server.process.memory_kib("VmRSS") / 1024)

    stop = asyncio.Event()
    tasks = [asyncio.create_task(start(viewer, stop)) for viewer, start in viewers]
    try:
        await asyncio.sleep(WARM_UP)  # connected and caught up
        start = await apiserver_load(admin)
        sample()
        received = sum(viewer.received for viewer, _ in viewers)
        began = time.monotonic()
        await asyncio.sleep(seconds / 2)
        middle = await apiserver_load(admin)
        sample()
        await asyncio.sleep(seconds / 2)
        end = await apiserver_load(admin)
        sample()
        elapsed = time.monotonic() - began
    finally:
        stop.set()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
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
        end.busiest_since(start),
        rss_mib=rss,
    )


def on_server(server: DistrunServer) -> Starter:
    return lambda viewer, stop: websocket_viewer(server, viewer, stop)


def lag_figures(lag_file: Path, since: float) -> tuple[float, float] | None:
    if not lag_file.exists():
        return None
    lags = [
        lag
        for window in map(json.loads, lag_file.read_text().splitlines())
        if window["time"] >= since
        for lag, _cpu in window["lags"]
    ]
    return (percentile(lags, 0.99), max(lags)) if lags else None


def server_with_probe(kubeconfig: Path, work: Path, viewers: int) -> tuple[DistrunServer, Path]:
    """A distrun server with the event-loop probe of bench_soak.py loaded beside it."""
    probe_dir = work / f"probe-{len(list(work.iterdir()))}"
    probe_dir.mkdir()
    (probe_dir / "soak_lag_probe.py").write_text(LAG_PROBE)
    lag_file = probe_dir / "lag.jsonl"
    os.environ["SOAK_LAG_FILE"] = str(lag_file)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(probe_dir), os.environ["PYTHONPATH"]])
    extensions = {"distrun": True, "soak_lag_probe": True}
    server = DistrunServer(
        engine_config(kubeconfig),
        extra_config={
            "ServerApp": {"jpserver_extensions": extensions},
            # One user watches every job here: more websockets than one user may hold.
            "DistrunApp": {"max_streams_per_user": viewers + 10},
        },
    )
    return server, lag_file


async def run_phases(
    args: argparse.Namespace, jobs: Jobs, admin: Any, kubeconfig: Path
) -> list[PhaseResult]:
    work = Path(tempfile.mkdtemp(prefix="distrun-kube-soak-"))
    seconds = args.phase_seconds
    quiet = await phase("quiet", admin, seconds, [], 0.0)
    quiet_rate = quiet.requests_per_minute
    results = [quiet]
    viewers = len(jobs.ids) * args.viewers
    first, lag_file = server_with_probe(kubeconfig, work, viewers)
    second, _ = server_with_probe(kubeconfig, work, viewers)
    await asyncio.to_thread(first.start)
    await asyncio.to_thread(second.start)
    try:
        all_viewers = [
            (Viewer(job), on_server(first)) for job in jobs.ids for _ in range(args.viewers)
        ]
        since = time.time() + WARM_UP
        shared = await phase("shared", admin, seconds, all_viewers, quiet_rate, first)
        shared.lag = lag_figures(lag_file, since)
        results.append(shared)
        one_each = [(Viewer(job), on_server(first)) for job in jobs.ids]
        results.append(await phase("shared, 1 viewer a job", admin, seconds, one_each, quiet_rate))
        results.append(await naive_phase(args, jobs, admin, kubeconfig, quiet_rate))
        halves = [
            (Viewer(job), on_server(first if index % 2 else second))
            for job in jobs.ids
            for index in range(args.viewers)
        ]
        results.append(await phase("2 servers", admin, seconds, halves, quiet_rate))
    finally:
        await asyncio.to_thread(first.stop)
        await asyncio.to_thread(second.stop)
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
            "naive (a follow per viewer)", admin, args.phase_seconds, viewers, quiet_rate
        )
    finally:
        await asyncio.gather(*(engine.close() for engine in engines))


# --- report -----------------------------------------------------------------------------------


INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")


def report(results: list[PhaseResult], args: argparse.Namespace) -> int:
    replicas = args.jobs * args.replicas
    if INOTIFY_INSTANCES.exists():
        # kwok reads logs with the kubelet's own code, an inotify instance per followed log:
        # past this limit (128 by default) follows fail at once and are made again, as on a
        # real node.
        print(f"\nfs.inotify.max_user_instances here: {INOTIFY_INSTANCES.read_text().strip()}")
    print(
        f"\n{args.jobs} jobs x {args.replicas} replicas ({replicas} pods), {args.rate} lines/s "
        f"each, phases of {args.phase_seconds:.0f} s; requests/min less the quiet phase's "
        f"({results[0].requests_per_minute:.0f}/min of the cluster's own):"
    )
    print(
        f"{'phase':32} {'viewers':>7} {'log streams':>11} {'watches*':>9} {'requests/min':>12} {'lines':>9}  lost/bad"
    )
    for result in results:
        print(
            f"{result.name:32} {result.viewers:>7} {result.log_streams:>11} {result.watches:>9} "
            f"{result.requests_per_minute:>12.0f} {result.lines:>9,}  {len(result.errors)}"
        )
    print("  * pod and PyTorchJob watches open, the operator's and kwok's included (every phase)")
    for result in results:
        served = ", ".join(f"{kind} {count}" for kind, count in result.busiest)
        print(f"  served most in {result.name}: {served}")
    shared, naive = results[1], results[3]
    print(
        f"log streams: shared {shared.log_streams} for {replicas} replicas, naive "
        f"{naive.log_streams} ({naive.log_streams / max(shared.log_streams, 1):.1f}x)"
    )
    if shared.lag is not None:
        p99, worst = shared.lag
        print(
            f"shared server event-loop lag: p99 {p99 * 1000:.1f} ms, max {worst * 1000:.1f} ms (bound 100 ms)"
        )
    if shared.rss_mib:
        start, middle, end = shared.rss_mib
        print(
            f"shared server RSS after warm-up: {start:.0f} MiB, mid-phase {middle:.0f} MiB, "
            f"at the end {end:.0f} MiB"
        )
    errors = [error for result in results for error in result.errors]
    for error in errors[:20]:
        print("  ERROR", error)
    return 1 if errors else 0


async def soak(args: argparse.Namespace) -> int:
    with KubeCluster(ensure_all(print)) as cluster:
        kubeconfig = prepare_server_identity(cluster)
        add_nodes(cluster, args.jobs * args.replicas)
        start_training_operator(cluster, cluster.binaries.training_operator, NAMESPACE)
        async with cluster.api_client() as admin:
            print(f"submitting {args.jobs} jobs ...", flush=True)
            jobs = await submit_jobs(cluster, admin, args.jobs, args.replicas)
            await wait_running(admin, jobs, args.replicas)
            stop_writing = asyncio.Event()
            writer = asyncio.create_task(jobs.write_on(args.rate, stop_writing))
            try:
                results = await run_phases(args, jobs, admin, kubeconfig)
            finally:
                stop_writing.set()
                await writer
    return report(results, args)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--viewers", type=int, default=4, help="per job")
    parser.add_argument("--phase-seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=float, default=2.0, help="lines per second per replica")
    parser.add_argument("--quick", action="store_true", help="10 jobs, 20 s phases")
    args = parser.parse_args()
    if args.quick:
        args.jobs, args.phase_seconds = 10, 20.0
    sys.exit(asyncio.run(soak(args)))


if __name__ == "__main__":
    main()
