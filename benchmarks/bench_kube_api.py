"""Kubernetes engines against the test tier's real control plane (etcd, kube-apiserver, kwok):

1. API calls per submission, get, list, cancel, for each engine (a counting ApiClient);
   a submission took 8 calls on the Kubeflow engine before 2026-11-24 (a list per job kind);
1b. job creation to every pod Running with the REAL Training Operator v1.9.4 reconciling the
   job, against the same number of pods created directly (the floor: scheduler + kwok);
2. time from job creation to the first log line through `engine.follow`, with the pods created
   the way the operator would (no operator runs here) 0.5 s after the job, starting Pending;
3. log latency with 8 replicas side by side, all reading the same pods at once: a line appended
   to every replica's log, until shown by `engine.follow`, by 8 `kubectl logs -f` (Debian's
   /usr/bin/kubectl), and by the Kubeflow Training SDK's
   `TrainingClient.get_job_logs(follow=True, is_master=False)`;
4. which of them show a replica whose pod is Pending when they start, and one whose pod is
   created after they started.

The SDK (kubeflow-training 1.9.4) runs in its own throwaway virtualenv, made with pip on first
use at $DISTRUN_KUBEFLOW_SDK_VENV (default /tmp/distrun-kubeflow-sdk).

Run: PYTHONPATH=server_ext python benchmarks/bench_kube_api.py [--parts calls,creation,logs,late]
(builds or reuses the cached binaries; a cold build takes many minutes). `--parts` runs some
of the four (default: all).
"""

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from _common import REPO, skip, use_repo_package

use_repo_package()
sys.path.insert(0, str(REPO))

import kubernetes_asyncio.watch
from kubernetes_asyncio import client, config
from tests.k8s.binaries import ensure_all
from tests.k8s.cluster import KubeCluster
from tests.k8s.controllers import start_training_operator

from distrun.core.logs import LogBatch
from distrun.core.spec import JobSpec
from distrun.engines.kube.engine import KubeEngine
from distrun.engines.kube.kubeflow import KubeflowEngine
from distrun.engines.kube.trainer import TrainerEngine
from distrun.engines.kube.volcano import VolcanoEngine

REPLICAS = 8
ROUNDS = 10  # the SDK takes ~7 s a round, and every round waits for every tool


class CountingApiClient(client.ApiClient):  # type: ignore[misc]
    """Counts every HTTP request by method and resource path."""

    def __init__(self, configuration: Any) -> None:
        super().__init__(configuration)
        self.calls: Counter[str] = Counter()

    async def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        self.calls[method] += 1
        return await super().request(method, url, *args, **kwargs)


async def counting_client(kubeconfig: str) -> CountingApiClient:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
    return CountingApiClient(configuration)


def spec(workers: int = 1) -> JobSpec:
    return JobSpec.from_dict(
        {"framework": "pytorch", "code": "print(1)\n", "roles": {"worker": {"replicas": workers}}}
    )


async def count_calls(api: CountingApiClient, engines: dict[str, KubeEngine]) -> None:
    print("\n## API calls per operation (HTTP requests to the API server)")
    print(f"{'engine':10} {'submit':>7} {'get':>5} {'list':>5} {'cancel':>7}")
    for name, engine in engines.items():
        row = []
        for action in ("submit", "get", "list", "cancel"):
            api.calls.clear()
            if action == "submit":
                job = await engine.submit(spec(), "alice")
            elif action == "get":
                await engine.get_job(job.id, "alice")
            elif action == "list":
                await engine.list_jobs("alice")
            else:
                await engine.cancel(job.id, "alice")
            row.append(sum(api.calls.values()))
        print(f"{name:10} {row[0]:>7} {row[1]:>5} {row[2]:>5} {row[3]:>7}")


