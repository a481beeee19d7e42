"""Sequence numbers across the kubelet's log rotation (engines/kube/anchors.py), against the real
API server: kwok serves pod logs with the kubelet's own log reader, so renaming a log file and
starting a new one is a rotation as the kubelet does it (the API serves only the new file, and
a follower reads on into it). The real Training Operator makes the pods.

Two KubeflowEngine instances stand for two server processes: each follows through feeds of its
own, and they meet only in the API server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from typing import Any

import pytest
from kubernetes_asyncio import client

from distrun.core.job import Job, JobState
from distrun.core.logs import LogBatch, LogLine
from distrun.core.spec import JobSpec
from distrun.engines.kube.anchors import ANCHORS_ANNOTATION
from distrun.engines.kube.kubeflow import KubeflowEngine

from ..reliability.helpers import wait_until
from .cluster import KubeCluster, PodLog
from .real_operator import WAIT, submit_with_logs, succeed
from .waiting import eventually

pytestmark = pytest.mark.kubernetes

# Anchors close together and a short wait before a claim, so a test sees every case quickly.
POLICY = {
    "log_anchor_bytes": 2048,
    "log_anchor_seconds": 0.2,
    "log_anchor_flush_seconds": 1.0,
    "log_claim_after": 2.0,
    "log_rotation_bytes": 0,  # the tests rotate files of any size
}
CLAIM_GAP = 2048 // 22 + 1  # AnchorPolicy.claim_gap of POLICY


def text(replica: str, index: int) -> str:
    return f"{replica} says line {index:05d} " + "." * (index % 7)


def write(logs: dict[str, PodLog], lines: range) -> None:
    for replica, log in logs.items():
        log.write(*(text(replica, i) for i in lines))


@pytest.fixture
async def engines(kube_admin: Any, operator_namespace: str) -> AsyncIterator[list[KubeflowEngine]]:
    made = [
        KubeflowEngine(api_client=kube_admin, namespace=operator_namespace, **POLICY)
        for _ in range(3)
    ]
    yield made
    for engine in made:
        await engine.close()


class Viewer:
    """One follower's lines, by replica, in the order they came."""

    def __init__(self, engine: KubeflowEngine, job_id: str, since: dict[str, int] | None) -> None:
        self.lines: dict[str, list[LogLine]] = {}
        self.task: asyncio.Task[Job | None] = asyncio.create_task(self._read(engine, job_id, since))

    async def _read(
        self, engine: KubeflowEngine, job_id: str, since: dict[str, int] | None
    ) -> Job | None:
        last = None
        async with aclosing(engine.follow(job_id, "alice", since=since)) as events:
            async for event in events:
                if isinstance(event, LogBatch):
                    for line in event.lines:
                        self.lines.setdefault(line.replica, []).append(line)
                elif hasattr(event, "job"):
                    last = event.job
        return last

    def seqs(self, replica: str) -> list[int]:
        return [line.seq for line in self.lines.get(replica, [])]

    def texts(self, replica: str) -> list[str]:
        return [line.text for line in self.lines.get(replica, [])]

    async def has(self, replica: str, count: int) -> None:
        await wait_until(
            lambda: len(self.lines.get(replica, [])) >= count or self.task.done(),
            f"{count} lines of {replica}",
            WAIT,
        )
        if self.task.done():
            self.task.result()  # a follower that failed says why

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


async def anchors(kube_admin: Any, namespace: str, job_id: str) -> dict[str, Any]:
    configmap = await client.CoreV1Api(kube_admin).read_namespaced_config_map(job_id, namespace)
    book: dict[str, Any] = json.loads(
        (configmap.metadata.annotations or {}).get(ANCHORS_ANNOTATION, "{}")
    )
    return book


async def submit(
    engine: KubeflowEngine, cluster: KubeCluster, monkeypatch: pytest.MonkeyPatch
) -> tuple[Job, dict[str, PodLog]]:
    spec = JobSpec.from_dict(
        {"framework": "pytorch", "code": "pass\n", "roles": {"worker": {"replicas": 1}}}
    )
    return await submit_with_logs(cluster, engine, spec, monkeypatch)


async def followed_job(
    engine: KubeflowEngine, cluster: KubeCluster, monkeypatch: pytest.MonkeyPatch, count: int
) -> tuple[Job, dict[str, PodLog], list[str], Viewer]:
    """A job whose replicas wrote `count` lines, and a viewer of it on `engine` that has them."""
    job, logs = await submit(engine, cluster, monkeypatch)
    write(logs, range(count))
    viewer = Viewer(engine, job.id, None)
    for name in logs:
        await viewer.has(name, count)
    return job, logs, list(logs), viewer


async def rotate_followed(cluster: KubeCluster, logs: dict[str, PodLog]) -> None:
    """Rotates each log once kwok's reader of the live follower's stream is ready for it
    (KubeCluster.follows)."""
    for log in logs.values():
        await wait_until(lambda log=log: cluster.follows(log), "kwok following the log", WAIT)
        log.rotate()


def numbered(replica: str, lines: range) -> list[str]:
    return [text(replica, i) for i in lines]


