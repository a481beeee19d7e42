"""A Kubernetes job's timeline, from its object, its pods and the restart ledger, in the local
engine's shape (what the log viewer's Timeline tab and `distrun status` read)."""

from typing import Any

from distrun.client.console import job_details
from distrun.core.job import JobState
from distrun.core.spec import JobSpec
from distrun.engines.kube.engine import stored_spec
from distrun.engines.kube.kubeflow import KubeflowEngine
from distrun.engines.kube.manifests.common import Target, object_metadata
from distrun.engines.kube.restart_ledger import RestartBook, observe, read_book, write_book
from distrun.engines.kube.timeline import signal_name
from distrun.engines.kube.volcano import VolcanoEngine

T0 = "2026-01-01T00:00:00Z"


def at(second: int) -> str:
    return f"2026-01-01T00:00:{second:02d}Z"


def volcano_job(restart: str, max_restarts: int) -> dict[str, Any]:
    spec = JobSpec.from_dict(
        {
            "framework": "pytorch",
            "code": "x = 1\n",
            "roles": {"master": {"replicas": 1}, "worker": {"replicas": 1}},
            "restart": restart,
            "max_restarts": max_restarts,
        }
    )
    meta = object_metadata(Target("job-abcde", "ns", "alice"), spec)
    meta["creationTimestamp"] = T0
    return {"kind": "Job", "metadata": meta, "spec": {"maxRetry": max_restarts + 1}}


def volcano_pod(uid: str, retry: int, started: str, ended: tuple[int, str] | None = None) -> Any:
    """A pod the Volcano controller made at retryCount `retry`; `ended`: its exit and end."""
    state: dict[str, Any] = {"running": {"startedAt": started}}
    phase = "Running"
    if ended is not None:
        code, finished = ended
        state = {"terminated": {"exitCode": code, "startedAt": started, "finishedAt": finished}}
        phase = "Failed" if code else "Succeeded"
    return {
        "metadata": {
            "name": uid,
            "uid": uid,
            "annotations": {"volcano.sh/job-retry-count": str(retry)},
        },
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "pytorch", "restartCount": 0, "state": state}],
        },
    }


def status(phase: str, retries: int, conditions: dict[str, int]) -> dict[str, Any]:
    return {
        "state": {"phase": phase, "lastTransitionTime": at(max(conditions.values()))},
        "retryCount": retries,
        "conditions": [
            {"status": name, "lastTransitionTime": at(second)}
            for name, second in conditions.items()
        ],
    }


def kinds(job: Any) -> list[tuple[str, int]]:
    return [(event.kind, event.attempt) for event in job.timeline]


def test_a_volcano_whole_job_restart_shows_each_attempt_and_why_the_first_ended() -> None:
    """The worker exits 1 in attempt 1 (seen by a follower, then deleted with every pod by the
    controller); attempt 2's pods run and succeed. The ledger, read back from its annotation,
    and the object's conditions give the local engine's timeline."""
    engine = VolcanoEngine(api_client=object())
    obj = volcano_job("job", 2)
    book: RestartBook = {}
    observe(book, "master-0", volcano_pod("m1", 0, at(2)), 1)
    observe(book, "worker-0", volcano_pod("w1", 0, at(3)), 1)
    failed = volcano_pod("w1", 0, at(3), (1, at(5)))
    assert observe(book, "worker-0", failed, engine.pod_attempt(failed))
    book = read_book(write_book(book))
    obj["status"] = status("Running", 1, {"Restarting": 6, "Pending": 7, "Running": 9})
    pods = {
        "master-0": volcano_pod("m2", 1, at(8)),
        "worker-0": volcano_pod("w2", 1, at(9)),
    }
    running = engine.describe_job(obj, stored_spec(obj), pods, book)
    assert (running.attempt, running.restart_scope) == (2, "job")
    assert kinds(running) == [
        ("submitted", 1),
        ("started", 1),
        ("failed", 1),
        ("restarting", 1),
        ("started", 2),
    ]
    failure = running.last_failure
    assert failure is not None
    assert (failure.text, failure.replica, failure.exit_code) == (
        "worker-0 failed: exit code 1",
        "worker-0",
        1,
    )
    restart = running.timeline[3]
    assert restart.text.startswith("restart 1/2 of the job: worker-0 failed (exit code 1)")
    assert [e.time - running.created_at for e in running.timeline] == [0, 2, 5, 5, 8]
    obj["status"] = status("Completed", 1, {"Restarting": 6, "Running": 9, "Completed": 12})
    pods = {
        "master-0": volcano_pod("m2", 1, at(8), (0, at(11))),
        "worker-0": volcano_pod("w2", 1, at(9), (0, at(12))),
    }
    done = engine.describe_job(obj, stored_spec(obj), pods, book).to_json()
    assert [(e["kind"], e["attempt"]) for e in done["timeline"]][-1] == ("ended", 2)
    assert done["timeline"][-1]["text"] == "the job succeeded"
    assert done["last_failure"]["text"] == "worker-0 failed: exit code 1"
    printed = job_details(done)
    assert "attempt:   2 of 3 (a failure restarts the whole job)" in printed
    assert "last failure: worker-0 failed: exit code 1" in printed
    assert "attempt 2  attempt 2 started" in printed