def operator_pod(job: dict[str, Any], replica: str, start_after: str | None) -> dict[str, Any]:
    role, index = replica.rsplit("-", 1)
    meta = job["metadata"]
    annotations = {"kwok.distrun.test/start-after": start_after} if start_after else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-{replica}",
            "annotations": annotations,
            "labels": {
                "training.kubeflow.org/job-name": meta["name"],
                "training.kubeflow.org/replica-type": role,
                "training.kubeflow.org/replica-index": index,
            },
            "ownerReferences": [
                {
                    "apiVersion": job["apiVersion"],
                    "kind": job["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "pytorch", "image": "registry.invalid/x:1"}],
        },
    }


SDK_VENV = Path(os.environ.get("DISTRUN_KUBEFLOW_SDK_VENV", "/tmp/distrun-kubeflow-sdk"))
SDK_PACKAGE = "kubeflow-training==1.9.4"  # the Training Operator v1 SDK (TrainingClient)
# Run in the SDK's own virtualenv: follow every pod of the job, as a notebook user would.
SDK_FOLLOW = """
import sys
from kubeflow.training import TrainingClient
kubeconfig, namespace, name = sys.argv[1:4]
sdk = TrainingClient(config_file=kubeconfig, namespace=namespace, job_kind="PyTorchJob")
sdk.get_job_logs(name, namespace, is_master=False, follow=True)
"""
SDK_LINE_RE = re.compile(r"^\[Pod (?P<pod>[^\]]+)\]: (?P<text>.*)$")
SEEN_TIMEOUT = 15.0  # seconds a tool gets to show a line before it counts as never shown


def kubeflow_sdk_python() -> Path | None:
    """The SDK's interpreter, its throwaway virtualenv made on first use (pip, from PyPI)."""
    python = SDK_VENV / "bin" / "python"
    if not python.exists():
        print(f"(installing {SDK_PACKAGE} into {SDK_VENV} for the comparison)")
        try:
            subprocess.run([sys.executable, "-m", "venv", str(SDK_VENV)], check=True)
            pip = [str(python), "-m", "pip", "install", "-q", SDK_PACKAGE]
            subprocess.run(pip, check=True)
        except (OSError, subprocess.CalledProcessError) as error:
            print(f"the Kubeflow SDK could not be installed ({error}): no SDK comparison")
            return None
    return python


class Sightings:
    """When each tool first showed each (replica, text), on one monotonic clock."""

    def __init__(self) -> None:
        self.times: dict[str, dict[tuple[str, str], float]] = {}
        self.labels: dict[str, dict[str, str]] = {}  # tool -> text -> the pod it was shown as
        self.changed = asyncio.Event()

    def saw(self, tool: str, replica: str, text: str) -> None:
        self.times.setdefault(tool, {}).setdefault((replica, text), time.monotonic())
        self.labels.setdefault(tool, {})[text] = replica
        self.changed.set()

    def when(self, tool: str, replica: str, text: str) -> float | None:
        return self.times.get(tool, {}).get((replica, text))

    def shown(self, tool: str, text: str) -> bool:
        """Whether `tool` showed `text`, under whichever replica's name."""
        return text in self.labels.get(tool, {})

    async def wait(self, tools: list[str], keys: list[tuple[str, str]], timeout: float) -> None:
        """Until every tool showed every (replica, text), or `timeout`."""
        await self._wait(lambda: all(self.when(t, r, x) for t in tools for r, x in keys), timeout)

    async def wait_shown(self, tools: list[str], texts: list[str], timeout: float) -> None:
        await self._wait(lambda: all(self.shown(t, x) for t in tools for x in texts), timeout)

    async def _wait(self, done: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), remaining)


class Tools:
    """distrun's follow, one `kubectl logs -f` per pod, and the Kubeflow SDK, reading the same
    job's pods at once; each reader records what it shows in `sightings`."""

    def __init__(self, cluster: KubeCluster, namespace: str, job_id: str) -> None:
        self.cluster, self.namespace, self.job_id = cluster, namespace, job_id
        self.sightings = Sightings()
        self.processes: list[asyncio.subprocess.Process] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.names: list[str] = []

    def replica_of_pod(self, pod: str) -> str:
        return pod.removeprefix(f"{self.job_id}-")

    def start_distrun(self, engine: KubeEngine) -> None:
        self.names.append("distrun")

        async def read() -> None:
            async for event in engine.follow(self.job_id, "alice"):
                if isinstance(event, LogBatch):
                    for line in event.lines:
                        self.sightings.saw("distrun", line.replica, line.text)

        self.tasks.append(asyncio.create_task(read()))

    async def start_kubectl(self, pods: list[str]) -> None:
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            print("kubectl not found: no kubectl comparison")
            return
        self.names.append("kubectl")
        kubeconfig = str(self.cluster.kubeconfig("admin"))
        for pod in pods:
            argv = [kubectl, f"--kubeconfig={kubeconfig}", "-n", self.namespace, "logs", "-f", pod]
            process = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
            )
            self._read(process, "kubectl", lambda text, pod=pod: (self.replica_of_pod(pod), text))

    async def start_sdk(self) -> None:
        python = kubeflow_sdk_python()
        if python is None:
            return
        self.names.append("kubeflow-sdk")
        kubeconfig = str(self.cluster.kubeconfig("admin"))
        env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        process = await asyncio.create_subprocess_exec(
            str(python),
            "-u",
            "-c",
            SDK_FOLLOW,
            kubeconfig,
            self.namespace,
            self.job_id,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            env=env,
        )

        def parse(line: str) -> tuple[str, str] | None:
            match = SDK_LINE_RE.match(line)
            if match is None:
                return None
            return self.replica_of_pod(match["pod"]), match["text"]

        self._read(process, "kubeflow-sdk", parse)

    def _read(self, process: asyncio.subprocess.Process, tool: str, parse: Any) -> None:
        self.processes.append(process)

        async def read() -> None:
            assert process.stdout is not None
            while line := await process.stdout.readline():
                parsed = parse(line.decode(errors="replace").rstrip("\n"))
                if parsed is not None:
                    self.sightings.saw(tool, *parsed)

        self.tasks.append(asyncio.create_task(read()))

    async def stop(self) -> None:
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


