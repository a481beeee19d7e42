"""The Kubernetes engines against a real kube-apiserver with the operators' real CRDs, RBAC,
the garbage collector and kwok pods. Where a test needs pods, the real Training Operator makes
them and sets the job's conditions (fixture `operated`, in the namespace it reconciles); the
test decides only what a container prints and how it exits, and kwok runs it."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, cast

import pytest
from kubernetes_asyncio import client

from distrun.core.errors import Forbidden, NotFound, SpecError
from distrun.core.job import JobState
from distrun.core.logs import JobUpdate, LogBatch, LogLine, PartialUpdate
from distrun.core.spec import JobSpec
from distrun.engines.kube.engine import KubeEngine
from distrun.engines.kube.kubeflow import KubeflowEngine
from distrun.engines.kube.trainer import TrainerEngine
from distrun.engines.kube.volcano import VolcanoEngine

from ..reliability.helpers import first_batch
from .cluster import KubeCluster
from .operator_sim import restart_container
from .real_operator import (
    PYTORCHJOBS,
    clear_v1_jobs,
    end_pod,
    fresh_log,
    get_custom,
    job_pods,
    ledger_counts,
    operator_pods,
    pods_held,
    submit_with_logs,
    succeed,
)
from .waiting import eventually

pytestmark = pytest.mark.kubernetes

WAIT = 60.0  # seconds: generous, the machine may be loaded
FRAMEWORKS_V1 = ("pytorch", "tensorflow", "xgboost", "paddle", "jax", "mpi")
MASTER_ONLY = JobSpec.from_dict(
    {"framework": "pytorch", "code": "print('hi')\n", "roles": {"master": {"replicas": 1}}}
)


def spec(framework: str = "pytorch", **fields: Any) -> JobSpec:
    return JobSpec.from_dict({"framework": framework, "code": "print('hi')\n", **fields})


@pytest.fixture
async def engines(kube_admin: Any, kube_namespace: str) -> AsyncIterator[dict[str, KubeEngine]]:
    """One engine of each kind on the admin's credentials, all in the test's namespace."""
    made: dict[str, KubeEngine] = {
        "kubeflow": KubeflowEngine(api_client=kube_admin, namespace=kube_namespace),
        "trainer": TrainerEngine(api_client=kube_admin, namespace=kube_namespace),
        "volcano": VolcanoEngine(api_client=kube_admin, namespace=kube_namespace),
    }
    yield made
    for engine in made.values():
        await engine.close()


@pytest.fixture
async def operated(kube_admin: Any, operator_namespace: str) -> AsyncIterator[KubeflowEngine]:
    """The Kubeflow engine in the namespace the real Training Operator reconciles, with none of
    the earlier tests' jobs left there."""
    await clear_v1_jobs(kube_admin, operator_namespace)
    engine = KubeflowEngine(api_client=kube_admin, namespace=operator_namespace)
    yield engine
    await engine.close()


async def now(value: Any) -> Any:
    """`value`, for `eventually` to read what a test has collected so far."""
    return value


async def is_gone(read: Callable[[], Any]) -> bool:
    try:
        await read()
    except client.exceptions.ApiException as error:
        return error.status == 404
    return False


async def collect(events: AsyncIterator[Any], until: Callable[[list[Any]], bool]) -> list[Any]:
    seen: list[Any] = []

    async def run() -> None:
        async for event in events:
            seen.append(event)
            if until(seen):
                return

    await asyncio.wait_for(run(), WAIT)
    return seen


def lines_of(events: list[Any]) -> list[LogLine]:
    return [line for event in events if isinstance(event, LogBatch) for line in event.lines]


# --- creation against the real schemas ---------------------------------------------------


