"""distrun's Volcano and Trainer engines against the REAL controllers (controllers_cluster:
Volcano v1.15.1's admission webhooks, scheduler and job controller; Trainer v2.3.0 with JobSet
and the Job controller). kwok plays the kubelet: what a container prints and how it exits are
the only things these tests decide; pods, PodGroups, restarts, conditions and events come from
the controllers."""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import kubernetes
import kubernetes_asyncio.watch
import pytest
from kubernetes_asyncio import client

from distrun.core import jobids
from distrun.core.errors import SpecError
from distrun.core.job import JobState
from distrun.core.logs import JobUpdate, LogBatch
from distrun.core.spec import JobSpec
from distrun.engines.kube.engine import REMOVED_REASON
from distrun.engines.kube.kueue import WORKLOADS
from distrun.engines.kube.manifests.common import CODE_VOLUME
from distrun.engines.kube.trainer import PATCH_REMOVED, TrainerEngine
from distrun.engines.kube.volcano import VolcanoEngine

from .cluster import KubeCluster
from .test_real_controllers import make_queues
from .waiting import eventually

pytestmark = pytest.mark.kubernetes

WAIT = 90.0
EXIT_ANNOTATION = "kwok.distrun.test/exit-code"
OWNER = "alice"


def spec(roles: dict[str, int], cpu: str = "1", **fields: Any) -> JobSpec:
    return JobSpec.from_dict(
        {
            "framework": "pytorch",
            "code": "print('hi')\n",
            "roles": {
                role: {"replicas": count, "resources": {"cpu": cpu}}
                for role, count in roles.items()
            },
            **fields,
        }
    )


@pytest.fixture
async def admin(controllers_cluster: KubeCluster) -> AsyncIterator[Any]:
    async with controllers_cluster.api_client("admin") as api:
        yield api


@pytest.fixture
def namespace(controllers_cluster: KubeCluster) -> Iterator[str]:
    name = f"eng-{secrets.token_hex(4)}"
    controllers_cluster.create_namespace(name)
    yield name
    controllers_cluster.delete_namespace(name)


async def pods_of(api: Any, namespace: str, selector: str) -> list[Any]:
    listed = await client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector)
    return [pod for pod in listed.items if pod.metadata.deletion_timestamp is None]


def all_running(count: int) -> Callable[[list[Any]], bool]:
    return lambda pods: len(pods) == count and all(p.status.phase == "Running" for p in pods)


async def end_pod(api: Any, namespace: str, name: str, code: str) -> None:
    """kwok ends the pod's container with exit `code` (the test's only say in its fate)."""
    patch = {"metadata": {"annotations": {EXIT_ANNOTATION: code}}}
    with contextlib.suppress(client.exceptions.ApiException):
        await client.CoreV1Api(api).patch_namespaced_pod(name, namespace, patch)


# -- Volcano -----------------------------------------------------------------------------------


@pytest.fixture
async def volcano(
    admin: Any, namespace: str, volcano_controllers: None
) -> AsyncIterator[VolcanoEngine]:
    engine = VolcanoEngine(api_client=admin, namespace=namespace, allowed_queues=("small",))
    yield engine
    await engine.close()


async def test_a_gang_that_does_not_fit_the_nodes_starts_no_pod_and_says_why(
    volcano: VolcanoEngine, admin: Any, namespace: str
) -> None:
    """Three 30-CPU replicas on two 32-CPU nodes: each would fit alone, the gang does not, so
    the real scheduler binds none of them and distrun says so from the PodGroup."""
    job = await volcano.submit(spec({"master": 1, "worker": 2}, cpu="30"), OWNER)
    waiting = await eventually(
        lambda: volcano.get_job(job.id, OWNER),
        lambda j: "all 3 replicas" in (j.reason or "") and ": " in (j.reason or ""),
        "the job to say why its gang waits",
    )
    print(f"--- waiting for node capacity: {waiting.reason}")
    assert waiting.state == JobState.PENDING
    assert "queue default" in (waiting.reason or "")
    pods = await pods_of(admin, namespace, f"volcano.sh/job-name={job.id}")
    assert not any(pod.spec.node_name for pod in pods), "a pod of an unplaceable gang was bound"
    await volcano.delete(job.id, OWNER)