OPERATOR_ROUNDS = 7
OPERATOR_REPLICAS = 4  # master + 3 workers


async def all_running(core: Any, namespace: str, selector: str, count: int) -> None:
    deadline = time.monotonic() + 120
    while True:
        pods = (await core.list_namespaced_pod(namespace, label_selector=selector)).items
        if len(pods) == count and all(p.status.phase == "Running" for p in pods):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{count} pods of {selector} never all ran")
        await asyncio.sleep(0.02)


def direct_pod(name: str, round_label: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench-round": round_label}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "pytorch", "image": "registry.invalid/x:1"}],
        },
    }


async def creation_to_running(cluster: KubeCluster, admin: Any) -> None:
    """Submit -> every pod Running, through the real operator, beside the same pods made
    directly (medians of OPERATOR_ROUNDS, one after the other in this run)."""
    namespace = "bench-operator"
    cluster.create_namespace(namespace)
    start_training_operator(cluster, cluster.binaries.training_operator, namespace)
    engine = KubeflowEngine(api_client=admin, namespace=namespace)
    core = client.CoreV1Api(admin)
    with_operator, direct = [], []
    for round_index in range(OPERATOR_ROUNDS):
        started = time.monotonic()
        job = await engine.submit(spec(OPERATOR_REPLICAS - 1), "alice")
        await all_running(
            core, namespace, f"training.kubeflow.org/job-name={job.id}", OPERATOR_REPLICAS
        )
        with_operator.append(time.monotonic() - started)
        label = f"r{round_index}"
        started = time.monotonic()
        for index in range(OPERATOR_REPLICAS):
            await core.create_namespaced_pod(
                namespace, direct_pod(f"direct-{label}-{index}", label)
            )
        await all_running(core, namespace, f"bench-round={label}", OPERATOR_REPLICAS)
        direct.append(time.monotonic() - started)
        await engine.delete(job.id, "alice")
    operator_median, direct_median = statistics.median(with_operator), statistics.median(direct)
    print(
        f"\n## Job creation to all {OPERATOR_REPLICAS} pods Running (median of {OPERATOR_ROUNDS})"
    )
    print(
        f"real Training Operator + kwok: {operator_median * 1000:7.0f} ms "
        f"(min {min(with_operator) * 1000:.0f}, max {max(with_operator) * 1000:.0f})"
    )
    print(
        f"the same pods created directly: {direct_median * 1000:6.0f} ms "
        f"(min {min(direct) * 1000:.0f}, max {max(direct) * 1000:.0f})"
    )
    print(f"ratio: {operator_median / direct_median:.2f}x")
    await engine.close()


async def wait_running(core: Any, namespace: str, pods: list[str]) -> None:
    deadline = time.monotonic() + 60
    for pod in pods:
        while (await core.read_namespaced_pod(pod, namespace)).status.phase != "Running":
            if time.monotonic() > deadline:
                raise TimeoutError(f"pod {pod} never ran")
            await asyncio.sleep(0.1)


