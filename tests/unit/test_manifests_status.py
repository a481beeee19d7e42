"""Pure readings of what the API server holds: job phases from conditions, replica status from
pods, log lines with timestamps, and the seq ledger."""

from typing import Any

from distrun.core.job import JobState
from distrun.core.spec import JobSpec
from distrun.engines.kube.engine import (
    Phase,
    conditions_phase,
    describe,
    replica_status,
    stored_spec,
)
from distrun.engines.kube.logs import (
    CUT_MARK,
    TIMESTAMP_ROOM,
    base_seq,
    current_instance,
    parse_line,
    parse_time,
    read_ledger,
    recorded_lines,
    split_log,
)
from distrun.engines.kube.manifests.common import Target, object_metadata
from distrun.engines.kube.trainer import PATCH_REMOVED, TrainerEngine
from distrun.engines.kube.volcano import VolcanoEngine

TERMINAL = {"Succeeded": JobState.SUCCEEDED, "Failed": JobState.FAILED}
SPEC = JobSpec.from_dict({"framework": "pytorch", "code": "x = 1\n"})


def condition(kind: str, at: str, status: str = "True") -> dict[str, str]:
    return {"type": kind, "status": status, "lastTransitionTime": at, "message": kind.lower()}


def job_object(**status: Any) -> dict[str, Any]:
    meta = object_metadata(Target("job-abcde", "ns", "alice"), SPEC)
    meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
    return {"kind": "PyTorchJob", "metadata": meta, "status": status}


def pod(phase: str, **container: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "uid": "u1"},
        "status": {"phase": phase, "containerStatuses": [{"name": "pytorch", **container}]},
    }


def test_the_terminal_condition_set_last_wins() -> None:
    obj = job_object(
        conditions=[
            condition("Succeeded", "2026-01-01T00:00:05Z"),
            condition("Failed", "2026-01-01T00:00:09Z"),
        ]
    )
    phase = conditions_phase(obj, TERMINAL, ("Running",))
    assert phase.state == JobState.FAILED and phase.reason == "failed"
    obj["status"]["conditions"].reverse()
    assert conditions_phase(obj, TERMINAL, ("Running",)).state == JobState.FAILED


def test_false_conditions_do_not_count_and_running_means_running() -> None:
    obj = job_object(
        conditions=[
            condition("Failed", "2026-01-01T00:00:09Z", status="False"),
            condition("Running", "2026-01-01T00:00:01Z"),
        ]
    )
    assert conditions_phase(obj, TERMINAL, ("Running",)).state == JobState.RUNNING
    assert conditions_phase(job_object(), TERMINAL, ("Running",)).state is None


def test_a_job_being_deleted_reads_as_cancelled() -> None:
    obj = job_object()
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:02Z"
    job = describe("kubeflow", obj, stored_spec(obj), {}, Phase(None))
    assert job.state == JobState.CANCELLED and job.reason == "cancelled by the user"


def test_describe_names_the_failed_replica_with_its_exit_code_and_message() -> None:
    obj = job_object()
    failed = pod(
        "Failed",
        state={
            "terminated": {
                "exitCode": 3,
                "message": "CUDA OOM\n",
                "startedAt": "2026-01-01T00:00:01Z",
            }
        },
    )
    job = describe("kubeflow", obj, stored_spec(obj), {"worker-0": failed}, Phase(JobState.FAILED))
    assert job.failed_replica == "worker-0"
    assert job.reason == "worker-0 failed: exit code 3: CUDA OOM"
    # master-0's pod is gone: the operator stops the replicas still running when a job ends.
    assert job.replicas[0].state == JobState.CANCELLED
    assert job.replicas[0].reason == "stopped when the job ended (the controller removed its pod)"
    running = describe("kubeflow", obj, stored_spec(obj), {}, Phase(None))
    assert running.replicas[0].reason == "no pod yet"  # an unfinished job's pods may still come


def test_a_failed_replica_explains_the_failure_not_the_operators_backoff_message() -> None:
    """No restart asked: the Training Operator still words it as a backoff limit."""
    obj = job_object()
    failed = pod("Failed", state={"terminated": {"exitCode": 1}})
    words = f"Job {obj['metadata']['name']} has failed because it has reached the specified backoff limit"
    phase = Phase(JobState.FAILED, words)
    job = describe("kubeflow", obj, stored_spec(obj), {"master-0": failed}, phase)
    assert job.reason == "master-0 failed: exit code 1"
    gone = describe("kubeflow", obj, stored_spec(obj), {}, phase)
    assert gone.reason == words  # no pod left to say more