async def test_a_gang_over_its_queues_capability_waits_with_the_schedulers_reason(
    volcano: VolcanoEngine, controllers_cluster: KubeCluster, namespace: str
) -> None:
    """A queue capped at 1 CPU and a 2-CPU gang: the PodGroup has no condition (Pending, not
    admitted to the queue), the reason is in the scheduler's event on it, and distrun shows
    it."""
    custom = kubernetes.client.CustomObjectsApi(controllers_cluster.admin)
    queue = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "small"},
        "spec": {"weight": 1, "reclaimable": True, "capability": {"cpu": "1"}},
    }
    with contextlib.suppress(kubernetes.client.ApiException):  # another test may have made it
        custom.create_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", queue)

    async def queue_state() -> str:
        found = await asyncio.to_thread(
            custom.get_cluster_custom_object, "scheduling.volcano.sh", "v1beta1", "queues", "small"
        )
        return str((found.get("status") or {}).get("state", ""))

    # Volcano's webhook refuses jobs for a queue its controller has not opened yet.
    await eventually(queue_state, lambda state: state == "Open", "the queue to open")
    job = await volcano.submit(spec({"master": 1, "worker": 1}, queue="small"), OWNER)
    waiting = await eventually(
        lambda: volcano.get_job(job.id, OWNER),
        lambda j: "insufficient cpu" in (j.reason or ""),
        "the job to give the scheduler's reason",
    )
    print(f"--- waiting for the queue: {waiting.reason}")
    assert waiting.state == JobState.PENDING
    assert (waiting.reason or "").startswith("waiting for queue small to admit all 2 replicas")
    await volcano.delete(job.id, OWNER)


@pytest.mark.parametrize("backoff_limit", [0, 1])
async def test_a_failing_job_restarts_as_often_as_asked_with_exact_log_seqs(
    volcano: VolcanoEngine,
    admin: Any,
    controllers_cluster: KubeCluster,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    backoff_limit: int,
) -> None:
    """PodFailed -> RestartJob, as the real controller does it (every pod recreated): the job
    restarts `backoff_limit` times, then fails; each attempt's lines keep their own seqs."""
    job_id = f"restarts-{backoff_limit}"
    monkeypatch.setattr(jobids, "new_job_id", lambda _name: job_id)  # to name the pods' logs
    job_spec = spec(
        {"master": 1, "worker": 1}, backoff_limit=backoff_limit, restart_policy="OnFailure"
    )
    for replica in job_spec.replica_names():
        log = controllers_cluster.pod_log(namespace, f"{job_id}-{replica}")
        log.write(*(f"{replica} line {n}" for n in range(3)))
    await volcano.submit(job_spec, OWNER)
    lines: dict[str, list[tuple[int, str]]] = {name: [] for name in job_spec.replica_names()}
    states: list[JobState] = []
    follower = asyncio.create_task(collect(volcano, job_id, lines, states))
    selector = f"volcano.sh/job-name={job_id}"
    uids: set[str] = set()
    for attempt in range(backoff_limit + 1):
        pods = await eventually(
            lambda: pods_of(admin, namespace, selector),
            lambda found, seen=frozenset(uids): (
                all_running(2)(found) and not seen & {p.metadata.uid for p in found}
            ),
            f"attempt {attempt + 1}'s pods to run",
        )
        uids |= {pod.metadata.uid for pod in pods}
        await eventually(
            async_value(lambda: min(len(seen) for seen in lines.values())),
            lambda count, want=3 * (attempt + 1): count >= want,
            f"attempt {attempt + 1}'s lines",
        )
        await end_pod(admin, namespace, f"{job_id}-worker-0", "1")
    failed = await eventually(
        lambda: volcano.get_job(job_id, OWNER), lambda j: j.state.terminal, "the job to fail"
    )
    print(f"--- failed after {backoff_limit} restart(s): {failed.reason}")
    assert failed.state == JobState.FAILED
    assert [r.restarts for r in failed.replicas] == [backoff_limit, backoff_limit]
    await asyncio.wait_for(follower, WAIT)
    assert states[-1] == JobState.FAILED
    for replica, seen in lines.items():
        expected = [
            (attempt * 3 + n, f"{replica} line {n}")
            for attempt in range(backoff_limit + 1)
            for n in range(3)
        ]
        assert seen == expected, replica
    await volcano.delete(job_id, OWNER)