@pytest.mark.parametrize("framework", FRAMEWORKS_V1)
async def test_kubeflow_job_of_every_framework_is_accepted_with_its_configmap(
    framework: str, engines: dict[str, KubeEngine], kube_admin: Any, kube_namespace: str
) -> None:
    engine = engines["kubeflow"]
    job = await engine.submit(spec(framework), "alice")
    assert job.state == JobState.PENDING and job.engine == "kubeflow"
    configmap = await client.CoreV1Api(kube_admin).read_namespaced_config_map(
        job.id, kube_namespace
    )
    (reference,) = configmap.metadata.owner_references
    assert reference.name == job.id and reference.kind.endswith("Job")
    assert configmap.metadata.labels["app.kubernetes.io/instance"] == job.id
    fetched = await engine.get_job(job.id, "alice")
    assert fetched.id == job.id and fetched.spec.code == "print('hi')\n"
    assert fetched.reason  # pending, and says why


async def test_trainjob_and_volcano_job_are_accepted_by_their_schemas(
    engines: dict[str, KubeEngine], kube_admin: Any, kube_namespace: str
) -> None:
    trainjob = await engines["trainer"].submit(spec(roles={"worker": {"replicas": 2}}), "alice")
    volcano = await engines["volcano"].submit(
        spec("tensorflow", roles={"chief": {"replicas": 1}, "worker": {"replicas": 2}}), "alice"
    )
    custom = client.CustomObjectsApi(kube_admin)
    stored = await custom.get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", kube_namespace, "trainjobs", trainjob.id
    )
    assert stored["spec"]["trainer"]["numNodes"] == 3
    stored = await custom.get_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", kube_namespace, "jobs", volcano.id
    )
    assert stored["spec"]["minAvailable"] == 3
    assert [task["name"] for task in stored["spec"]["tasks"]] == ["chief", "worker"]
    for engine, job in ((engines["trainer"], trainjob), (engines["volcano"], volcano)):
        assert (await engine.get_job(job.id, "alice")).state == JobState.PENDING
        assert [j.id for j in await engine.list_jobs("alice")] == [job.id]


# --- tenancy ------------------------------------------------------------------------------


async def test_one_user_never_sees_or_touches_anothers_jobs(engines: dict[str, KubeEngine]) -> None:
    engine = engines["kubeflow"]
    job = await engine.submit(spec(), "alice")
    assert [j.id for j in await engine.list_jobs("alice")] == [job.id]
    assert await engine.list_jobs("bob") == []
    for call in (engine.get_job, engine.cancel, engine.delete):
        with pytest.raises(NotFound):
            await call(job.id, "bob")
    with pytest.raises(NotFound):
        await engine.read_logs(job.id, "bob")
    with pytest.raises(NotFound):
        await engine.get_job("Not-An-Id", "alice")
    assert (await engine.get_job(job.id, "alice")).state == JobState.PENDING


async def test_rbac_lets_alice_submit_in_her_namespace_only(kube_cluster: KubeCluster) -> None:
    kubeconfig = str(kube_cluster.kubeconfig("alice"))
    own = KubeflowEngine(kubeconfig=kubeconfig, namespace="{username}")
    elsewhere = KubeflowEngine(kubeconfig=kubeconfig, namespace="bob")
    try:
        job = await own.submit(spec(), "alice")
        assert (await own.get_job(job.id, "alice")).id == job.id
        with pytest.raises(Forbidden):
            await elsewhere.submit(spec(), "alice")
        await own.delete(job.id, "alice")
    finally:
        await own.close()
        await elsewhere.close()


# --- status -------------------------------------------------------------------------------


