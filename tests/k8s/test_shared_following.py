"""Many viewers of a job, one upstream: what the real API server serves while several followers
of one job read it through one KubeflowEngine (the REST follow, the websocket, the CLI and the
kernel magic all follow through it), counted by the API server itself (its /metrics). The real
Training Operator makes the pods; kwok serves their logs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import pytest

from distrun.core.errors import NotFound
from distrun.core.job import Job, JobState
from distrun.core.logs import LogBatch, LogEvent
from distrun.core.spec import JobSpec
from distrun.engines.kube.kubeflow import KubeflowEngine

from ..reliability.helpers import SequenceChecker, read_all, wait_until
from ..reliability.numbered_lines import line_bytes
from .apiserver_metrics import ApiServerLoad, apiserver_load
from .cluster import KubeCluster, PodLog
from .real_operator import WAIT, submit_with_logs, succeed
from .waiting import eventually

pytestmark = pytest.mark.kubernetes

VIEWERS = 4
FIRST, TOTAL = 60, 120  # lines per replica written before the viewers come, and in all


def write(logs: dict[str, PodLog], lines: range) -> None:
    for name, log in logs.items():
        log.write(*(line_bytes(name, i) for i in lines))


async def settled_load(admin: Any, check: Any, what: str) -> ApiServerLoad:
    """The API server's load once `check(load)` holds (its gauges follow within moments)."""
    return await eventually(lambda: apiserver_load(admin), check, what, WAIT)


async def submit_written(
    engine: KubeflowEngine,
    cluster: KubeCluster,
    monkeypatch: pytest.MonkeyPatch,
    workers: int,
    lines: range,
) -> tuple[Job, dict[str, PodLog], list[str]]:
    """alice's PyTorchJob of a master and `workers`, each replica's log holding `lines`."""
    spec = JobSpec.from_dict(
        {"framework": "pytorch", "code": "pass\n", "roles": {"worker": {"replicas": workers}}}
    )
    submitted, logs = await submit_with_logs(cluster, engine, spec, monkeypatch)
    write(logs, lines)
    return submitted, logs, [replica.name for replica in submitted.replicas]