def restart_variable(pod: Any, container: str | None = None) -> str:
    """DISTRUN_RESTART as the kubelet gives it to the pod's (named) container: the annotation
    its downward-API reference names."""
    [main] = [c for c in pod.spec.containers if container in (None, c.name)][:1]
    [var] = [v for v in main.env if v.name == "DISTRUN_RESTART"]
    path = var.value_from.field_ref.field_path
    key = path.removeprefix("metadata.annotations['").removesuffix("']")
    return str(pod.metadata.annotations[key])


async def test_a_whole_job_restart_recreates_every_replica_then_the_job_succeeds(
    volcano: VolcanoEngine, admin: Any, namespace: str
) -> None:
    """%restart=job with %maxRestarts=2 on the real Volcano controller, followed as a cell
    follows it: the worker fails once; the controller restarts the whole job (every pod
    recreated, none of the first attempt left), distrun says attempt 2 of a whole-job restart
    and why the first ended, and the job then succeeds. A server that never followed it (a
    fresh engine) shows the same timeline: both attempts, the failure, the restart, the end."""
    job = await volcano.submit(
        spec({"master": 1, "worker": 1}, restart="job", max_restarts=2), OWNER
    )
    follower = asyncio.create_task(collect(volcano, job.id, {"master-0": [], "worker-0": []}, []))
    selector = f"volcano.sh/job-name={job.id}"
    first = await eventually(
        lambda: pods_of(admin, namespace, selector), all_running(2), "attempt 1's pods to run"
    )
    first_uids = {pod.metadata.uid for pod in first}
    assert {restart_variable(pod) for pod in first} == {"0"}
    await end_pod(admin, namespace, f"{job.id}-worker-0", "1")
    second = await eventually(
        lambda: pods_of(admin, namespace, selector),
        lambda found: all_running(2)(found) and not first_uids & {p.metadata.uid for p in found},
        "attempt 2: every replica's pod recreated and running",
    )
    current = await eventually(  # the job's phase follows its pods
        lambda: volcano.get_job(job.id, OWNER),
        lambda j: j.state == JobState.RUNNING,
        "the restarted job to be running",
    )
    failure = current.last_failure
    print(f"--- after the worker's failure: attempt {current.attempt}, {current.restart_scope}")
    print(f"--- last failure: {failure and failure.text}")
    assert (current.attempt, current.max_restarts, current.restart_scope) == (2, 2, "job")
    assert [r.restarts for r in current.replicas] == [1, 1]
    assert failure is not None
    assert (failure.text, failure.attempt, failure.exit_code) == (
        "worker-0 failed: exit code 1",
        1,
        1,
    )
    assert {restart_variable(pod) for pod in second} == {"1"}  # DISTRUN_RESTART, as locally
    await end_pod(admin, namespace, f"{job.id}-worker-0", "0")
    await end_pod(admin, namespace, f"{job.id}-master-0", "0")
    done = await eventually(
        lambda: volcano.get_job(job.id, OWNER), lambda j: j.state.terminal, "the job to end"
    )
    await asyncio.wait_for(follower, WAIT)
    print(f"--- ended {done.state.value} at attempt {done.attempt}")
    assert done.state == JobState.SUCCEEDED
    assert done.attempt == 2
    left = {p.metadata.uid for p in await pods_of(admin, namespace, selector)}
    assert not left & first_uids  # nothing of the first attempt runs on
    assert {p.metadata.uid for p in second} >= left
    fresh = VolcanoEngine(api_client=admin, namespace=namespace)
    try:
        read = await fresh.get_job(job.id, OWNER)
    finally:
        await fresh.close()
    for event in read.timeline:
        print(f"--- {event.time - read.created_at:5.1f} s  attempt {event.attempt}  {event.text}")
    assert [(e.kind, e.attempt) for e in read.timeline] == [
        ("submitted", 1),
        ("started", 1),
        ("failed", 1),
        ("restarting", 1),
        ("started", 2),
        ("ended", 2),
    ]
    assert read.timeline[3].text.startswith("restart 1/2 of the job: worker-0 failed (exit code 1)")
    assert read.timeline[-1].text == "the job succeeded"
    assert read.to_json()["last_failure"]["replica"] == "worker-0"
    await volcano.delete(job.id, OWNER)


# The local engine's attempts for a replica failing every time at backoff_limit 2
# (tests/integration/test_local_engine.py): what each engine must match.
ATTEMPTS = {
    ("Never", 1): 1,
    ("OnFailure", 1): 3,
    ("ExitCode", 1): 1,
    ("ExitCode", 137): 3,
}