async def test_status_follows_the_operators_conditions(
    operated: KubeflowEngine, kube_admin: Any, operator_namespace: str
) -> None:
    """Running once the operator says so, then failed once a worker exits non-zero: with no
    restart asked, said as the local engine says it (the replica and its exit), not in the
    operator's words (a backoff limit the user never set)."""
    job = await operated.submit(spec(roles={"worker": {"replicas": 1}}), "alice")
    pods = await eventually(
        lambda: job_pods(kube_admin, operator_namespace, job.id),
        lambda found: set(found) == {"master-0", "worker-0"},
        "the operator's pods",
    )
    await eventually(
        lambda: operated.get_job(job.id, "alice"),
        lambda j: j.state == JobState.RUNNING,
        "the operator's Running condition",
    )
    core = client.CoreV1Api(kube_admin)
    await end_pod(core, operator_namespace, pods["worker-0"].metadata.name, "1")
    failed = await eventually(
        lambda: operated.get_job(job.id, "alice"), lambda j: j.state.terminal, "the job to end"
    )
    stored = await get_custom(kube_admin, operator_namespace, PYTORCHJOBS, job.id)
    [condition] = [c for c in stored["status"]["conditions"] if c["type"] == "Failed"]
    assert failed.state == JobState.FAILED
    print(f"--- the operator's words: {condition['message']}")
    assert failed.reason == "worker-0 failed: exit code 1"
    assert failed.failed_replica == "worker-0"


