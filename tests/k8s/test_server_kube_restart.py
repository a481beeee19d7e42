"""A replica's container restarting in its pod (restartCount), done as a kubelet does it: the
old log is served as `previous`, a new one starts, the pod's status shows the restart. Seqs
continue across restarts with nothing duplicated, live and for a client resuming with `since`
through another server process, which knows the earlier runs' line counts only from the
ledger in the API server (after two restarts the first run's log is gone from the node). The
real Training Operator makes the pod and ends the job; the restarts, and the container's end
after them, are the kubelet's, done by hand (kwok simulates no restarts)."""

from __future__ import annotations

from typing import Any

import pytest
from tornado.websocket import WebSocketClientConnection

from distrun.client.log_resume import rows_of_runs

from .cluster import KubeCluster
from .distrun_server import (
    DistrunServer,
    receive,
    user_namespace,
)
from .operator_sim import end_restarted_container, restart_container
from .real_operator import pods_held, register_logs

pytestmark = pytest.mark.kubernetes

ALICE_NS = user_namespace("alice")
MASTER_ONLY = "%engine=kubeflow\n%framework=pytorch\n%worker=0\nprint('hi')\n"


async def lines_until(
    ws: WebSocketClientConnection, last_text: str, seen: list[tuple[int, str]]
) -> list[tuple[int, str]]:
    """Adds master-0's (seq, text) pairs to `seen` until `last_text` arrives."""
    while last_text not in [text for _, text in seen]:
        message = await receive(ws)
        assert message is not None, f"the websocket closed early; lines: {seen}"
        if message["type"] == "runs":
            seen += [(seq, text) for replica, seq, _, text in rows_of_runs(message["runs"])]
    return seen


async def test_seqs_continue_across_container_restarts_live_and_resumed_elsewhere(
    servers: tuple[DistrunServer, DistrunServer],
    alice_operator: str,
    kube_cluster: KubeCluster,
    kube_admin: Any,
) -> None:
    first, second = servers
    with pods_held(kube_cluster):  # the operator's pod waits until its log is registered
        status, job = await first.call(
            "alice", "distrun", "jobs", method="POST", body={"cell": MASTER_ONLY}
        )
        assert status == 201, job
        job_id, pod = job["id"], f"{job['id']}-master-0"
        logs = register_logs(kube_cluster, ALICE_NS, job_id, {"master-0": ("a0", "a1")})
        path = ("distrun", "jobs", job_id, "logs", "stream")
        live = await first.websocket("alice", *path)
    log = logs["master-0"]
    seen: list[tuple[int, str]] = []
    await lines_until(live, "a1", seen)  # the pod runs
    log.write("a2")  # the first run's last words, just before it dies

    log = await restart_container(kube_cluster, kube_admin, ALICE_NS, pod, "pytorch", "b0")
    await lines_until(live, "b0", seen)
    log.write("b1")
    await lines_until(live, "b1", seen)

    await restart_container(kube_cluster, kube_admin, ALICE_NS, pod, "pytorch", "c0")
    await lines_until(live, "c0", seen)
    expected = [(0, "a0"), (1, "a1"), (2, "a2"), (3, "b0"), (4, "b1"), (5, "c0")]
    assert seen == expected  # in order, nothing twice

    # Another server process resumes a client from the second run: the node keeps only the
    # previous run's log, and that run's first seq (3) is known from the ledger alone.
    resumed = await second.websocket("alice", *path, since="master-0:4")
    again: list[tuple[int, str]] = []
    await lines_until(resumed, "c0", again)
    assert again == [(4, "b1"), (5, "c0")]
    status, fetched = await second.call("alice", "distrun", "jobs", job_id)
    assert fetched["replicas"][0]["restarts"] == 2

    status, page = await second.call("alice", "distrun", "jobs", job_id, "logs", format="json")
    assert [(seq, text) for _, seq, _, text in page["lines"]] == [
        (3, "b0"),
        (4, "b1"),
        (5, "c0"),
    ]  # the first run's log is gone from the node; what remains keeps its seqs
    assert page["next"] == {"master-0": 6}

    await end_restarted_container(kube_admin, ALICE_NS, pod)  # the operator ends the job
    for ws in (live, resumed):
        rest = []
        while (message := await receive(ws)) is not None:
            rest.append(message)
        assert rest[-1] == {"type": "end"}
        assert not [m for m in rest if m["type"] == "runs"]  # nothing repeated at the end