@pytest.mark.parametrize(("policy", "code"), list(ATTEMPTS))
async def test_a_replica_failing_every_attempt_gets_the_local_engines_number_of_attempts(
    volcano: VolcanoEngine, admin: Any, namespace: str, policy: str, code: int
) -> None:
    """restart_policy and backoff_limit 2 on the real Volcano controller: the worker fails
    every attempt with `code`; the job gets as many attempts as on the local engine, fails,
    and shows its restarts while it runs and after."""
    job = await volcano.submit(
        spec({"master": 1, "worker": 1}, restart_policy=policy, backoff_limit=2), OWNER
    )
    selector = f"volcano.sh/job-name={job.id}"
    uids: set[str] = set()
    attempts = 0
    while True:
        found = await eventually(
            lambda: asyncio.gather(
                volcano.get_job(job.id, OWNER), pods_of(admin, namespace, selector)
            ),
            lambda seen, old=frozenset(uids): (
                seen[0].state.terminal
                or (all_running(2)(seen[1]) and not old & {p.metadata.uid for p in seen[1]})
            ),
            f"attempt {attempts + 1} to run, or the job to end",
        )
        current, pods = found
        if current.state.terminal:
            break
        attempts += 1
        assert [r.restarts for r in current.replicas] == [attempts - 1] * 2, current.replicas
        uids |= {pod.metadata.uid for pod in pods}
        await end_pod(admin, namespace, f"{job.id}-worker-0", str(code))
    print(f"--- {policy}, exit {code}: {attempts} attempts; {current.reason}")
    assert attempts == ATTEMPTS[policy, code]
    assert current.state == JobState.FAILED
    assert [r.restarts for r in current.replicas] == [attempts - 1] * 2
    if attempts == 1:  # ended at once: the failed pod is kept, and says why
        assert current.reason == f"worker-0 failed: exit code {code}"
    await volcano.delete(job.id, OWNER)


async def test_a_completed_job_shows_what_became_of_the_workers_the_controller_removed(
    volcano: VolcanoEngine, admin: Any, namespace: str
) -> None:
    """The master succeeds: TaskCompleted -> CompleteJob; the controller deletes the running
    workers' pods. They read as stopped with the job, not as waiting for a pod."""
    job = await volcano.submit(spec({"master": 1, "worker": 2}), OWNER)
    selector = f"volcano.sh/job-name={job.id}"
    await eventually(lambda: pods_of(admin, namespace, selector), all_running(3), "the pods")
    await end_pod(admin, namespace, f"{job.id}-master-0", "0")
    done = await eventually(
        lambda: volcano.get_job(job.id, OWNER), lambda j: j.state.terminal, "the job to end"
    )
    assert done.state == JobState.SUCCEEDED
    await eventually(
        lambda: pods_of(admin, namespace, f"{selector},volcano.sh/task-spec=worker"),
        lambda found: found == [],
        "the controller to remove the workers' pods",
    )
    ended = await volcano.get_job(job.id, OWNER)
    by_name = {r.name: r for r in ended.replicas}
    assert by_name["master-0"].state == JobState.SUCCEEDED
    for worker in ("worker-0", "worker-1"):
        assert by_name[worker].reason == REMOVED_REASON
        assert by_name[worker].state == JobState.CANCELLED
    await volcano.delete(job.id, OWNER)


async def collect(
    engine: Any, job_id: str, lines: dict[str, list[tuple[int, str]]], states: list[JobState]
) -> None:
    async for event in engine.follow(job_id, OWNER):
        if isinstance(event, LogBatch):
            for line in event.lines:
                lines[line.replica].append((line.seq, line.text))
        elif isinstance(event, JobUpdate):
            states.append(event.job.state)


def async_value(read: Callable[[], Any]) -> Callable[[], Any]:
    async def value() -> Any:
        return read()

    return value


# -- Trainer v2 --------------------------------------------------------------------------------


@pytest.fixture
async def trainer(
    admin: Any, namespace: str, trainer_controllers: None
) -> AsyncIterator[TrainerEngine]:
    engine = TrainerEngine(api_client=admin, namespace=namespace)
    yield engine
    await engine.close()


