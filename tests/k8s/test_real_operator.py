"""distrun's Kubeflow engine against the REAL Training Operator v1.9.4 (built from its Go
module, its validating webhooks registered, reconciling one namespace). kwok plays the kubelet:
what a container prints and how it exits are the only things the test decides; the pods, their
environment and the job's conditions come from the operator."""

from __future__ import annotations

import asyncio
import re
import secrets
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

import kubernetes
import pytest
from kubernetes_asyncio import client

from distrun.core import jobids
from distrun.core.errors import SpecError
from distrun.core.job import JobState
from distrun.core.logs import JobUpdate
from distrun.core.replica_env import operator_env, service_addresses
from distrun.core.spec import JobSpec
from distrun.engines.kube.kubeflow import KubeflowEngine

from .cluster import KubeCluster
from .real_operator import end_pods, job_pods
from .waiting import eventually

pytestmark = pytest.mark.kubernetes

WAIT = 90.0
# One spec per framework, with every role it has.
SPECS = {
    "pytorch": {"master": 1, "worker": 2},
    "tensorflow": {"chief": 1, "ps": 1, "worker": 2},
    "xgboost": {"master": 1, "worker": 2},
    "paddle": {"master": 1, "worker": 1},
    "jax": {"worker": 3},
    "mpi": {"launcher": 1, "worker": 2},
}


def spec(framework: str, **fields: Any) -> JobSpec:
    roles = {role: {"replicas": count} for role, count in SPECS[framework].items()}
    return JobSpec.from_dict(
        {"framework": framework, "code": "print('hi')\n", "roles": roles, **fields}
    )


@pytest.fixture
async def engine(kube_admin: Any, operator_namespace: str) -> AsyncIterator[KubeflowEngine]:
    made = KubeflowEngine(api_client=kube_admin, namespace=operator_namespace)
    yield made
    await made.close()


def container_env(pod: Any, container: str, pod_ip: str) -> dict[str, str]:
    """The container's environment as its process sees it: the pod's IP where a variable
    takes it from the pod (`pod_ip` stands for it), and `$(NAME)` references expanded, as the
    kubelet does."""
    [main] = [c for c in pod.spec.containers if c.name == container]
    env: dict[str, str] = {}
    for var in main.env or []:
        if var.value_from is not None:
            env[var.name] = field_value(pod, var.value_from.field_ref.field_path, pod_ip)
        else:
            env[var.name] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), var.value or "")
    return env


def field_value(pod: Any, path: str, pod_ip: str) -> str:
    """What the kubelet gives a variable taken from the pod's own fields."""
    if path == "status.podIP":
        return pod_ip
    label = re.fullmatch(r"metadata\.labels\['(.+)'\]", path)
    assert label is not None, f"a field the test does not know: {path}"
    return str(pod.metadata.labels[label[1]])


@pytest.mark.parametrize("framework", list(SPECS))
async def test_the_real_operator_gives_each_replica_the_environment_distrun_gives_it_locally(
    engine: KubeflowEngine, kube_admin: Any, operator_namespace: str, framework: str
) -> None:
    """The promise "the same code runs unchanged on your laptop and on the cluster": every
    variable the operator writes into a replica's container is the one `operator_env` computes
    for it, which is what the local engine's supervisor gives that replica (with loopback hosts
    and a port per replica in place of the operator's service names and default port)."""
    job_spec = spec(framework)
    job = await engine.submit(job_spec, "alice")
    names = set(job_spec.replica_names())
    pods = await eventually(
        lambda: job_pods(kube_admin, operator_namespace, job.id),
        lambda found: set(found) == names,
        f"the operator to create a pod per replica of {names}",
    )
    addresses = service_addresses(job_spec, job.id, operator_namespace)
    container = engine.container_name(job_spec)
    for replica, pod in sorted(pods.items()):
        expected = operator_env(job_spec, job.id, replica, addresses)
        actual = container_env(pod, container, pod_ip=addresses[replica].host)
        written_by_operator = {name: actual.get(name) for name in expected}
        assert written_by_operator == expected, replica
        assert actual["DISTRUN_RESTART"] == "0", replica  # the job's only run, as locally
    await engine.delete(job.id, "alice")


