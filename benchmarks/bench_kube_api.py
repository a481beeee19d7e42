"""Kubernetes engines against the test tier's real control plane (etcd, kube-apiserver, kwok):

1. API calls per submission, get, list, cancel, for each engine (a counting ApiClient);
2. time from job creation to the first log line through `engine.follow`, with the pods created
   the way the operator would (no operator runs here) 0.5 s after the job, starting Pending;
3. log latency with 8 replicas side by side: a line appended to every replica's log, seen
   through `engine.follow` and through 8 `kubectl logs -f` (Debian's /usr/bin/kubectl) on the
   same pods.

Run: PYTHONPATH=server_ext python benchmarks/bench_kube_api.py  (builds or reuses the cached
binaries; a cold build takes many minutes). The Kubeflow SDK comparison is not done here.
"""

import asyncio
import os
import shutil
import statistics
import sys
import time
from collections import Counter
from typing import Any

from _common import REPO, skip, use_repo_package

use_repo_package()
sys.path.insert(0, str(REPO))

from kubernetes_asyncio import client, config
from tests.k8s.binaries import ensure_all
from tests.k8s.cluster import KubeCluster

from distrun.engines.base import LogBatch
from distrun.engines.kube_engine import KubeEngine
from distrun.engines.kubeflow import KubeflowEngine
from distrun.engines.trainer import TrainerEngine
from distrun.engines.volcano import VolcanoEngine
from distrun.spec import JobSpec

REPLICAS = 8
ROUNDS = 20


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
    print("\n## Job creation to first log line (pods created 0.5 s after the job, Pending 1 s)")
    print(
        f"distrun follow: first line {first - created:.2f} s, all {REPLICAS} replicas "
        f"{max(seen.values()) - created:.2f} s after creation"
    )

    kubectl = shutil.which("kubectl")
    processes = []
    if kubectl:
        kubeconfig = str(cluster.kubeconfig("admin"))
        for name in names:
            processes.append(
                await asyncio.create_subprocess_exec(
                    kubectl,
                    f"--kubeconfig={kubeconfig}",
                    "-n",
                    namespace,
                    "logs",
                    "-f",
                    f"{job.id}-{name}",
                    stdout=asyncio.subprocess.PIPE,
                )
            )
        for process in processes:  # skip the line already there
            assert process.stdout is not None
            await asyncio.wait_for(process.stdout.readline(), 60)
    ours: list[float] = []
    theirs: list[float] = []
    for round_number in range(ROUNDS):
        text = f"tick {round_number}"
        start = time.monotonic()
        for log in logs.values():
            log.write(text)
        pending = set(names)
        while pending:
            event = await asyncio.wait_for(events.__anext__(), 60)
            if isinstance(event, LogBatch):
                for line in event.lines:
                    if line.text == text:
                        pending.discard(line.replica)
        ours.append(time.monotonic() - start)
        if processes:
            await asyncio.gather(*(p.stdout.readline() for p in processes if p.stdout))
            theirs.append(time.monotonic() - start)
    for process in processes:
        process.kill()
        await process.wait()
    print(
        f"\n## Log latency, {REPLICAS} replicas, {ROUNDS} rounds: a line appended to every "
        "replica's log until all are seen (kwok serves the logs)"
    )
    print(
        f"distrun follow   median {statistics.median(ours) * 1000:7.1f} ms  "
        f"max {max(ours) * 1000:7.1f} ms"
    )
    if theirs:
        print(
            f"kubectl logs -f  median {statistics.median(theirs) * 1000:7.1f} ms  "
            f"max {max(theirs) * 1000:7.1f} ms  (8 processes, measured after ours each round)"
        )
    else:
        print("kubectl not found: no comparison")


async def main() -> None:
    if os.environ.get("DISTRUN_SKIP_K8S") == "1":
        skip("DISTRUN_SKIP_K8S=1")
    with KubeCluster(ensure_all(print)) as cluster:
        cluster.create_namespace("bench")
        api = await counting_client(str(cluster.kubeconfig("admin")))
        try:
            engines: dict[str, KubeEngine] = {
                "kubeflow": KubeflowEngine(api_client=api, namespace="bench"),
                "trainer": TrainerEngine(api_client=api, namespace="bench"),
                "volcano": VolcanoEngine(api_client=api, namespace="bench"),
            }
            await count_calls(api, engines)
            await first_line_and_latency(cluster, api, "bench")
        finally:
            await api.close()


if __name__ == "__main__":
    asyncio.run(main())