async def test_a_trainjob_runs_on_the_torch_runtime_and_reports_status_and_logs(
    trainer: TrainerEngine, admin: Any, controllers_cluster: KubeCluster, namespace: str
) -> None:
    """Trainer turns distrun's TrainJob into a JobSet, the Job controller into pods carrying the
    runtime's torchrun variables; distrun reads their status and logs, and the job succeeds
    when they do."""
    job_spec = spec({"master": 1, "worker": 1})
    job = await trainer.submit(job_spec, OWNER)
    selector = trainer.pod_selector(job.id)
    pods = await eventually(
        lambda: pods_of(admin, namespace, selector), all_running(2), "Trainer's pods to run"
    )
    by_replica = {trainer.replica_of(pod.to_dict() | meta(pod), job_spec): pod for pod in pods}
    assert set(by_replica) == {"master-0", "worker-0"}
    for index, replica in enumerate(("master-0", "worker-0")):
        pod = by_replica[replica]
        [main] = [c for c in pod.spec.containers if c.name == trainer.container_name(job_spec)]
        env = {var.name: var.value for var in main.env or []}
        assert env.get("PET_NNODES") == "2", env
        assert env.get("PET_NPROC_PER_NODE") == "1", env  # one process per replica, not "auto"
        assert restart_variable(pod, trainer.container_name(job_spec)) == "0"  # from JobSet
        log = controllers_cluster.pod_log(namespace, pod.metadata.name)
        log.write(f"hello from node {index}")
    lines: dict[str, list[tuple[int, str]]] = {"master-0": [], "worker-0": []}
    states: list[JobState] = []
    follower = asyncio.create_task(collect(trainer, job.id, lines, states))
    await eventually(
        async_value(lambda: all(lines.values())), bool, "the first line of every replica"
    )
    assert lines == {"master-0": [(0, "hello from node 0")], "worker-0": [(0, "hello from node 1")]}
    running = await trainer.get_job(job.id, OWNER)
    assert running.state == JobState.RUNNING
    for pod in pods:
        await end_pod(admin, namespace, pod.metadata.name, "0")
    done = await eventually(
        lambda: trainer.get_job(job.id, OWNER), lambda j: j.state.terminal, "the job to end"
    )
    assert done.state == JobState.SUCCEEDED, done.reason
    await asyncio.wait_for(follower, WAIT)
    assert states[-1] == JobState.SUCCEEDED
    await trainer.delete(job.id, OWNER)


def meta(pod: Any) -> dict[str, Any]:
    """The pod's metadata as the API writes it (camelCase keys the engine reads)."""
    return {"metadata": {"labels": pod.metadata.labels, "annotations": pod.metadata.annotations}}


async def remains_of(api: Any, namespace: str, job_id: str) -> dict[str, list[str]]:
    """What is left of a TrainJob: itself, its JobSet, their Jobs, pods and ConfigMaps (the
    code and Trainer's runtime snapshots; the namespace's CA bundle aside)."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    selector = f"jobset.sigs.k8s.io/jobset-name={job_id}"
    found: dict[str, list[str]] = {}
    for group, version, plural in (
        ("trainer.kubeflow.org", "v1alpha1", "trainjobs"),
        ("jobset.x-k8s.io", "v1alpha2", "jobsets"),
    ):
        listed = await custom.list_namespaced_custom_object(group, version, namespace, plural)
        found[plural] = [item["metadata"]["name"] for item in listed["items"]]
    jobs = await client.BatchV1Api(api).list_namespaced_job(namespace, label_selector=selector)
    found["jobs"] = [job.metadata.name for job in jobs.items]
    pods = await core.list_namespaced_pod(namespace, label_selector=selector)
    found["pods"] = [pod.metadata.name for pod in pods.items]
    maps = await core.list_namespaced_config_map(namespace)
    found["configmaps"] = [m.metadata.name for m in maps.items if m.metadata.name != ROOT_CA]
    return found


ROOT_CA = "kube-root-ca.crt"


async def pods_added(api: Any, namespace: str, selector: str, since: str, into: list[str]) -> None:
    """Appends the name of every pod created after resourceVersion `since`."""
    watch = kubernetes_asyncio.watch.Watch()
    core = client.CoreV1Api(api)
    async with watch.stream(
        core.list_namespaced_pod, namespace, label_selector=selector, resource_version=since
    ) as events:
        async for event in events:
            if event["type"] == "ADDED":
                into.append(event["object"].metadata.name)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"restart_policy": "ExitCode"}, "restart_policy ExitCode is not held on Trainer v2"),
        ({"restart_policy": "OnFailure", "restart": "replica"}, "restart of single replicas"),
    ],
)
async def test_trainer_refuses_restarts_its_jobset_cannot_make(
    trainer: TrainerEngine, admin: Any, namespace: str, fields: dict[str, Any], words: str
) -> None:
    """Restarts by exit code or of single replicas, which a JobSet cannot make (it restarts the
    whole group on a child Job's failure): refused in words, nothing made."""
    with pytest.raises(SpecError, match=words):
        await trainer.submit(spec({"master": 1, "worker": 1}, backoff_limit=2, **fields), OWNER)
    listed = await client.CustomObjectsApi(admin).list_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", namespace, "trainjobs"
    )
    assert listed["items"] == []