async def test_viewers_of_a_job_share_one_log_stream_per_replica_and_one_watch_each_of_job_and_pods(
    kubeflow: KubeflowEngine,
    kube_cluster: KubeCluster,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    submitted, logs, names = await submit_written(
        kubeflow, kube_cluster, monkeypatch, 3, range(FIRST)
    )
    assert len(names) == 4
    before = await apiserver_load(kube_admin)

    checkers = [SequenceChecker(names) for _ in range(VIEWERS)]
    late = SequenceChecker(names)  # joins later, from the middle of every replica's log
    late.next_seq = dict.fromkeys(names, FIRST // 2)

    async def view(checker: SequenceChecker, since: dict[str, int] | None) -> Job | None:
        async with aclosing(kubeflow.follow(submitted.id, "alice", since=since)) as events:
            return await read_all(events, checker)

    viewers = [asyncio.create_task(view(checker, None)) for checker in checkers]
    await wait_until(
        lambda: all(checker.received == 4 * FIRST for checker in checkers),
        "every viewer's first lines",
        WAIT,
    )
    during = await settled_load(
        kube_admin,
        lambda load: load.log_streams() - before.log_streams() >= len(names),
        "the replicas' log streams",
    )
    assert during.log_streams() - before.log_streams() == len(names), (
        f"{VIEWERS} viewers of {len(names)} replicas: one stream per replica, not per viewer"
    )
    assert during.watches("pods") - before.watches("pods") == 1
    assert during.watches("pytorchjobs") - before.watches("pytorchjobs") == 1
    # The replicas' streams share one HTTP/2 connection (h2_logs.py), not a connection each.
    assert (await kubeflow.api()).log_connections() == (len(names),)

    viewers.append(asyncio.create_task(view(late, late.cursor())))
    write(logs, range(FIRST, TOTAL))
    await wait_until(
        lambda: all(c.received >= 4 * FIRST for c in [*checkers, late]), "the late viewer", WAIT
    )
    with_late = await apiserver_load(kube_admin)
    assert with_late.log_streams() - before.log_streams() == len(names), "the late one shares too"

    await succeed(kube_admin, operator_namespace, submitted.id)
    finals = await asyncio.wait_for(asyncio.gather(*viewers), WAIT)
    assert all(final is not None and final.state == JobState.SUCCEEDED for final in finals)
    for checker in checkers:
        assert checker.next_seq == dict.fromkeys(names, TOTAL), "every line, exactly once"
    assert late.next_seq == dict.fromkeys(names, TOTAL)
    assert late.received == 4 * (TOTAL - FIRST // 2)
    await settled_load(
        kube_admin,
        lambda load: load.log_streams() <= before.log_streams(),
        "the streams ended with their viewers",
    )


async def test_the_last_viewer_leaving_ends_the_streams_and_watches_of_a_running_job(
    kubeflow: KubeflowEngine,
    kube_cluster: KubeCluster,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    submitted, _logs, names = await submit_written(
        kubeflow, kube_cluster, monkeypatch, 1, range(10)
    )
    before = await apiserver_load(kube_admin)
    followers = [kubeflow.follow(submitted.id, "alice") for _ in range(3)]
    checkers = [SequenceChecker(names) for _ in followers]

    async def read_some(events: AsyncIterator[LogEvent], checker: SequenceChecker) -> None:
        async for event in events:
            if isinstance(event, LogBatch):
                checker.check(event.lines)
            if checker.received == 20:
                return

    await asyncio.wait_for(
        asyncio.gather(*(read_some(f, c) for f, c in zip(followers, checkers, strict=True))),
        WAIT,
    )
    await settled_load(
        kube_admin,
        lambda load: load.log_streams() - before.log_streams() == len(names),
        "one stream per replica",
    )
    for follower in followers[:-1]:
        await follower.aclose()
    still = await apiserver_load(kube_admin)
    assert still.log_streams() - before.log_streams() == len(names), "one viewer is left"
    await followers[-1].aclose()
    after = await settled_load(
        kube_admin,
        lambda load: (
            load.log_streams() <= before.log_streams()
            and load.watches("pods") <= before.watches("pods")
        ),
        "the streams and watches ended with the last viewer",
    )
    assert after.watches("pytorchjobs") <= before.watches("pytorchjobs")
    await succeed(kube_admin, operator_namespace, submitted.id)


async def test_reading_a_followed_job_asks_the_api_server_nothing_and_stays_the_owners(
    kubeflow: KubeflowEngine,
    kube_cluster: KubeCluster,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A viewer's connect reads the job (find_job); while this process follows the job, or
    its namespace's informers hold it, that is no GET of the job and no LIST of its pods."""
    followed, _logs, names = await submit_written(kubeflow, kube_cluster, monkeypatch, 1, range(10))
    other, _other_logs, _ = await submit_written(kubeflow, kube_cluster, monkeypatch, 1, range(1))
    checker = SequenceChecker(names)
    async with aclosing(kubeflow.follow(followed.id, "alice")) as events:
        async for event in events:
            if isinstance(event, LogBatch):
                checker.check(event.lines)
            if checker.received == 20:
                break
        before = await apiserver_load(kube_admin)
        reads = [await kubeflow.get_job(job_id, "alice") for job_id in [followed.id, other.id] * 5]
        after = await apiserver_load(kube_admin)
        for job_id in (followed.id, other.id):
            with pytest.raises(NotFound):
                await kubeflow.get_job(job_id, "bob")
    served = after.requests - before.requests
    assert served[("GET", "pytorchjobs", "")] == 0, after.busiest_since(before)
    assert served[("LIST", "pods", "")] == 0, after.busiest_since(before)
    assert [job.id for job in reads] == [followed.id, other.id] * 5
    assert {job.state for job in reads} == {JobState.RUNNING}
    assert [replica.name for replica in reads[0].replicas] == names
    await succeed(kube_admin, operator_namespace, followed.id)
    await succeed(kube_admin, operator_namespace, other.id)