async def test_a_job_succeeds_when_its_pods_succeed_and_fails_naming_the_replica(
    engine: KubeflowEngine, kube_admin: Any, operator_namespace: str
) -> None:
    core = client.CoreV1Api(kube_admin)
    good = await engine.submit(spec("pytorch"), "alice")
    bad = await engine.submit(spec("pytorch"), "alice")
    for job_id, exits in ((good.id, {}), (bad.id, {"worker-1": "3"})):
        pods = await eventually(
            lambda job_id=job_id: job_pods(kube_admin, operator_namespace, job_id),
            lambda found: len(found) == 3,
            "the operator's pods",
        )
        # Of the bad job, the failing replica alone ends: were its master to succeed too, the
        # operator's verdict would hang on the order it walks its replica types in (a Go map's:
        # a master that succeeded makes the job succeed). It removes the others when it fails.
        ending = {name: pod for name, pod in pods.items() if not exits or name in exits}
        await end_pods(core, operator_namespace, ending, exits)
    succeeded = await eventually(
        lambda: engine.get_job(good.id, "alice"),
        lambda j: j.state.terminal,
        "the good job to end",
    )
    assert succeeded.state == JobState.SUCCEEDED
    failed = await eventually(
        lambda: engine.get_job(bad.id, "alice"),
        lambda j: j.state.terminal,
        "the bad job to end",
    )
    assert failed.state == JobState.FAILED
    assert failed.failed_replica == "worker-1"
    worker = next(r for r in failed.replicas if r.name == "worker-1")
    assert worker.exit_code == 3
    # The operator removes what still runs when the job fails: no replica waits for a pod.
    await eventually(
        lambda: engine.get_job(bad.id, "alice"),
        lambda j: all(r.state.terminal for r in j.replicas),
        "every replica of the failed job to have ended",
    )


async def test_the_real_operator_takes_an_elastic_pytorchjob_and_configures_its_agents(
    engine: KubeflowEngine, kube_admin: Any, operator_namespace: str
) -> None:
    """%elastic=2:3 as the PyTorchJob's elasticPolicy: the operator's webhook accepts it, and
    every replica's pod runs torch's agent with the PET_* settings the operator derives from
    it (a c10d rendezvous on master-0, 2:3 nodes, the job's restarts); the job ends with its
    pods."""
    job_spec = spec("pytorch", elastic="2:3", max_restarts=2)
    job = await engine.submit(job_spec, "alice")
    pods = await eventually(
        lambda: job_pods(kube_admin, operator_namespace, job.id),
        lambda found: set(found) == set(job_spec.replica_names()),
        "the operator to create a pod per replica",
    )
    stored = await client.CustomObjectsApi(kube_admin).get_namespaced_custom_object(
        "kubeflow.org", "v1", operator_namespace, "pytorchjobs", job.id
    )
    print("--- elasticPolicy:", stored["spec"]["elasticPolicy"])
    for replica, pod in sorted(pods.items()):
        env = container_env(pod, "pytorch", pod_ip="10.0.0.1")
        [main] = [c for c in pod.spec.containers if c.name == "pytorch"]
        assert main.command[1:4] == ["-m", "torch.distributed.run", "--no-python"], replica
        assert env["PET_NNODES"] == "2:3", replica
        assert env["PET_RDZV_BACKEND"] == "c10d", replica
        assert env["PET_RDZV_ENDPOINT"] == f"{job.id}-master-0:23456", replica
        assert env["PET_RDZV_ID"] == job.id, replica
        assert env["PET_MAX_RESTARTS"] == "2", replica
        assert "last_call_timeout=2" in env["PET_RDZV_CONF"].split(","), replica
        assert pod.spec.restart_policy == "OnFailure", replica  # a failed agent rejoins
    await end_pods(client.CoreV1Api(kube_admin), operator_namespace, pods)
    done = await eventually(
        lambda: engine.get_job(job.id, "alice"), lambda j: j.state.terminal, "the job to end"
    )
    assert done.state == JobState.SUCCEEDED
    await engine.delete(job.id, "alice")