def test_a_container_killed_for_memory_is_reported_in_words_with_its_limit() -> None:
    """Kubernetes says OOMKilled (exit 137): distrun says it as the local engine does."""
    obj = job_object()
    killed = pod("Failed", state={"terminated": {"exitCode": 137, "reason": "OOMKilled"}})
    killed["spec"] = {
        "containers": [{"name": "pytorch", "resources": {"limits": {"memory": "4Gi"}}}]
    }
    job = describe("kubeflow", obj, stored_spec(obj), {"worker-0": killed}, Phase(JobState.FAILED))
    assert job.reason == "worker-0 killed: out of memory (a 4 GiB limit)"
    del killed["spec"]  # no limit set: the node ran out
    job = describe("kubeflow", obj, stored_spec(obj), {"worker-0": killed}, Phase(JobState.FAILED))
    assert job.reason == "worker-0 killed: out of memory"
    # With the peak metrics-server gave for it (the engine's usage series, pod_usage.peaks).
    peaks = {"worker-0": int(3.9 * 2**30), "master-0": 2**20}
    job = describe(
        "kubeflow", obj, stored_spec(obj), {"worker-0": killed}, Phase(JobState.FAILED), peaks=peaks
    )
    assert job.reason == "worker-0 killed: out of memory (peak 3.9 GiB)"
    killed["spec"] = {"containers": [{"resources": {"limits": {"memory": "4Gi"}}}]}
    job = describe(
        "kubeflow", obj, stored_spec(obj), {"worker-0": killed}, Phase(JobState.FAILED), peaks=peaks
    )
    assert job.reason == "worker-0 killed: out of memory (peak 3.9 GiB of a 4 GiB limit)"