async def first_line_and_latency(cluster: KubeCluster, admin: Any, namespace: str) -> None:
    engine = KubeflowEngine(api_client=admin, namespace=namespace)
    job = await engine.submit(spec(REPLICAS - 1), "alice")
    custom, core = client.CustomObjectsApi(admin), client.CoreV1Api(admin)
    obj = await custom.get_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", job.id
    )
    names = job.spec.replica_names()
    logs = {name: cluster.pod_log(namespace, f"{job.id}-{name}") for name in names}
    for name, log in logs.items():
        log.write(f"{name} hello")
    created = time.monotonic()
    events = engine.follow(job.id, "alice").__aiter__()

    async def create_pods() -> None:
        await asyncio.sleep(0.5)
        for name in names:
            await core.create_namespaced_pod(namespace, operator_pod(obj, name, "1s"))

    creator = asyncio.create_task(create_pods())
    first: float | None = None
    seen: dict[str, float] = {}
    while len(seen) < len(names):
        event = await asyncio.wait_for(events.__anext__(), 120)
        if isinstance(event, LogBatch):
            now = time.monotonic()
            first = first or now
            for line in event.lines:
                seen.setdefault(line.replica, now)
    await creator
    await events.aclose()  # type: ignore[attr-defined]
    print("\n## Job creation to first log line (pods created 0.5 s after the job, Pending 1 s)")
    print(
        f"distrun follow: first line {first - created:.2f} s, all {REPLICAS} replicas "
        f"{max(seen.values()) - created:.2f} s after creation"
    )

    # Every tool reads the same 8 running pods at once; a round appends a line to each log.
    tools = Tools(cluster, namespace, job.id)
    tools.start_distrun(engine)
    await tools.start_kubectl([f"{job.id}-{name}" for name in names])
    await tools.start_sdk()
    hello = [(name, f"{name} hello") for name in names]
    await tools.sightings.wait_shown(tools.names, [x for _, x in hello], 120)  # all reading
    latencies: dict[str, list[float]] = {tool: [] for tool in tools.names}
    missed: Counter[str] = Counter()
    for round_number in range(ROUNDS):
        text = f"tick {round_number}"
        start = time.monotonic()
        for log in logs.values():
            log.write(text)
        keys = [(name, text) for name in names]
        await tools.sightings.wait(tools.names, keys, SEEN_TIMEOUT)
        for tool in tools.names:
            times = [tools.sightings.when(tool, name, text) for name in names]
            if None in times:
                missed[tool] += 1
            else:
                latencies[tool].append(max(t for t in times if t is not None) - start)
    await tools.stop()
    print(
        f"\n## Log latency, {REPLICAS} replicas, {ROUNDS} rounds: a line appended to every "
        "replica's log until the tool has shown all of them (all tools read at once)"
    )
    for tool in tools.names:
        values = latencies[tool]
        if values:
            print(
                f"{tool:14} median {statistics.median(values) * 1000:7.1f} ms  "
                f"max {max(values) * 1000:7.1f} ms  rounds missed {missed[tool]}"
            )
        else:
            print(f"{tool:14} showed no round within {SEEN_TIMEOUT:.0f} s")


RUNNING_ROUNDS = 7


async def running_to_first_line(cluster: KubeCluster, admin: Any, namespace: str) -> None:
    """From a pod turning Running (its watch event here) to its first line shown: by distrun's
    follow, open since the job was submitted (a cell's output), and by `kubectl logs -f`
    started at that moment, as a person would start it once the pod runs."""
    engine = KubeflowEngine(api_client=admin, namespace=namespace)
    core = client.CoreV1Api(admin)
    results: dict[str, list[float]] = {"distrun": [], "kubectl": []}
    for _ in range(RUNNING_ROUNDS):
        job = await engine.submit(spec(1), "alice")
        obj = await client.CustomObjectsApi(admin).get_namespaced_custom_object(
            "kubeflow.org", "v1", namespace, "pytorchjobs", job.id
        )
        names = job.spec.replica_names()
        for name in names:
            cluster.pod_log(namespace, f"{job.id}-{name}").write(f"{name} first")
        tools = Tools(cluster, namespace, job.id)
        tools.start_distrun(engine)
        running: dict[str, float] = {}
        watch = asyncio.create_task(watch_running(core, namespace, job.id, names, running, tools))
        for name in names:
            await core.create_namespaced_pod(namespace, operator_pod(obj, name, "1s"))
        expected = [(name, f"{name} first") for name in names]
        await tools.sightings.wait(["distrun", "kubectl"], expected, 60)
        await watch
        await tools.stop()
        await engine.delete(job.id, "alice")
        for tool, values in results.items():
            for name, text in expected:
                when = tools.sightings.when(tool, name, text)
                if when is not None:
                    values.append(when - running[name])
    await engine.close()
    print(
        f"\n## Pod Running (its watch event) to its first line shown, {RUNNING_ROUNDS} jobs of "
        f"{len(spec(1).replica_names())} pods: distrun's follow (open since submission) and "
        "`kubectl logs -f` started at that moment"
    )
    for tool, values in results.items():
        if values:
            print(
                f"{tool:8} median {statistics.median(values) * 1000:6.0f} ms  min "
                f"{min(values) * 1000:6.0f} ms  max {max(values) * 1000:6.0f} ms  ({len(values)} pods)"
            )
    if results["distrun"] and results["kubectl"]:
        gap = statistics.median(results["distrun"]) - statistics.median(results["kubectl"])
        print(f"distrun's median minus kubectl's: {gap * 1000:+.0f} ms (goal: at most +200 ms)")