async def test_the_operators_pods_mount_the_named_checkpoint_claim_for_every_replica(
    engine: KubeflowEngine, kube_admin: Any, operator_namespace: str
) -> None:
    """%checkpointVolume=ckpt: the pods the real operator makes from the job's templates mount
    the claim, and each replica's DISTRUN_CHECKPOINT_DIR is the job's directory in it."""
    job_spec = spec("pytorch", checkpoint_volume="ckpt")
    job = await engine.submit(job_spec, "alice")
    pods = await eventually(
        lambda: job_pods(kube_admin, operator_namespace, job.id),
        lambda found: set(found) == set(job_spec.replica_names()),
        "the operator to create a pod per replica",
    )
    for replica, pod in sorted(pods.items()):
        claims = {
            v.name: v.persistent_volume_claim.claim_name
            for v in pod.spec.volumes
            if v.persistent_volume_claim is not None
        }
        assert claims == {"distrun-checkpoints": "ckpt"}, replica
        [main] = [c for c in pod.spec.containers if c.name == "pytorch"]
        mounts = {m.name: m.mount_path for m in main.volume_mounts}
        assert mounts["distrun-checkpoints"] == "/distrun/checkpoints", replica
        env = container_env(pod, "pytorch", pod_ip="10.0.0.1")
        assert env["DISTRUN_CHECKPOINT_DIR"] == f"/distrun/checkpoints/{job.id}", replica
    await engine.delete(job.id, "alice")


async def test_a_resumed_job_continues_the_earlier_jobs_checkpoint_directory(
    engine: KubeflowEngine, kube_admin: Any, operator_namespace: str
) -> None:
    """resume_from: the new job's pods get the earlier job's directory on the claim; a job
    that is not the submitter's is refused in words and nothing is made."""
    earlier = await engine.submit(spec("pytorch", checkpoint_volume="ckpt"), "alice")
    with pytest.raises(SpecError, match="you have no job") as refused:
        await engine.submit(
            spec("pytorch", checkpoint_volume="ckpt", resume_from=earlier.id), "bob"
        )
    assert refused.value.field == "resume_from"
    resumed_spec = spec("pytorch", checkpoint_volume="ckpt", resume_from=earlier.id)
    resumed = await engine.submit(resumed_spec, "alice")
    pods = await eventually(
        lambda: job_pods(kube_admin, operator_namespace, resumed.id),
        lambda found: set(found) == set(resumed_spec.replica_names()),
        "the operator to create a pod per replica",
    )
    for replica, pod in sorted(pods.items()):
        env = container_env(pod, "pytorch", pod_ip="10.0.0.1")
        assert env["DISTRUN_CHECKPOINT_DIR"] == f"/distrun/checkpoints/{earlier.id}", replica
        assert env["DISTRUN_JOB_ID"] == resumed.id, replica
    assert [job.id for job in await engine.list_jobs("bob")] == []
    for job in (resumed, earlier):
        await engine.delete(job.id, "alice")


async def test_cancel_and_delete_leave_nothing_behind(
    kube_cluster: KubeCluster, engine: KubeflowEngine, kube_admin: Any, operator_namespace: str
) -> None:
    job = await engine.submit(spec("tensorflow"), "alice")
    await eventually(
        lambda: job_pods(kube_admin, operator_namespace, job.id),
        lambda found: len(found) == 4,
        "the operator's pods",
    )
    cancelled = await engine.cancel(job.id, "alice")
    assert cancelled.state == JobState.CANCELLED
    core = client.CoreV1Api(kube_admin)

    async def leftovers() -> list[str]:
        pods = await job_pods(kube_admin, operator_namespace, job.id)
        services = await core.list_namespaced_service(
            operator_namespace, label_selector=f"training.kubeflow.org/job-name={job.id}"
        )
        maps = await core.list_namespaced_config_map(operator_namespace)
        return [*pods, *(s.metadata.name for s in services.items)] + [
            m.metadata.name for m in maps.items if m.metadata.name.startswith(job.id)
        ]

    await eventually(leftovers, lambda left: left == [], "pods, services and code to be gone")