def test_pending_reason_comes_from_the_scheduler_or_the_waiting_container() -> None:
    unschedulable = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/2 nodes are available: insufficient nvidia.com/gpu",
                }
            ],
        },
    }
    assert replica_status("master-0", unschedulable).reason == (
        "Unschedulable: 0/2 nodes are available: insufficient nvidia.com/gpu"
    )
    pulling = pod(
        "Pending", state={"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}
    )
    assert replica_status("master-0", pulling).reason == "ImagePullBackOff: no such image"
    obj = job_object()
    job = describe("kubeflow", obj, stored_spec(obj), {"master-0": pulling}, Phase(None))
    assert job.state == JobState.PENDING
    assert job.reason == "master-0: ImagePullBackOff: no such image"


def test_stored_spec_round_trips_through_the_annotation() -> None:
    assert stored_spec(job_object()) == SPEC


def test_volcano_phases_map_to_job_states() -> None:
    engine = VolcanoEngine(api_client=object())
    for phase, state in (
        ("Pending", JobState.PENDING),
        ("Running", JobState.RUNNING),
        ("Completed", JobState.SUCCEEDED),
        ("Failed", JobState.FAILED),
        ("Aborted", JobState.CANCELLED),
    ):
        obj = {"status": {"state": {"phase": phase}}}
        assert engine.phase(obj).state == state


def test_a_trainjob_that_lost_distruns_runtime_patch_says_so_until_it_ends() -> None:
    """Kueue v0.14 writes the TrainJob back through Trainer v2.0's types (no runtimePatches):
    the job can never start, and the reason says why instead of the JobSet's refusal."""
    engine = TrainerEngine(api_client=object())
    patched = {"runtimePatches": [{"manager": "distrun.io/engine", "trainingRuntimeSpec": {}}]}
    failing = [condition("TrainJobResourcesCreationFailed", "2026-01-01T00:00:01Z")]
    stripped = {**job_object(conditions=failing), "spec": {"suspend": False}}
    assert engine.phase(stripped) == Phase(JobState.PENDING, PATCH_REMOVED)
    assert "Kueue v0.17" in PATCH_REMOVED
    assert engine.phase({**job_object(), "spec": patched}).reason != PATCH_REMOVED
    ended = [condition("Failed", "2026-01-01T00:00:09Z")]
    assert engine.phase({**job_object(conditions=ended), "spec": {}}).state == JobState.FAILED


def test_a_volcano_job_restart_counts_for_every_replica() -> None:
    """RestartJob recreates every pod: a container's restartCount starts again at 0, and the
    job's retryCount is what says how often the replicas restarted."""
    engine = VolcanoEngine(api_client=object())
    obj = job_object(state={"phase": "Running"}, retryCount=2)
    job = describe("volcano", obj, SPEC, {}, engine.phase(obj))
    assert [r.restarts for r in job.replicas] == [2] * len(job.replicas)
    assert engine.phase(job_object(state={"phase": "Failed"})).restarts == 0
    # The failure that ends the job is counted as a retry by Volcano, and restarted nothing.
    failed = {**job_object(state={"phase": "Failed"}, retryCount=2), "spec": {"maxRetry": 2}}
    assert engine.phase(failed).restarts == 1


def test_log_lines_parse_nanosecond_timestamps_and_keep_invalid_utf8_readable() -> None:
    when, text = parse_line(b"2026-01-01T00:00:01.123456789Z hello \xff world\r", 1000)
    assert abs(when - (parse_time("2026-01-01T00:00:01Z") or 0) - 0.123456) < 1e-6
    assert text == "hello \ufffd world"
    _when, text = parse_line(b"no timestamp here", 1000)
    assert text == "no timestamp here"


def test_a_log_line_over_the_limit_keeps_its_start_and_says_it_was_cut() -> None:
    assert parse_line(b"2026-01-01T00:00:01Z " + b"x" * 10, 10)[1] == "x" * 10
    assert parse_line(b"2026-01-01T00:00:01Z " + b"x" * 50, 10)[1] == "x" * 10 + CUT_MARK
    # The follower keeps max_bytes + TIMESTAMP_ROOM bytes of a line: still known as cut.
    followed = b"2026-01-01T00:00:01.123456789Z " + b"y" * 100
    assert parse_line(followed[: 10 + TIMESTAMP_ROOM], 10)[1] == parse_line(followed, 10)[1]


def test_split_log_keeps_a_last_line_without_newline() -> None:
    assert split_log(b"a\nb\n") == [b"a", b"b"]
    assert split_log(b"a\nb") == [b"a", b"b"]
    assert split_log(b"") == []
    # Before the container ended, the text after the last newline is still being written.
    assert split_log(b"a\nb", ended=False) == [b"a"]
    assert split_log(b"a\nb\n", ended=False) == [b"a", b"b"]


def test_ledger_gives_each_instance_the_lines_of_the_earlier_ones() -> None:
    configmap = {
        "metadata": {
            "annotations": {"distrun.io/log-ledger": '{"worker-0": [["u1:0", 5], ["u1:1", 3]]}'}
        }
    }
    ledger = read_ledger(configmap)
    assert base_seq(ledger, "worker-0", "u1:0") == 0
    assert base_seq(ledger, "worker-0", "u1:1") == 5
    assert base_seq(ledger, "worker-0", "u2:0") == 8  # a new pod continues after both
    assert recorded_lines(ledger, "worker-0", "u1:1") == 3
    assert recorded_lines(ledger, "worker-0", "u2:0") is None
    assert read_ledger({"metadata": {"annotations": {"distrun.io/log-ledger": "not json"}}}) == {}


def test_current_instance_counts_container_restarts() -> None:
    running = pod("Running", restartCount=2, state={"running": {}})
    instance = current_instance("worker-0", running, "pytorch")
    assert (instance.key, instance.started, instance.ended) == ("u1:2", True, False)
    previous = instance.previous()
    assert previous is not None and previous.key == "u1:1" and previous.ended
    waiting = current_instance("worker-0", pod("Pending", state={"waiting": {}}), "pytorch")
    assert not waiting.started and waiting.previous() is None


async def test_a_podgroup_without_a_condition_gives_the_schedulers_event() -> None:
    """A queue over its capability: Volcano's scheduler leaves the PodGroup without a
    condition and says why in a Normal `Unschedulable` event on it."""
    engine = VolcanoEngine(api_client=object())
    group = {"spec": {"queue": "small", "minMember": 2}, "status": {"phase": "Pending"}}
    events = {"items": [
        {"reason": "Scheduled", "message": "ignored", "lastTimestamp": "2026-01-01T00:00:03Z"},
        {"reason": "Unschedulable", "message": "old", "lastTimestamp": "2026-01-01T00:00:01Z"},
        {"reason": "Unschedulable", "message": "queue resource quota insufficient: overused",
         "lastTimestamp": "2026-01-01T00:00:02Z"},
    ]}  # fmt: skip
    api = FakePodGroupApi(group, events)
    obj = {"metadata": {"name": "job-abcde", "namespace": "ns", "uid": "u1"}}
    reason = await engine.waiting_reason(api, obj, None)  # type: ignore[arg-type]
    assert reason == (
        "waiting for queue small to admit all 2 replicas (gang scheduling): "
        "queue resource quota insufficient: overused"
    )
    assert api.asked == [("read the PodGroup", "job-abcde-u1"),
        ("read the PodGroup's events", "involvedObject.kind=PodGroup,involvedObject.name=job-abcde-u1")]  # fmt: skip


class FakePodGroupApi:
    """The two reads VolcanoEngine.waiting_reason makes, answered from memory."""

    def __init__(self, group: dict[str, Any], events: dict[str, Any]) -> None:
        self.group, self.events = group, events
        self.asked: list[tuple[str, str]] = []

    async def get(self, _res: Any, _namespace: str, name: str, what: str) -> dict[str, Any]:
        self.asked.append((what, name))
        return self.group

    async def list_events(self, _namespace: str, selector: str, what: str) -> dict[str, Any]:
        self.asked.append((what, selector))
        return self.events
