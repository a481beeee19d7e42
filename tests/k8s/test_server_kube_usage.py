"""A Kubeflow job's usage through real jupyter_server processes, read as the distrun-server
ServiceAccount from the real metrics-server (fixture `kube_metrics`: kwok's simulated usage,
see test_kube_usage.py): `GET /distrun/jobs/{id}/usage` and the `distrun.logs.v3` websocket's
`usage` messages give each replica's CPU and memory; another user gets 404."""

from __future__ import annotations

from typing import Any

import pytest

from distrun.core.stream_versions import V3_USAGE

from .distrun_server import DistrunServer, receive, submit_cell, user_namespace
from .metrics_server import GIB, MIB, USAGE_WAIT, use
from .real_operator import running_pods
from .waiting import eventually

pytestmark = pytest.mark.kubernetes

ALICE_NS = user_namespace("alice")
CELL = "%engine=kubeflow\n%framework=pytorch\n%worker=1\nprint('hello')\n"


def both_replicas(usage: tuple[int, Any]) -> bool:
    status, body = usage
    samples = body.get("samples") if status == 200 else None
    return bool(samples) and set(samples[-1]["replicas"]) == {"master-0", "worker-0"}


async def test_usage_over_rest_and_the_v3_stream_is_what_metrics_server_serves(
    kube_metrics: None,
    alice_operator: str,
    servers: tuple[DistrunServer, DistrunServer],
    kube_admin: Any,
) -> None:
    server, other = servers
    job = await submit_cell(server, CELL)
    pods = await running_pods(kube_admin, ALICE_NS, job["id"])
    await use(kube_admin, ALICE_NS, pods["master-0"], "2", "1Gi")
    await use(kube_admin, ALICE_NS, pods["worker-0"], "500m", "256Mi")

    status, usage = await eventually(
        lambda: server.call("alice", "distrun", "jobs", job["id"], "usage"),
        both_replicas,
        "GET usage to give both replicas",
        USAGE_WAIT,
    )
    assert usage["available"] is True and usage["reason"] is None
    replicas = usage["samples"][-1]["replicas"]
    assert replicas["master-0"]["rss_bytes"] == GIB
    assert replicas["worker-0"]["rss_bytes"] == 256 * MIB
    assert replicas["master-0"]["cpu_percent"] == pytest.approx(200.0, rel=0.05)
    assert replicas["worker-0"]["cpu_percent"] == pytest.approx(50.0, rel=0.05)
    status, _ = await other.call("bob", "distrun", "jobs", job["id"], "usage")
    assert status == 404

    # The second server process has no series of its own yet: the stream's first usage
    # message is its first reading of metrics-server, the same figures.
    path = ("distrun", "jobs", job["id"], "logs", "stream")
    ws = await other.websocket("alice", *path, subprotocols=(V3_USAGE,))
    assert ws.selected_subprotocol == V3_USAGE
    message = await receive(ws)
    while message is not None and message["type"] != "usage":
        message = await receive(ws)
    assert message is not None, "the stream ended without a usage message"
    streamed = message["samples"][-1]["replicas"]
    assert {name: r["rss_bytes"] for name, r in streamed.items()} == {
        "master-0": GIB,
        "worker-0": 256 * MIB,
    }
    ws.close()
    status, _ = await server.call(
        "alice", "distrun", "jobs", job["id"], "cancel", method="POST", body={}
    )
    assert status == 200