async def test_a_trainjob_whole_job_restart_recreates_every_node_then_succeeds(
    trainer: TrainerEngine, admin: Any, namespace: str
) -> None:
    """%restart=job with %maxRestarts=2 on the real Trainer and JobSet: the job runs on a
    TrainingRuntime of its own whose JobSet restarts the whole group; worker-0 fails once; JobSet
    recreates every node (none of attempt 1 left), distrun says attempt 2 of a whole-job
    restart, DISTRUN_RESTART goes 0 then 1, and the job succeeds. The runtime goes with it."""
    job_spec = spec({"master": 1, "worker": 1}, restart="job", max_restarts=2)
    job = await trainer.submit(job_spec, OWNER)
    custom = client.CustomObjectsApi(admin)
    runtime = await custom.get_namespaced_custom_object(
        "trainer.kubeflow.org", "v1alpha1", namespace, "trainingruntimes", job.id
    )
    assert runtime["spec"]["template"]["spec"]["failurePolicy"]["maxRestarts"] == 2
    assert [o["name"] for o in runtime["metadata"]["ownerReferences"]] == [job.id]
    selector = trainer.pod_selector(job.id)
    first = await eventually(
        lambda: pods_of(admin, namespace, selector), all_running(2), "attempt 1's nodes to run"
    )
    first_uids = {pod.metadata.uid for pod in first}
    assert {restart_variable(pod, "node") for pod in first} == {"0"}
    [worker] = [p for p in first if trainer.replica_of(meta(p), job_spec) == "worker-0"]
    await end_pod(admin, namespace, worker.metadata.name, "1")
    second = await eventually(
        lambda: pods_of(admin, namespace, selector),
        lambda found: all_running(2)(found) and not first_uids & {p.metadata.uid for p in found},
        "attempt 2: every node's pod recreated and running",
    )
    assert {restart_variable(pod, "node") for pod in second} == {"1"}  # DISTRUN_RESTART, as locally
    current = await eventually(
        lambda: trainer.get_job(job.id, OWNER),
        lambda j: j.state == JobState.RUNNING and j.attempt == 2,
        "distrun to say attempt 2",
    )
    print(f"--- after the worker's failure: attempt {current.attempt}, {current.restart_scope}")
    assert (current.max_restarts, current.restart_scope) == (2, "job")
    for pod in second:
        await end_pod(admin, namespace, pod.metadata.name, "0")
    done = await eventually(
        lambda: trainer.get_job(job.id, OWNER), lambda j: j.state.terminal, "the job to end"
    )
    print(f"--- ended {done.state.value} at attempt {done.attempt}")
    assert (done.state, done.attempt) == (JobState.SUCCEEDED, 2), done.reason
    left = {p.metadata.uid for p in await pods_of(admin, namespace, selector)}
    assert not left & first_uids  # nothing of the first attempt runs on
    await trainer.delete(job.id, OWNER)

    async def runtimes() -> list[str]:
        listed = await custom.list_namespaced_custom_object(
            "trainer.kubeflow.org", "v1alpha1", namespace, "trainingruntimes"
        )
        return [item["metadata"]["name"] for item in listed["items"]]

    await eventually(runtimes, lambda names: job.id not in names, "the job's runtime to go")