async def test_kueue_runs_a_second_job_only_after_the_first_ends_and_says_why_it_waits(
    kube_admin: Any, operator_namespace: str, kueue_queue: str
) -> None:
    """The real Kueue (webhooks and controllers) and the real operator: a ClusterQueue with
    CPU for one job; the second waits, in words, and runs by itself once the first ends."""
    engine = KubeflowEngine(
        api_client=kube_admin, namespace=operator_namespace, queue_system="kueue",
        default_queue=kueue_queue,
    )  # fmt: skip
    one_cpu_each = {"master": {"replicas": 1, "resources": {"cpu": "1"}},
                    "worker": {"replicas": 1, "resources": {"cpu": "1"}}}  # fmt: skip
    job_spec = JobSpec.from_dict(
        {"framework": "pytorch", "code": "print(1)", "roles": one_cpu_each}
    )
    core = client.CoreV1Api(kube_admin)
    try:
        first = await engine.submit(job_spec, "alice")
        try:
            first_pods = await eventually(
                lambda: job_pods(kube_admin, operator_namespace, first.id),
                lambda found: len(found) == 2,
                "Kueue to admit the first job and the operator to make its pods",
            )
        except AssertionError as error:
            state = await kueue_state(kube_admin, operator_namespace)
            raise AssertionError(f"{error}\n{state}") from None
        second = await engine.submit(job_spec, "alice")
        waiting = await eventually(
            lambda: engine.get_job(second.id, "alice"),
            lambda j: "insufficient" in (j.reason or ""),
            "the second job to say why it waits",
        )
        assert waiting.state == JobState.PENDING
        assert waiting.reason is not None
        assert waiting.reason.startswith(f"waiting in Kueue LocalQueue {kueue_queue}: ")
        assert "cpu" in waiting.reason
        assert await job_pods(kube_admin, operator_namespace, second.id) == {}

        followed = asyncio.create_task(follow_to_the_end(engine, second.id))
        await end_pods(core, operator_namespace, first_pods)
        second_pods = await eventually(
            lambda: job_pods(kube_admin, operator_namespace, second.id),
            lambda found: len(found) == 2,
            "Kueue to admit the second job once the first ended",
        )
        assert (await engine.get_job(first.id, "alice")).state == JobState.SUCCEEDED
        await end_pods(core, operator_namespace, second_pods)
        assert (await asyncio.wait_for(followed, WAIT)) == JobState.SUCCEEDED
    finally:
        await engine.close()


async def follow_to_the_end(engine: KubeflowEngine, job_id: str) -> JobState:
    """The state a follower of the job last sees, started while the job waits in the queue."""
    state = JobState.PENDING
    async for event in engine.follow(job_id, "alice"):
        if isinstance(event, JobUpdate):
            state = event.job.state
    return state


async def kueue_state(api: Any, namespace: str) -> str:
    """Kueue's objects as the API server has them, for a failure's message."""
    custom = client.CustomObjectsApi(api)
    workloads = await custom.list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta1", namespace, "workloads"
    )
    queues = await custom.list_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues")
    jobs = await custom.list_namespaced_custom_object(
        "kubeflow.org", "v1", namespace, "pytorchjobs"
    )
    return repr(
        {
            "jobs": [
                (j["spec"]["runPolicy"], j["metadata"].get("labels"), j.get("status"))
                for j in jobs["items"]
            ],
            "workloads": [w.get("status") for w in workloads["items"]],
            "clusterqueues": [q.get("status") for q in queues["items"]],
        }
    )


async def test_kueue_preempts_a_lower_priority_job_and_distrun_says_so(
    kube_cluster: KubeCluster, kube_admin: Any, operator_namespace: str, kueue_queue: str
) -> None:
    """A ClusterQueue that preempts lower priorities, with CPU for one job: a high-priority job
    evicts the running low-priority one; the evicted job is not failed but waits again, saying
    Kueue preempted it, and runs again once the high-priority job ends."""
    queue = preempting_queue(kube_cluster, operator_namespace)
    engine = KubeflowEngine(
        api_client=kube_admin, namespace=operator_namespace, queue_system="kueue",
        default_queue=queue, allowed_priority_classes=("distrun-low", "distrun-high"),
    )  # fmt: skip
    core = client.CoreV1Api(kube_admin)
    roles = {"master": {"replicas": 1, "resources": {"cpu": "1"}},
             "worker": {"replicas": 1, "resources": {"cpu": "1"}}}  # fmt: skip

    def job_spec(priority: str) -> JobSpec:
        return JobSpec.from_dict(
            {"framework": "pytorch", "code": "print(1)", "roles": roles,
             "priority_class": priority}
        )  # fmt: skip

    try:
        low = await engine.submit(job_spec("distrun-low"), "alice")
        await eventually(
            lambda: engine.get_job(low.id, "alice"),
            lambda j: j.state == JobState.RUNNING,
            "the low-priority job to run",
        )
        high = await engine.submit(job_spec("distrun-high"), "alice")
        preempted = await eventually(
            lambda: engine.get_job(low.id, "alice"),
            lambda j: (j.reason or "").startswith("preempted by Kueue"),
            "the low-priority job to say Kueue preempted it",
        )
        print(f"--- preempted: {preempted.reason}")
        assert preempted.state == JobState.PENDING
        assert f"waiting in LocalQueue {queue} to be admitted again" in (preempted.reason or "")
        high_pods = await eventually(
            lambda: job_pods(kube_admin, operator_namespace, high.id),
            lambda found: len(found) == 2,
            "the high-priority job's pods",
        )
        await end_pods(core, operator_namespace, high_pods)
        low_pods = await eventually(
            lambda: job_pods(kube_admin, operator_namespace, low.id),
            lambda found: (
                len(found) == 2 and all(p.status.phase == "Running" for p in found.values())
            ),
            "the preempted job to be admitted and run again",
        )
        await end_pods(core, operator_namespace, low_pods)
        done = await eventually(
            lambda: engine.get_job(low.id, "alice"), lambda j: j.state.terminal, "the end"
        )
        assert done.state == JobState.SUCCEEDED
    finally:
        await engine.close()