@pytest.fixture
def quiet_claims(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level("WARNING", logger="distrun.engines.kube.logs")
    yield caplog


async def test_after_a_rotation_a_late_reader_numbers_the_new_file_as_the_live_follower_did(
    engines: list[KubeflowEngine],
    kube_cluster: KubeCluster,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first, second, third = engines
    job, logs, names, live = await followed_job(first, kube_cluster, monkeypatch, 300)

    await rotate_followed(kube_cluster, logs)
    write(logs, range(300, 600))
    for name in names:
        await live.has(name, 600)
        assert live.seqs(name) == list(range(600)), "the live follower reads on across it"
        assert live.texts(name) == numbered(name, range(600))
    await eventually(
        lambda: anchors(kube_admin, operator_namespace, job.id),
        lambda book: (
            all(
                any(a[0] >= 300 for a in anchor_list)
                for name in names
                for anchor_list in book.get(name, {}).values()
            )
            and set(book) == set(names)
        ),
        "the live follower's anchors in the new files",
        WAIT,
    )

    # Another server's REST read: the rotated lines are gone, the others keep their seqs.
    read = await second.read_logs(job.id, "alice")
    for name in names:
        mine = [line for line in read if line.replica == name]
        assert [line.seq for line in mine] == list(range(300, 600))
        assert [line.text for line in mine] == numbered(name, range(300, 600))

    # Another server's follower resuming in the middle of the new file, and one from the start.
    resumed = Viewer(third, job.id, dict.fromkeys(names, 450))
    fresh = Viewer(second, job.id, None)
    write(logs, range(600, 650))
    await succeed(kube_admin, operator_namespace, job.id)
    finals = await asyncio.wait_for(asyncio.gather(live.task, resumed.task, fresh.task), WAIT)
    assert all(final is not None and final.state == JobState.SUCCEEDED for final in finals)
    for name in names:
        assert live.seqs(name) == list(range(650))
        assert resumed.seqs(name) == list(range(450, 650))
        assert resumed.texts(name) == numbered(name, range(450, 650))
        assert fresh.seqs(name) == list(range(300, 650))
    # The count at the end is the whole log's, not the new file's: a REST read agrees.
    again = await third.read_logs(job.id, "alice", since={n: 640 for n in names})
    assert sorted((line.replica, line.seq) for line in again) == sorted(
        (name, seq) for name in names for seq in range(640, 650)
    )


async def test_a_rotation_nobody_followed_is_claimed_after_a_wait_with_a_gap_never_a_repeat(
    engines: list[KubeflowEngine],
    kube_cluster: KubeCluster,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    quiet_claims: pytest.LogCaptureFixture,
) -> None:
    first, second, third = engines
    job, logs, names, early = await followed_job(first, kube_cluster, monkeypatch, 100)
    await early.stop()
    await first.close()  # its anchors are written as its feed ends
    book = await anchors(kube_admin, operator_namespace, job.id)
    newest = {
        name: max(a[0] for anchor_list in book[name].values() for a in anchor_list)
        for name in names
    }
    assert all(0 <= index < 100 for index in newest.values())

    write(logs, range(100, 200))  # read by nobody, and gone with the rotation
    for log in logs.values():
        log.rotate()
    write(logs, range(200, 250))

    assert await second.read_logs(job.id, "alice", since=dict.fromkeys(names, 100)) == [], (
        "a read that does not follow leaves a file nobody has numbered out"
    )
    late = Viewer(second, job.id, dict.fromkeys(names, 100))
    for name in names:
        await late.has(name, 50)
        start = newest[name] + 1 + CLAIM_GAP
        assert late.seqs(name) == list(range(start, start + 50)), "numbered after a gap"
        assert start > early.seqs(name)[-1], "above every seq a reader has given"
        assert late.texts(name) == numbered(name, range(200, 250))
    assert "rotated while nobody followed it" in quiet_claims.text

    read = await third.read_logs(job.id, "alice", since=dict.fromkeys(names, 100))
    for name in names:
        start = newest[name] + 1 + CLAIM_GAP
        assert [line.seq for line in read if line.replica == name] == list(
            range(start, start + 50)
        ), "every reader numbers by the claim"
    await succeed(kube_admin, operator_namespace, job.id)
    final = await asyncio.wait_for(late.task, WAIT)
    assert final is not None and final.state == JobState.SUCCEEDED


async def test_a_pod_update_while_following_does_not_cost_the_follower_its_place_in_the_log(
    engines: list[KubeflowEngine],
    kube_cluster: KubeCluster,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
    quiet_claims: pytest.LogCaptureFixture,
) -> None:
    """A pod changes while it runs (a condition, a label); the follower keeps its stream.
    Starting a new one would read the file again, and after a rotation only the new file."""
    job, logs, names, live = await followed_job(engines[0], kube_cluster, monkeypatch, 50)
    await rotate_followed(kube_cluster, logs)
    pods = client.CoreV1Api(kube_admin)
    for name in names:
        patch = {"metadata": {"labels": {"distrun-test/touched": "yes"}}}
        await pods.patch_namespaced_pod(f"{job.id}-{name}", operator_namespace, patch)
    write(logs, range(50, 100))
    for name in names:
        await live.has(name, 100)
        assert live.seqs(name) == list(range(100))
        assert live.texts(name) == numbered(name, range(100))
    assert "rotated while nobody followed it" not in quiet_claims.text
    await live.stop()