@pytest.mark.parametrize("action", ["cancel", "delete"])
async def test_cancelling_or_deleting_a_trainjob_leaves_nothing_and_starts_no_pod(
    trainer: TrainerEngine, admin: Any, namespace: str, action: str
) -> None:
    """Trainer re-applies the JobSet of a TrainJob that waits for its dependents (Foreground
    deletion), so pods kept coming after a cancel and the job never went; suspended, then
    deleted in the Background, the TrainJob, its JobSet, Jobs, pods and ConfigMaps all go and
    no pod starts after."""
    job = await trainer.submit(spec({"master": 1, "worker": 1}), OWNER)
    selector = trainer.pod_selector(job.id)
    await eventually(lambda: pods_of(admin, namespace, selector), all_running(2), "the pods")
    listed = await client.CoreV1Api(admin).list_namespaced_pod(namespace, label_selector=selector)
    print(f"--- pods before the {action}: {[p.metadata.name for p in listed.items]}")
    created: list[str] = []
    watcher = asyncio.create_task(
        pods_added(admin, namespace, selector, listed.metadata.resource_version, created)
    )
    try:
        if action == "cancel":
            cancelled = await trainer.cancel(job.id, OWNER)
            assert cancelled.state == JobState.CANCELLED
        else:
            await trainer.delete(job.id, OWNER)
        nothing = {k: [] for k in ("trainjobs", "jobsets", "jobs", "pods", "configmaps")}
        started = time.monotonic()
        await eventually(
            lambda: remains_of(admin, namespace, job.id),
            lambda found: found == nothing,
            f"nothing of the job left after its {action}",
        )
        # Not asserted (timings belong in benchmarks/): the garbage collector's pace here.
        print(f"--- nothing left {time.monotonic() - started:.1f} s after the {action}")
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    # Before the TrainJob was suspended first, two pods were once created just after a delete
    # in the Background (Trainer re-applying the JobSet from its cache); under Foreground they
    # kept coming and the job never went (issue 30).
    assert created == [], f"pods created after the {action}"


async def test_kueue_admits_a_trainjob_with_distruns_runtime_patches_and_it_runs(
    admin: Any,
    namespace: str,
    controllers_cluster: KubeCluster,
    trainer_controllers: None,
    kueue_controllers: None,
) -> None:
    """Kueue admits the Workload and resumes the TrainJob without dropping distrun's runtime
    patch (Kueue v0.14.0, built on Trainer v2.0's API types, erased it and the job never ran);
    Trainer builds the JobSet from the runtime and that patch (the code volume and its mount,
    labels, the hardened container), the pods run with the code, the user's env and resources,
    and the job ends."""
    queue = make_queues(controllers_cluster, namespace, cpu="4")
    engine = TrainerEngine(
        api_client=admin, namespace=namespace, queue_system="kueue", default_queue=queue
    )
    try:
        job_spec = spec({"master": 1, "worker": 1}, env={"GREETING": "hello"})
        job = await engine.submit(job_spec, OWNER)
        selector = engine.pod_selector(job.id)

        async def job_and_pods() -> tuple[Any, list[Any]]:
            return await engine.get_job(job.id, OWNER), await pods_of(admin, namespace, selector)

        running, pods = await eventually(
            job_and_pods,
            lambda found: found[0].reason == PATCH_REMOVED or all_running(2)(found[1]),
            "Kueue to admit the TrainJob and Trainer's pods to run",
        )
        assert running.reason != PATCH_REMOVED, "Kueue's admission erased distrun's patch"
        [workload] = await workloads_of(admin, namespace)
        admitted = [c for c in workload["status"]["conditions"] if c["type"] == "Admitted"]
        assert [c["status"] for c in admitted] == ["True"], workload["status"]
        for pod in pods:
            [main] = [c for c in pod.spec.containers if c.name == "node"]
            env = {var.name: var.value for var in main.env or []}
            assert env.get("GREETING") == "hello", env
            assert main.resources.requests["cpu"] == "1"
            assert any(m.name == CODE_VOLUME for m in main.volume_mounts or []), main
            assert any(v.name == CODE_VOLUME for v in pod.spec.volumes or []), pod.spec.volumes
        for pod in pods:
            await end_pod(admin, namespace, pod.metadata.name, "0")
        done = await eventually(
            lambda: engine.get_job(job.id, OWNER), lambda j: j.state.terminal, "the job to end"
        )
        assert done.state == JobState.SUCCEEDED, done.reason
        await engine.delete(job.id, OWNER)
    finally:
        await engine.close()


async def workloads_of(api: Any, namespace: str) -> list[Any]:
    custom = client.CustomObjectsApi(api)
    listed = await custom.list_namespaced_custom_object(
        WORKLOADS.group, WORKLOADS.version, namespace, WORKLOADS.plural
    )
    items: list[Any] = listed["items"]
    return items