async def watch_running(
    core: Any,
    namespace: str,
    job_id: str,
    names: list[str],
    running: dict[str, float],
    tools: Tools,
) -> None:
    """Notes when each of the job's pods turns Running, and starts `kubectl logs -f` on it."""
    pods = {f"{job_id}-{name}": name for name in names}
    watch = kubernetes_asyncio.watch.Watch()
    async with watch.stream(core.list_namespaced_pod, namespace, timeout_seconds=120) as stream:
        async for event in stream:
            pod = event["object"]
            name = pods.get(pod.metadata.name)
            if name is None or name in running or pod.status.phase != "Running":
                continue
            running[name] = time.monotonic()
            await tools.start_kubectl([pod.metadata.name])
            if len(running) == len(names):
                return


async def late_and_pending_pods(cluster: KubeCluster, admin: Any, namespace: str) -> None:
    """Which tool shows a replica that is still Pending when it starts (master-0), one that
    runs (worker-0), and one whose pod is created after it started (worker-1)."""
    engine = KubeflowEngine(api_client=admin, namespace=namespace)
    job = await engine.submit(spec(2), "alice")
    core = client.CoreV1Api(admin)
    obj = await client.CustomObjectsApi(admin).get_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs", job.id
    )
    for name in job.spec.replica_names():
        cluster.pod_log(namespace, f"{job.id}-{name}").write(f"{name} hello")
    await core.create_namespaced_pod(namespace, operator_pod(obj, "worker-0", None))
    await wait_running(core, namespace, [f"{job.id}-worker-0"])
    await core.create_namespaced_pod(namespace, operator_pod(obj, "master-0", "8s"))
    tools = Tools(cluster, namespace, job.id)
    started = time.monotonic()
    tools.start_distrun(engine)
    await tools.start_kubectl([f"{job.id}-master-0", f"{job.id}-worker-0"])
    await tools.start_sdk()
    await tools.sightings.wait_shown(tools.names, ["worker-0 hello"], 60)  # each is reading
    late = time.monotonic() - started
    await core.create_namespaced_pod(namespace, operator_pod(obj, "worker-1", None))
    expected = [(name, f"{name} hello") for name in job.spec.replica_names()]
    await tools.sightings.wait(tools.names, expected, 8 + SEEN_TIMEOUT)
    await tools.stop()
    print(
        "\n## A replica Pending when the tools start (master-0, runs 8 s later), a running one "
        f"(worker-0), one created {late:.1f} s after they started (worker-1); times from the start"
    )
    for tool in tools.names:
        cells = []
        for name, text in expected:
            when = tools.sightings.when(tool, name, text)
            shown_as = tools.sightings.labels.get(tool, {}).get(text)
            if when is not None:
                cells.append(f"{name} at {when - started:5.1f} s")
            elif shown_as is not None:
                cells.append(f"{name} shown as {shown_as}")
            else:
                cells.append(f"{name} never")
        print(f"{tool:14} " + "; ".join(cells))


PARTS = ("calls", "creation", "logs", "running", "late")


def parts_wanted() -> set[str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(PARTS)
    )
    wanted = set(parser.parse_args().parts.split(","))
    if wanted - set(PARTS):
        parser.error(f"unknown parts {sorted(wanted - set(PARTS))}; choose from {', '.join(PARTS)}")
    return wanted


async def main() -> None:
    if os.environ.get("DISTRUN_SKIP_K8S") == "1":
        skip("DISTRUN_SKIP_K8S=1")
    wanted = parts_wanted()
    with KubeCluster(ensure_all(print)) as cluster:
        cluster.create_namespace("bench")
        api = await counting_client(str(cluster.kubeconfig("admin")))
        try:
            engines: dict[str, KubeEngine] = {
                "kubeflow": KubeflowEngine(api_client=api, namespace="bench"),
                "trainer": TrainerEngine(api_client=api, namespace="bench"),
                "volcano": VolcanoEngine(api_client=api, namespace="bench"),
            }
            if "calls" in wanted:
                await count_calls(api, engines)
            if "creation" in wanted:
                await creation_to_running(cluster, api)
            if "logs" in wanted:
                await first_line_and_latency(cluster, api, "bench")
            if "running" in wanted:
                await running_to_first_line(cluster, api, "bench")
            if "late" in wanted:
                await late_and_pending_pods(cluster, api, "bench")
        finally:
            await api.close()


if __name__ == "__main__":
    asyncio.run(main())