async def test_an_elastic_pytorchjobs_failed_worker_restarts_alone_while_the_others_go_on(
    kube_cluster: KubeCluster,
    operated: KubeflowEngine,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """%elastic=2:3 on the real operator (elasticPolicy, pods OnFailure): worker-1's agent
    exits 1 and its container restarts in place (the kubelet's part, done by hand: kwok does
    not restart containers); the operator leaves the job running and the other replicas'
    pods as they were, so their agents go on and the restarted one rejoins the rendezvous
    (torch's part, shown with real processes in tests/training). distrun shows the restart of
    that replica alone, why, and the job then succeeds."""
    job_spec = spec(roles={"worker": {"replicas": 2}}, elastic="2:3", max_restarts=2)
    names = ("master-0", "worker-0", "worker-1")
    job, _logs = await submit_with_logs(
        kube_cluster, operated, job_spec, monkeypatch, {n: (f"{n} up",) for n in names}
    )
    pods = await operator_pods(kube_admin, operator_namespace, job.id, 3)
    await eventually(
        lambda: operated.get_job(job.id, "alice"),
        lambda j: j.state == JobState.RUNNING and all(r.started_at for r in j.replicas),
        "every replica to run",
    )
    uids = {name: pod.metadata.uid for name, pod in pods.items()}
    await restart_container(
        kube_cluster,
        kube_admin,
        operator_namespace,
        pods["worker-1"].metadata.name,
        "pytorch",
        "again",
    )
    during = await eventually(
        lambda: operated.get_job(job.id, "alice"),
        lambda j: [r.restarts for r in j.replicas] == [0, 0, 1],
        "worker-1's restart to show",
    )
    print(f"--- elastic, worker-1 exit 1: {during.state.value}, {during.timeline[-1].text}")
    assert during.state == JobState.RUNNING
    assert (during.attempt, during.restart_scope) == (1, "replica")
    assert during.last_failure is not None
    assert during.last_failure.text == "worker-1 failed: exit code 1"
    assert ("restarting", 1) in [(e.kind, e.attempt) for e in during.timeline]
    now_pods = await job_pods(kube_admin, operator_namespace, job.id)
    assert {name: pod.metadata.uid for name, pod in now_pods.items()} == uids  # none recreated
    for name in ("master-0", "worker-0"):
        [status] = now_pods[name].status.container_statuses
        assert status.restart_count == 0 and status.state.running is not None, name
    for name in ("worker-1", "worker-0", "master-0"):
        await end_pod(
            client.CoreV1Api(kube_admin), operator_namespace, now_pods[name].metadata.name, "0"
        )
    done = await eventually(
        lambda: operated.get_job(job.id, "alice"), lambda j: j.state.terminal, "the job to end"
    )
    assert done.state == JobState.SUCCEEDED, done.reason
    assert [r.restarts for r in done.replicas] == [0, 0, 1]
    await operated.delete(job.id, "alice")


async def test_no_restart_asked_means_one_attempt_whatever_the_backoff_limit(
    operated: KubeflowEngine, kube_admin: Any, operator_namespace: str
) -> None:
    """restartPolicy Never at backoff_limit 2, as on the local engine: the first failure ends
    the job (the operator makes no second pod), said as the replica and its exit."""
    job_spec = spec(roles={"worker": {"replicas": 1}}, restart_policy="Never", backoff_limit=2)
    job = await operated.submit(job_spec, "alice")
    pods = await eventually(
        lambda: job_pods(kube_admin, operator_namespace, job.id),
        lambda found: set(found) == {"master-0", "worker-0"},
        "the operator's pods",
    )
    first = pods["worker-0"].metadata.uid
    await end_pod(
        client.CoreV1Api(kube_admin), operator_namespace, pods["worker-0"].metadata.name, "1"
    )
    failed = await eventually(
        lambda: operated.get_job(job.id, "alice"), lambda j: j.state.terminal, "the job to end"
    )
    assert (failed.state, failed.reason) == (JobState.FAILED, "worker-0 failed: exit code 1")
    after = await job_pods(kube_admin, operator_namespace, job.id)
    assert after["worker-0"].metadata.uid == first  # never made again
    assert [r.restarts for r in failed.replicas] == [0, 0]
    await operated.delete(job.id, "alice")


async def test_on_failure_restarts_in_place_as_often_as_asked_and_the_record_keeps_them(
    kube_cluster: KubeCluster,
    operated: KubeflowEngine,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """restartPolicy OnFailure at backoff_limit 2, the worker failing (exit 1) every attempt:
    its container restarts in place (the kubelet's part, done by hand: kwok does not restart
    containers) and the real operator fails the job at the second restart, deleting the pods
    still running. As on the local engine: 3 attempts, failed, "worker-0 failed: exit code 1";
    distrun shows each restart while the job runs (to a follower and to a read) and keeps them
    after the pods are gone, also for a server that never saw the pods (a new engine), with
    the timeline: each failure and restart in place, the end."""
    job_spec = spec(roles={"worker": {"replicas": 1}}, restart_policy="OnFailure", backoff_limit=2)
    job, _logs = await submit_with_logs(
        kube_cluster, operated, job_spec, monkeypatch, {"master-0": ("m0",), "worker-0": ("w0",)}
    )
    updates: list[Any] = []

    async def follow() -> None:
        async for event in operated.follow(job.id, "alice"):
            if isinstance(event, JobUpdate):
                updates.append(event.job)

    follower = asyncio.create_task(follow())
    try:
        pods = await operator_pods(kube_admin, operator_namespace, job.id, 2)
        await eventually(
            lambda: operated.get_job(job.id, "alice"),
            lambda j: j.state == JobState.RUNNING and all(r.started_at for r in j.replicas),
            "both replicas to run",
        )
        worker = pods["worker-0"].metadata.name
        attempts = 1
        for restarts in (1, 2):
            await restart_container(
                kube_cluster, kube_admin, operator_namespace, worker, "pytorch", f"w{restarts}"
            )
            attempts += 1
            if restarts == 1:  # the second restart ends the job at once
                during = await eventually(
                    lambda: operated.get_job(job.id, "alice"),
                    lambda j: [r.restarts for r in j.replicas] == [0, 1],
                    "the first restart to show",
                )
                assert during.state == JobState.RUNNING
                await eventually(
                    lambda: now([[r.restarts for r in u.replicas] for u in updates]),
                    lambda seen: [0, 1] in seen,
                    "the follower to be told of the first restart",
                )
        await asyncio.wait_for(follower, WAIT)  # the follow ends with the job
    finally:
        follower.cancel()
    assert updates[-1].state == JobState.FAILED
    assert [r.restarts for r in updates[-1].replicas] == [0, 2]
    await eventually(
        lambda: job_pods(kube_admin, operator_namespace, job.id),
        lambda left: left == {},
        "the operator to delete the running pods",
    )
    stored = await get_custom(kube_admin, operator_namespace, PYTORCHJOBS, job.id)
    [condition] = [c for c in stored["status"]["conditions"] if c["type"] == "Failed"]
    print(
        f"--- OnFailure, exit 1: {attempts} attempts; the operator's words: {condition['message']}"
    )
    fresh = KubeflowEngine(api_client=kube_admin, namespace=operator_namespace)
    try:
        [listed] = [j for j in await fresh.list_jobs("alice") if j.id == job.id]
        for failed in [listed] + [await e.get_job(job.id, "alice") for e in (operated, fresh)]:
            assert attempts == 3 and failed.state == JobState.FAILED  # the local engine's
            assert [r.restarts for r in failed.replicas] == [0, 2], failed.replicas
            assert failed.reason == "worker-0 failed: exit code 1"
            assert failed.failed_replica == "worker-0"
            assert (failed.attempt, failed.restart_scope) == (1, "replica")
            assert [(e.kind, e.attempt) for e in failed.timeline] == [
                ("submitted", 1),
                ("started", 1),
                *[("failed", 1), ("restarting", 1)] * 2,
                ("ended", 1),
            ], failed.timeline
            assert [e.text for e in failed.timeline if e.kind == "restarting"] == [
                f"restarting worker-0 (restart {n}/2 of the job) after exit code 1" for n in (1, 2)
            ]
            assert failed.timeline[-1].text == "worker-0 failed: exit code 1"
    finally:
        await fresh.close()
    await operated.delete(job.id, "alice")


async def test_exit_code_restarts_the_operator_would_not_limit_are_refused(
    operated: KubeflowEngine,
) -> None:
    with pytest.raises(SpecError, match="without limit"):
        await operated.submit(spec(restart_policy="ExitCode", backoff_limit=2), "alice")


async def test_pending_pod_reason_is_given_in_words(
    operated: KubeflowEngine, operator_namespace: str
) -> None:
    # 16 GPUs for the master: no node has them (kwok-gpu-node-1 has 8).
    roles = {"master": {"replicas": 1, "resources": {"gpu": 16}}}
    job = await operated.submit(spec(roles=roles), "alice")
    pending = await eventually(
        lambda: operated.get_job(job.id, "alice"),
        lambda j: j.reason is not None and "Unschedulable" in j.reason,
        "an Unschedulable reason",
    )
    assert pending.state == JobState.PENDING
    assert pending.reason.startswith("master-0: Unschedulable")


async def replace_worker(
    cluster: KubeCluster, api: Any, namespace: str, job_id: str, pod: Any
) -> None:
    """worker-0's pod exits 137 (retryable); once distrun has counted its two lines, the pod
    the operator makes again under its name prints "w2"."""
    name = pod.metadata.name
    with pods_held(cluster):
        await end_pod(client.CoreV1Api(api), namespace, name, "137")
        await eventually(
            lambda: ledger_counts(api, namespace, job_id, "worker-0"),
            lambda counts: counts == [2],
            "distrun to count the first run's lines",
        )
        await eventually(
            lambda: job_pods(api, namespace, job_id),
            lambda pods: "worker-0" in pods and pods["worker-0"].metadata.uid != pod.metadata.uid,
            "the operator to make worker-0 again",
        )
        fresh_log(cluster, namespace, name).write("w2")


# --- logs -----------------------------------------------------------------------------------


async def test_follow_picks_up_late_and_replaced_pods_and_seqs_continue(
    kube_cluster: KubeCluster,
    operated: KubeflowEngine,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pods start after the follow began (held Pending a while); the worker's first pod
    fails, the operator (restartPolicy OnFailure, one restart allowed; kwok ends the pod
    rather than restarting its container) makes it again."""
    engine, namespace = operated, operator_namespace
    job_spec = spec(roles={"worker": {"replicas": 1}}, restart_policy="OnFailure", backoff_limit=1)
    with pods_held(kube_cluster):
        job, logs = await submit_with_logs(
            kube_cluster, engine, job_spec, monkeypatch,
            {"master-0": ("m0", "m1"), "worker-0": ("w0", "w1")},
        )  # fmt: skip
        seen: list[Any] = []
        done = asyncio.Event()

        async def consume() -> None:
            async for event in engine.follow(job.id, "alice"):
                seen.append(event)
            done.set()

        consumer = asyncio.create_task(consume())
        first = await operator_pods(kube_admin, namespace, job.id, 2)
    try:
        await eventually(
            lambda: now([l.text for l in lines_of(seen)]),
            lambda texts: {"m0", "m1", "w0", "w1"} <= set(texts),
            "the first lines of both replicas",
        )
        await replace_worker(kube_cluster, kube_admin, namespace, job.id, first["worker-0"])
        logs["master-0"].write("m2")
        await eventually(
            lambda: now([l.text for l in lines_of(seen)]),
            lambda texts: {"w2", "m2"} <= set(texts),
            "lines of the replaced worker and new master lines",
        )
        await succeed(kube_admin, namespace, job.id)
        await asyncio.wait_for(done.wait(), WAIT)
    finally:
        consumer.cancel()
    got = {(line.replica, line.seq): line.text for line in lines_of(seen)}
    assert got == {
        ("master-0", 0): "m0",
        ("master-0", 1): "m1",
        ("master-0", 2): "m2",
        ("worker-0", 0): "w0",
        ("worker-0", 1): "w1",
        ("worker-0", 2): "w2",
    }
    assert len(lines_of(seen)) == 6  # nothing twice
    updates = [event.job for event in seen if isinstance(event, JobUpdate)]
    assert updates[-1].state == JobState.SUCCEEDED

    # A later reader (any server) gets the same seqs from the API server's ledger.
    again = await engine.read_logs(job.id, "alice", since={"worker-0": 2, "master-0": 3})
    assert [(line.replica, line.seq, line.text) for line in again] == [("worker-0", 2, "w2")]


async def test_follow_resumes_from_a_cursor_without_repeating(
    kube_cluster: KubeCluster,
    operated: KubeflowEngine,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = operated
    lines = {"master-0": tuple(f"line {i}" for i in range(10))}
    job, _ = await submit_with_logs(kube_cluster, engine, MASTER_ONLY, monkeypatch, lines)
    pods = await eventually(
        lambda: job_pods(kube_admin, operator_namespace, job.id), bool, "the operator's pod"
    )
    await end_pod(
        client.CoreV1Api(kube_admin), operator_namespace, pods["master-0"].metadata.name, "0"
    )
    await eventually(
        lambda: engine.get_job(job.id, "alice"),
        lambda j: j.state == JobState.SUCCEEDED,
        "the operator to say the job succeeded",
    )
    events = await collect(engine.follow(job.id, "alice", since={"master-0": 7}), lambda _: False)
    assert [(l.seq, l.text) for l in lines_of(events)] == [
        (7, "line 7"),
        (8, "line 8"),
        (9, "line 9"),
    ]
    assert [e.job.state for e in events if isinstance(e, JobUpdate)] == [JobState.SUCCEEDED]


async def test_an_unfinished_line_is_followed_as_it_is_drawn_and_counts_once_finished(
    kube_cluster: KubeCluster, operated: KubeflowEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A progress bar the kubelet records in pieces (CRI partial entries) reaches a follower
    as it grows, as a terminal shows it, with the seq it gets once its newline comes; REST reads
    give it apart from the lines, and only the finished line counts."""
    engine = operated
    job, logs = await submit_with_logs(
        kube_cluster, engine, MASTER_ONLY, monkeypatch, {"master-0": ("before",)}
    )
    log = logs["master-0"]
    events: list[Any] = []

    async def consume() -> None:
        async for event in engine.follow(job.id, "alice"):
            events.append(event)

    def partials() -> list[tuple[int, str]]:
        return [(p.seq, p.text) for e in events if isinstance(e, PartialUpdate) for p in e.lines]

    async def shown(text: str) -> None:
        await eventually(lambda: now(partials()), lambda got: (1, text) in got, text)

    follower = asyncio.create_task(consume())
    try:
        await eventually(lambda: now(lines_of(events)), bool, "the first line")
        log.write("\x1b[32mEpoch\x1b[0m  10%|#", partial=True)
        await shown("\x1b[32mEpoch\x1b[0m  10%|#")
        log.write("\rEpoch  50%|#####", partial=True)
        await shown("Epoch  50%|#####")
        unfinished = await engine.read_partials(job.id, "alice")
        assert [(p.replica, p.seq, p.text) for p in unfinished] == [
            ("master-0", 1, "Epoch  50%|#####")
        ]
        assert [line.text for line in await engine.read_logs(job.id, "alice")] == ["before"]
        log.write("\rEpoch 100%|##########", "after")
        await eventually(lambda: now(lines_of(events)), lambda got: len(got) == 3, "3 lines")
    finally:
        follower.cancel()
        await asyncio.gather(follower, return_exceptions=True)
    raw = "\x1b[32mEpoch\x1b[0m  10%|#\rEpoch  50%|#####\rEpoch 100%|##########"
    assert [(l.seq, l.text) for l in lines_of(events)] == [(0, "before"), (1, raw), (2, "after")]
    assert all(seq == 1 for seq, _ in partials())
    assert [(l.seq, l.text) for l in await engine.read_logs(job.id, "alice")] == [
        (0, "before"),
        (1, raw),
        (2, "after"),
    ]


# --- cancel and delete ----------------------------------------------------------------------


async def test_cancel_deletes_the_job_in_the_foreground_and_the_configmap_goes_with_it(
    engines: dict[str, KubeEngine], kube_admin: Any, kube_namespace: str
) -> None:
    engine = engines["volcano"]
    job = await engine.submit(spec(), "alice")
    cancelled = await engine.cancel(job.id, "alice")
    assert cancelled.state == JobState.CANCELLED and cancelled.reason == "cancelled by the user"
    core = client.CoreV1Api(kube_admin)
    await eventually(
        lambda: is_gone(lambda: core.read_namespaced_config_map(job.id, kube_namespace)),
        bool,
        "the garbage collector to delete the ConfigMap",
    )
    await eventually(
        lambda: engine.list_jobs("alice"), lambda jobs: jobs == [], "the job to be gone"
    )
    with pytest.raises(NotFound):
        await engine.get_job(job.id, "alice")


async def test_cancelling_an_ended_job_stops_its_replicas_still_running_and_keeps_the_others(
    kube_cluster: KubeCluster,
    operated: KubeflowEngine,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With cleanPodPolicy None a failed master leaves its workers running (and holding GPUs).
    engine = operated
    job_spec = spec(clean_pod_policy="None",
                    roles={"master": {"replicas": 1}, "worker": {"replicas": 1}})  # fmt: skip
    job, _ = await submit_with_logs(
        kube_cluster, engine, job_spec, monkeypatch, {"worker-0": ("still going",)}
    )
    pods = await eventually(
        lambda: job_pods(kube_admin, operator_namespace, job.id),
        lambda found: len(found) == 2 and all(p.status.phase == "Running" for p in found.values()),
        "the operator's pods to run",
    )
    core = client.CoreV1Api(kube_admin)
    await end_pod(core, operator_namespace, pods["master-0"].metadata.name, "1", "boom")
    ended = await eventually(
        lambda: engine.get_job(job.id, "alice"),
        lambda j: (
            j.state == JobState.FAILED
            and {r.name: r.state for r in j.replicas}.get("worker-0") == JobState.RUNNING
        ),
        "the job to fail with its worker still running",
    )
    assert ended.state == JobState.FAILED

    after = await engine.cancel(job.id, "alice")
    assert after.state == JobState.FAILED  # cancel does not rewrite how the job ended
    await eventually(
        lambda: is_gone(lambda: core.read_namespaced_pod(f"{job.id}-worker-0", operator_namespace)),
        bool,
        "the running worker's pod to be deleted",
    )
    master = await core.read_namespaced_pod(f"{job.id}-master-0", operator_namespace)
    assert master.status.phase == "Failed"  # a finished replica keeps its pod and its logs


async def test_a_failed_replica_is_named_with_its_exit_and_last_lines_and_no_pod_outlives_the_job(
    kube_cluster: KubeCluster,
    operated: KubeflowEngine,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    engine = operated
    job_spec = spec(roles={"worker": {"replicas": 1}})
    worker_lines = ("w0", "Traceback (most recent call last):", "RuntimeError: boom")
    job, _ = await submit_with_logs(
        kube_cluster, engine, job_spec, monkeypatch,
        {"master-0": ("m0",), "worker-0": worker_lines},
    )  # fmt: skip
    pods = await eventually(
        lambda: job_pods(kube_admin, operator_namespace, job.id),
        lambda found: len(found) == 2,
        "the operator's pods",
    )
    core = client.CoreV1Api(kube_admin)
    await end_pod(core, operator_namespace, pods["worker-0"].metadata.name, "3", "boom")

    failed = await eventually(
        lambda: engine.get_job(job.id, "alice"),
        lambda j: j.failed_replica is not None,
        "the failed replica to be named",
    )
    assert failed.state == JobState.FAILED
    assert failed.failed_replica == "worker-0"
    worker = next(r for r in failed.replicas if r.name == "worker-0")
    assert (worker.exit_code, worker.reason) == (3, "exit code 3: boom")
    assert failed.last_lines == list(worker_lines)

    await engine.delete(job.id, "alice")
    selector = f"training.kubeflow.org/job-name={job.id}"
    await eventually(
        lambda: core.list_namespaced_pod(operator_namespace, label_selector=selector),
        lambda pods: pods.items == [],
        "the garbage collector to delete every pod of the job",
    )


async def test_followers_never_take_the_connections_every_other_call_needs(
    kube_cluster: KubeCluster,
    operated: KubeflowEngine,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A client pool of 4 connections; 3 followers of a 4-replica job hold 3 x (4 logs + 2
    # watches) = 18 long-running requests open at once.
    configuration = copy.copy(kube_admin.configuration)
    configuration.connection_pool_maxsize = 4
    small_pool = client.ApiClient(configuration)
    engine = KubeflowEngine(api_client=small_pool, namespace=operator_namespace)
    followers: list[AsyncGenerator[Any, None]] = []
    try:
        job_spec = spec(roles={"worker": {"replicas": 3}})
        lines = {replica: (replica,) for replica in job_spec.replica_names()}
        job, _ = await submit_with_logs(kube_cluster, engine, job_spec, monkeypatch, lines)
        await eventually(
            lambda: job_pods(kube_admin, operator_namespace, job.id),
            lambda found: (
                len(found) == 4 and all(p.status.phase == "Running" for p in found.values())
            ),
            "the operator's pods to run",
        )
        for _ in range(3):
            follower = cast(AsyncGenerator[Any, None], engine.follow(job.id, "alice"))
            followers.append(follower)
            await asyncio.wait_for(first_batch(follower), WAIT)

        listed = await asyncio.wait_for(engine.list_jobs("alice"), WAIT)
        assert [j.id for j in listed] == [job.id]
        again = await asyncio.wait_for(engine.get_job(job.id, "alice"), WAIT)
        assert len(again.replicas) == 4
    finally:
        for follower in followers:
            await follower.aclose()
        await engine.close()
        await small_pool.close()