def test_a_restart_whose_cause_no_server_saw_says_so_at_the_controllers_time() -> None:
    engine = VolcanoEngine(api_client=object())
    obj = volcano_job("job", 2)
    obj["status"] = status("Running", 1, {"Restarting": 6, "Running": 9})
    pods = {"master-0": volcano_pod("m2", 1, at(8)), "worker-0": volcano_pod("w2", 1, at(9))}
    job = engine.describe_job(obj, stored_spec(obj), pods, {})
    assert kinds(job) == [("submitted", 1), ("restarting", 1), ("started", 2)]
    assert "why attempt 1 ended is not known" in job.timeline[1].text
    assert job.timeline[1].time - job.created_at == 6
    assert job.last_failure is None


def test_a_running_condition_older_than_the_restart_is_not_the_current_attempts_start() -> None:
    obj = volcano_job("job", 2)
    obj["status"] = status("Pending", 1, {"Running": 4, "Restarting": 6})
    job = VolcanoEngine(api_client=object()).describe_job(obj, stored_spec(obj), {}, {})
    assert kinds(job) == [("submitted", 1), ("restarting", 1)]


def operator_pod(count: int, last: tuple[int, str, str, str] | None) -> Any:
    """A Training Operator pod restarted in place `count` times, its last run: code, reason,
    start and end."""
    container: dict[str, Any] = {
        "name": "pytorch",
        "restartCount": count,
        "state": {"running": {"startedAt": at(20)}},
    }
    if last is not None:
        code, reason, started, finished = last
        container["lastState"] = {
            "terminated": {
                "exitCode": code,
                "reason": reason,
                "startedAt": started,
                "finishedAt": finished,
            }
        }
    return {
        "metadata": {"name": "w", "uid": "w"},
        "spec": {"containers": [{"resources": {"limits": {"memory": "200Mi"}}}]},
        "status": {"phase": "Running", "containerStatuses": [container]},
    }


def test_the_operators_restarts_in_place_are_numbered_and_an_oom_kill_named() -> None:
    """%restart=replica on the Training Operator: the worker is OOMKilled, restarts in its pod,
    then exits 3 and restarts again; attempt stays 1 and each restart is the job's."""
    spec = JobSpec.from_dict(
        {
            "framework": "pytorch",
            "code": "x = 1\n",
            "roles": {"master": {"replicas": 1}, "worker": {"replicas": 1}},
            "restart": "replica",
            "restart_policy": "OnFailure",
            "max_restarts": 3,
        }
    )
    meta = object_metadata(Target("job-abcde", "ns", "alice"), spec)
    meta["creationTimestamp"] = T0
    obj = {
        "kind": "PyTorchJob",
        "metadata": meta,
        "status": {
            "startTime": at(1),
            "conditions": [{"type": "Running", "status": "True", "lastTransitionTime": at(2)}],
        },
    }
    book: RestartBook = {}
    observe(book, "worker-0", operator_pod(1, (137, "OOMKilled", at(2), at(6))))
    now = operator_pod(2, (3, "Error", at(7), at(10)))
    job = KubeflowEngine(api_client=object()).describe_job(obj, spec, {"worker-0": now}, book)
    assert job.attempt == 1
    assert kinds(job) == [("submitted", 1), ("started", 1)] + [("failed", 1), ("restarting", 1)] * 2
    oom, first, _, second = job.timeline[2:]
    assert (oom.signal, oom.oom, oom.exit_code) == ("SIGKILL", True, 137)
    assert oom.text == "worker-0 killed: out of memory (a 200 MiB limit)"
    assert first.text.startswith("restarting worker-0 (restart 1/3 of the job) after killed")
    assert second.text == "restarting worker-0 (restart 2/3 of the job) after exit code 3"
    assert job.timeline[1].time - job.created_at == 2  # its first run's start, not the restart's


def test_signals_are_named_from_the_runtimes_exit_codes_only() -> None:
    assert [signal_name(code) for code in (137, 143, 1, 128, 255, None)] == [
        "SIGKILL",
        "SIGTERM",
        None,
        None,
        None,
        None,
    ]


