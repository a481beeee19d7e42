"""Cancel and delete of a running TrainJob on the real Trainer v2.3.0 + JobSet v0.12.0 (issue
30): seconds from distrun's call to nothing of the job left (the TrainJob, its JobSet, Jobs,
pods and ConfigMaps), beside the cluster's own pace in the same run: a plain batch/v1 Job with
two running pods deleted in the Background, which only kube-controller-manager's garbage
collector removes (the floor of any cascade).

The cluster is fresh, as the tier's is: the garbage collector learns of resource types
installed after it started (JobSet's, Trainer's) at its next discovery, every 30 s, and until
then a cascade through their owner references waits for it. The first cancel of a run is
reported apart for that reason; a cluster whose CRDs were there before the collector started
behaves as the later ones.

    python benchmarks/bench_trainjob_cancel.py [--repeat 3] [--settle SECONDS]

`--settle 35` waits that long after Trainer started before the first cancel, long enough for
the collector's discovery: the first cancel then goes as fast as the later ones.
"""

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _common import REPO, use_repo_package

use_repo_package()
sys.path.insert(0, str(REPO))

from kubernetes_asyncio import client
from tests.k8s.binaries import ensure_all
from tests.k8s.cluster import KubeCluster
from tests.k8s.controller_builds import ensure_controllers
from tests.k8s.real_controllers import start_job_controller, start_jobset, start_trainer
from tests.k8s.test_engines_on_real_controllers import (
    all_running,
    pods_of,
    remains_of,
)

from distrun.core.spec import JobSpec
from distrun.engines.kube.trainer import TrainerEngine

OWNER = "bench"
NOTHING = {kind: [] for kind in ("trainjobs", "jobsets", "jobs", "pods", "configmaps")}
SPEC = JobSpec.from_dict(
    {
        "framework": "pytorch",
        "code": "print('hi')\n",
        "roles": {
            role: {"replicas": 1, "resources": {"cpu": "1"}} for role in ("master", "worker")
        },
    }
)


async def until(check: Callable[[], Awaitable[Any]], done: Callable[[Any], bool]) -> float:
    """Polls `check` every 0.1 s until `done`; the monotonic time it was first seen done."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if done(await check()):
            return time.monotonic()
        await asyncio.sleep(0.1)
    raise TimeoutError("not done within 180 s")


async def trainjob_removal(engine: TrainerEngine, api: Any, namespace: str, action: str) -> float:
    job = await engine.submit(SPEC, OWNER)
    await until(lambda: pods_of(api, namespace, engine.pod_selector(job.id)), all_running(2))
    started = time.monotonic()
    if action == "cancel":
        await engine.cancel(job.id, OWNER)
    else:
        await engine.delete(job.id, OWNER)
    gone = await until(lambda: remains_of(api, namespace, job.id), lambda left: left == NOTHING)
    return gone - started


async def batch_job_removal(api: Any, namespace: str, index: int) -> float:
    """The floor: a Job of two running pods, deleted in the Background."""
    name = f"floor-{index}"
    pod = {"containers": [{"name": "main", "image": "busybox"}], "restartPolicy": "Never"}
    body = {
        "metadata": {"name": name},
        "spec": {"parallelism": 2, "completions": 2, "template": {"spec": pod}},
    }
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job(namespace, body)
    selector = f"job-name={name}"
    await until(lambda: pods_of(api, namespace, selector), all_running(2))
    started = time.monotonic()
    await batch.delete_namespaced_job(name, namespace, propagation_policy="Background")

    async def left() -> int:
        jobs = await batch.list_namespaced_job(namespace, field_selector=f"metadata.name={name}")
        pods = await client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector)
        return len(jobs.items) + len(pods.items)

    gone = await until(left, lambda count: count == 0)
    return gone - started


def summary(label: str, seconds: list[float]) -> str:
    shown = ", ".join(f"{s:.1f}" for s in seconds)
    return f"{label:<38} median {statistics.median(seconds):5.1f} s   ({shown})"


async def measure(cluster: KubeCluster, namespace: str, repeat: int, settle: float) -> None:
    await asyncio.sleep(settle)
    async with cluster.api_client("admin") as api:
        engine = TrainerEngine(api_client=api, namespace=namespace)
        try:
            first = await trainjob_removal(engine, api, namespace, "cancel")
            results: dict[str, list[float]] = {"cancel": [], "delete": [], "floor": []}
            for index in range(repeat):
                for action in ("cancel", "delete"):
                    results[action].append(await trainjob_removal(engine, api, namespace, action))
                results["floor"].append(await batch_job_removal(api, namespace, index))
        finally:
            await engine.close()
    print(f"first cancel, {settle:.0f} s after Trainer started: nothing left after {first:.1f} s")
    print(summary("TrainJob cancel -> nothing left", results["cancel"]))
    print(summary("TrainJob delete -> nothing left", results["delete"]))
    print(summary("batch Job delete (floor) -> nothing left", results["floor"]))
    floor = statistics.median(results["floor"])
    for action in ("cancel", "delete"):
        ratio = statistics.median(results[action]) / floor if floor else float("inf")
        print(f"{action}: {ratio:.2f}x the floor")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--settle", type=float, default=0.0, help="seconds before the first")
    args = parser.parse_args()
    binaries, controllers = ensure_all(), ensure_controllers()
    with KubeCluster(binaries) as cluster:
        start_job_controller(cluster, binaries.kube_controller_manager)
        start_jobset(cluster, controllers)
        start_trainer(cluster, controllers)
        cluster.create_namespace("bench")
        asyncio.run(measure(cluster, "bench", args.repeat, args.settle))


if __name__ == "__main__":
    main()