def preempting_queue(cluster: KubeCluster, namespace: str) -> str:
    """PriorityClasses distrun-low and distrun-high, and a LocalQueue `team-b` in `namespace`
    on a ClusterQueue with CPU for one 2-CPU job that preempts lower priorities in it."""
    scheduling = kubernetes.client.SchedulingV1Api(cluster.admin)
    for name, value in (("distrun-low", 10), ("distrun-high", 1000)):
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value}  # fmt: skip
        scheduling.create_priority_class(body)
    custom = kubernetes.client.CustomObjectsApi(cluster.admin)
    group, version = "kueue.x-k8s.io", "v1beta1"
    quota = [{"name": "cpu", "nominalQuota": "2"}, {"name": "memory", "nominalQuota": "64Gi"}]
    cluster_queue = {
        "apiVersion": f"{group}/{version}",
        "kind": "ClusterQueue",
        "metadata": {"name": "distrun-preempting"},
        "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"],
                                "flavors": [{"name": "default-flavor", "resources": quota}]}],
        },
    }  # fmt: skip
    custom.create_cluster_custom_object(group, version, "clusterqueues", cluster_queue)
    local_queue = {
        "apiVersion": f"{group}/{version}",
        "kind": "LocalQueue",
        "metadata": {"name": "team-b", "namespace": namespace},
        "spec": {"clusterQueue": "distrun-preempting"},
    }
    custom.create_namespaced_custom_object(group, version, namespace, "localqueues", local_queue)
    return "team-b"


async def test_reading_a_long_log_holds_the_lines_asked_for_not_the_log(
    kube_cluster: KubeCluster,
    engine: KubeflowEngine,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A REST read of 100 lines from the middle of a ~30 MB log streams the log past the
    server: the Python heap's peak stays far below the log's size."""
    job_id = f"long-log-{secrets.token_hex(2)}"
    monkeypatch.setattr(jobids, "new_job_id", lambda _name: job_id)  # to name the pod's log
    log = kube_cluster.pod_log(operator_namespace, f"{job_id}-master-0")
    log.write(*(f"line {n} " + "x" * 200 for n in range(100_000)))
    job = await engine.submit(
        JobSpec.from_dict(
            {"framework": "pytorch", "code": "", "roles": {"master": {"replicas": 1}}}
        ),
        "alice",
    )
    await eventually(
        lambda: job_pods(kube_admin, operator_namespace, job.id),
        lambda found: len(found) == 1 and found["master-0"].status.phase == "Running",
        "the operator's pod to run",
    )
    tracemalloc.start()
    try:
        lines = await engine.read_logs(job.id, "alice", since={"master-0": 50_000}, limit=100)
        _size, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [(line.seq, line.text.split()[1]) for line in lines] == [
        (n, str(n)) for n in range(50_000, 50_100)
    ]
    assert peak < 4 * 1024 * 1024, f"peak {peak} bytes for a {log.path.stat().st_size}-byte log"
    await engine.delete(job.id, "alice")