def test_a_job_whose_failure_ends_it_has_no_restart_after_it() -> None:
    engine = VolcanoEngine(api_client=object())
    obj = volcano_job("job", 1)
    book: RestartBook = {}
    observe(book, "worker-0", volcano_pod("w1", 0, at(3), (1, at(5))), 1)
    observe(book, "worker-0", volcano_pod("w2", 1, at(8), (1, at(9))), 2)
    obj["status"] = status("Failed", 2, {"Restarting": 6, "Running": 8, "Failed": 10})
    job = engine.describe_job(obj, stored_spec(obj), {}, book)
    assert job.state == JobState.FAILED and job.attempt == 2
    assert [e.kind for e in job.timeline if e.attempt == 2] == ["started", "failed", "ended"]
    assert job.timeline[-1].text == "worker-0 failed: exit code 1"


def test_a_failure_and_its_restart_stay_together_within_one_second() -> None:
    """Two restarts in place within one second (the API server's times are whole seconds):
    each failure is followed by its own restart, not both failures by both restarts."""
    spec = JobSpec.from_dict(
        {"framework": "pytorch", "code": "x = 1\n", "restart": "replica", "max_restarts": 2}
    )
    meta = object_metadata(Target("job-abcde", "ns", "alice"), spec)
    meta["creationTimestamp"] = T0
    obj = {"kind": "PyTorchJob", "metadata": meta, "status": {"startTime": at(1)}}
    book: RestartBook = {}
    observe(book, "worker-0", operator_pod(1, (1, "Error", at(2), at(5))))
    now = operator_pod(2, (2, "Error", at(5), at(5)))
    job = KubeflowEngine(api_client=object()).describe_job(obj, spec, {"worker-0": now}, book)
    assert [(e.kind, e.exit_code) for e in job.timeline[2:]] == [
        ("failed", 1),
        ("restarting", None),
        ("failed", 2),
        ("restarting", None),
    ]
    assert job.timeline[3].text.endswith("after exit code 1")


def test_an_oom_kill_seen_after_usage_was_read_names_the_peak_in_the_ledger() -> None:
    """The restart ledger's words for an OOM kill carry the replica's peak working set where
    metrics-server gave one before the kill, as the job's reason does (the tier's Trainer and
    Volcano jobs showed "(a 4 GiB limit)" in the timeline beside the reason's peak)."""
    book: RestartBook = {}
    pod = operator_pod(1, (137, "OOMKilled", at(2), at(6)))
    assert observe(book, "worker-0", pod, peak=190 * 2**20)
    [failure] = book["worker-0"].failures
    assert failure.text == "killed: out of memory (peak 190 MiB of a 200 MiB limit)"
    assert failure.oom and failure.code == 137


def test_a_read_keeps_counts_and_failures_but_not_a_start_alone() -> None:
    """A running pod's start is on the pod (and a follower records it): a read that sees only a
    new start writes nothing; a failure or a restart count is worth a write."""
    from distrun.engines.kube.restart_ledger import lasting_part, observe

    book: dict[str, Any] = {}
    before = lasting_part(book)
    running = {
        "metadata": {"uid": "u1"},
        "status": {
            "containerStatuses": [
                {"restartCount": 0, "state": {"running": {"startedAt": "2026-11-27T07:00:00Z"}}}
            ]
        },
    }
    observe(book, "worker-0", running)
    assert book["worker-0"].starts  # the read's answer has the start
    assert lasting_part(book) == before
    restarted = {
        "metadata": {"uid": "u1"},
        "status": {
            "containerStatuses": [
                {
                    "restartCount": 1,
                    "state": {"running": {"startedAt": "2026-11-27T07:00:09Z"}},
                    "lastState": {
                        "terminated": {"exitCode": 1, "finishedAt": "2026-11-27T07:00:08Z"}
                    },
                }
            ]
        },
    }
    observe(book, "worker-0", restarted)
    assert lasting_part(book) != before


def test_an_attempt_annotation_that_is_not_a_count_reads_as_the_first_attempt() -> None:
    """The pod's annotations are the user's to write through the job's template: a value that
    is not ASCII digits ("²".isdigit() holds; int() refuses it) is no count."""
    from distrun.engines.kube.manifests.volcano import ANNOTATION_RETRY_COUNT
    from distrun.engines.kube.trainer import TrainerEngine

    for engine, key in (
        (VolcanoEngine(), ANNOTATION_RETRY_COUNT),
        (TrainerEngine(), "jobset.sigs.k8s.io/restart-attempt"),
    ):
        for value, attempt in (("2", 3), ("²", 1), ("-1", 1), ("9" * 20, 1)):
            pod = {"metadata": {"annotations": {key: value}}}
            assert engine.pod_attempt(pod) == attempt, (engine.name, value)
