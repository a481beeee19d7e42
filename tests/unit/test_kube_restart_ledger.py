"""The replicas' restart ledger: restarts and the last failure of pods the controller deleted."""

from typing import Any

from distrun.core.job import JobState
from distrun.engines.kube.engine import Phase, describe, stored_spec
from distrun.engines.kube.manifests.common import Target, object_metadata
from distrun.engines.kube.restart_ledger import (
    ReplicaRecord,
    merge,
    observe,
    read_book,
    write_book,
)

from .test_manifests_status import SPEC

BACKOFF_WORDS = "PyTorchJob job-abcde has failed because it has reached the specified backoff limit"


def job_object() -> dict[str, Any]:
    meta = object_metadata(Target("job-abcde", "ns", "alice"), SPEC)
    meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
    return {"kind": "PyTorchJob", "metadata": meta, "status": {}}


def restarted(uid: str, count: int, finished: str, code: int = 1) -> dict[str, Any]:
    """A pod whose container restarted in place `count` times, the last run ending `code`."""
    last = {"terminated": {"exitCode": code, "reason": "Error", "finishedAt": finished}}
    container = {"name": "pytorch", "restartCount": count, "state": {"running": {}}}
    if count:
        container["lastState"] = last
    return {
        "metadata": {"name": "p", "uid": uid},
        "status": {"phase": "Running", "containerStatuses": [container]},
    }


def test_a_failed_job_whose_pods_were_deleted_keeps_each_replicas_restarts_and_exit() -> None:
    """OnFailure at backoff 2 on the Training Operator: the worker restarts in place twice, the
    operator fails the job and deletes the running pods; the record still says it."""
    obj, book = job_object(), {}
    master = restarted("m", 0, "")
    assert not observe(book, "master-0", master)
    assert observe(book, "worker-0", restarted("w", 1, "2026-01-01T00:00:05Z"))
    running = describe(
        "kubeflow", obj, stored_spec(obj), {"worker-0": restarted("w", 1, "x")}, Phase(None), book
    )
    assert [r.restarts for r in running.replicas] == [0, 1]
    assert observe(book, "worker-0", restarted("w", 2, "2026-01-01T00:00:09Z"))
    assert not observe(book, "worker-0", restarted("w", 2, "2026-01-01T00:00:09Z"))
    phase = Phase(JobState.FAILED, BACKOFF_WORDS)
    gone = describe("kubeflow", obj, stored_spec(obj), {}, phase, read_book(write_book(book)))
    assert [r.restarts for r in gone.replicas] == [0, 2]
    assert gone.reason == "worker-0 failed: exit code 1"
    assert gone.failed_replica == "worker-0"
    assert (gone.replicas[1].state, gone.replicas[1].exit_code) == (JobState.FAILED, 1)
    assert describe("kubeflow", obj, stored_spec(obj), {}, phase).reason == BACKOFF_WORDS


def test_counts_of_several_pods_add_up_and_the_newest_failure_wins() -> None:
    book: dict[str, ReplicaRecord] = {}
    observe(book, "worker-0", restarted("a", 2, "2026-01-01T00:00:09Z", 137))
    observe(book, "worker-0", restarted("b", 1, "2026-01-01T00:00:19Z", 3))
    observe(book, "worker-0", restarted("a", 1, "2026-01-01T00:00:04Z"))  # an older event
    record = book["worker-0"]
    assert record.restarts(None) == 3
    assert record.restarts(restarted("b", 4, "")) == 6  # the current pod counts on
    assert record.failure is not None and (record.failure.code, record.failure.text) == (
        3,
        "exit code 3",
    )
    other = {"worker-0": ReplicaRecord(pods={"a": 5})}
    assert merge(other, book) and other["worker-0"].pods == {"a": 5, "b": 1}
    assert other["worker-0"].failure == record.failure
    assert not merge(other, book)


def test_a_ledger_edited_by_hand_keeps_only_what_reads_as_a_record() -> None:
    raw = (
        '{"worker-0": {"pods": {"a": 2, "b": "x", "c": -1}, "earlier": true,'
        ' "failure": ["exit code 1", 1, "2026-01-01T00:00:09Z"]},'
        ' "master-0": [1, 2], "chief-0": {"failure": [1, 2]}}'
    )
    book = read_book(raw)
    assert set(book) == {"worker-0", "chief-0"}
    assert book["worker-0"].pods == {"a": 2} and book["worker-0"].earlier == 0
    assert book["chief-0"].failure is None
    assert read_book("[") == {} and read_book("[1]") == {}
    assert read_book(write_book(book)) == book


def test_two_runs_of_one_pod_ending_in_the_same_second_are_two_failures() -> None:
    """The API server's times are whole seconds: the pod's run number tells them apart, and a
    failure seen again (by another server, or in the next status) is not told twice."""
    book: dict[str, ReplicaRecord] = {}
    observe(book, "worker-0", restarted("w", 1, "2026-01-01T00:00:05Z"))
    assert observe(book, "worker-0", restarted("w", 2, "2026-01-01T00:00:05Z"))
    assert not observe(book, "worker-0", restarted("w", 2, "2026-01-01T00:00:05Z"))
    again = read_book(write_book(book))
    assert [f.run for f in again["worker-0"].failures] == ["w/0", "w/1"]
    assert not merge(again, book) and again == book
