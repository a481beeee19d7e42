"""The Kubernetes engines end to end through real jupyter_server processes: a cell submitted over
REST becomes a PyTorchJob and its ConfigMap in the user's namespace, every replica's log comes
through one websocket with status events and resume, another user sees none of it, and any
server process (a second one, a restarted one) serves the job from the API server alone. The
real Training Operator makes the pods and ends the job (fixture `alice_operator`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from tornado.websocket import WebSocketClientConnection

from distrun.client.log_resume import rows_of_runs
from distrun.core.stream_versions import V3_USAGE

from .cluster import KubeCluster
from .distrun_server import (
    DistrunServer,
    delete_user_jobs,
    engine_config,
    prepare_server_identity,
    receive,
    running,
    submit_cell,
    unreachable_kubeconfig,
    user_namespace,
)
from .real_operator import PYTORCHJOBS, WAIT, get_custom, pods_held, register_logs, succeed

pytestmark = pytest.mark.kubernetes

ALICE_NS = user_namespace("alice")
CELL = "%engine=kubeflow\n%framework=pytorch\n%worker=1\nprint('hello from every replica')\n"


@pytest.fixture(scope="module")
def server_kubeconfig(kube_cluster: KubeCluster) -> Path:
    return prepare_server_identity(kube_cluster)


@pytest.fixture(scope="module")
def servers(
    kube_cluster: KubeCluster, server_kubeconfig: Path, tmp_path_factory: Any, alice_operator: str
) -> Iterator[tuple[DistrunServer, DistrunServer]]:
    """Two independent server processes on the same cluster; the second also has an engine
    whose API server is unreachable."""
    offline = unreachable_kubeconfig(kube_cluster, tmp_path_factory.mktemp("offline"))
    engines = engine_config(server_kubeconfig)
    second_engines = {
        **engines,
        "offline": {
            "class": "distrun.engines.kube.kubeflow.KubeflowEngine",
            "kwargs": {"kubeconfig": str(offline), "namespace": "distrun-{username}"},
        },
    }
    with running(DistrunServer(engines), DistrunServer(second_engines)) as (first, second):
        yield first, second
    delete_user_jobs(kube_cluster)


async def read_until(
    ws: WebSocketClientConnection, done: Any, seen: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Messages until `done(messages)` holds; fails if the server closes first."""
    messages = [] if seen is None else seen
    while not done(messages):
        message = await receive(ws)
        assert message is not None, f"the websocket closed early after {messages}"
        messages.append(message)
    return messages


def lines_in(messages: list[dict[str, Any]]) -> list[tuple[str, int, str]]:
    return [
        (r, seq, text)
        for m in messages
        if m["type"] == "runs"
        for r, seq, _, text in rows_of_runs(m["runs"])
    ]


def statuses(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["job"] for m in messages if m["type"] == "status"]


def has_texts(*texts: str) -> Any:
    return lambda messages: set(texts) <= {text for _, _, text in lines_in(messages)}


async def read_to_end(ws: WebSocketClientConnection) -> list[dict[str, Any]]:
    messages = []
    while (message := await receive(ws)) is not None:
        messages.append(message)
    return messages


async def alice_reads(server: DistrunServer, job_id: str, text: str) -> None:
    """Returns once alice's logs of the job (REST) hold a line `text`."""
    deadline = time.monotonic() + WAIT
    while True:
        status, page = await server.call("alice", "distrun", "jobs", job_id, "logs", format="json")
        if status == 200 and text in [line[3] for line in page["lines"]]:
            return
        assert time.monotonic() < deadline, f"alice never read {text!r}: {status} {page}"
        await asyncio.sleep(0.2)


# --- engines --------------------------------------------------------------------------------


async def test_engines_lists_the_kubernetes_engines_and_an_unreachable_one_as_unavailable(
    servers: tuple[DistrunServer, DistrunServer],
) -> None:
    _, second = servers
    status, body = await second.call("alice", "distrun", "engines")
    assert status == 200
    engines = {engine["name"]: engine for engine in body["engines"]}
    assert list(engines) == ["local", "kubeflow", "volcano", "trainer", "offline"]
    for name in ("kubeflow", "volcano", "trainer"):
        assert engines[name]["available"] is True, engines[name]
        assert engines[name]["namespaces"] == ["distrun-{username}"]
    assert engines["kubeflow"]["options"]["kinds"][0] == "PyTorchJob"
    offline = engines["offline"]
    assert offline["available"] is False
    assert "unreachable" in offline["reason"]
    # The broken engine does not break listing: the others answer, the failure is named.
    status, listed = await second.call("alice", "distrun", "jobs")
    assert status == 200
    assert "unreachable" in listed["engine_errors"]["offline"]


# --- a cell, its objects, and its logs through one websocket -----------------------------


async def test_a_kubeflow_cell_streams_every_replica_through_one_websocket_with_resume(
    servers: tuple[DistrunServer, DistrunServer], kube_cluster: KubeCluster, kube_admin: Any
) -> None:
    server, _ = servers
    with pods_held(kube_cluster):  # the operator's pods wait, Unschedulable, until the block ends
        job = await submit_cell(server, CELL)
        job_id = job["id"]
        logs = register_logs(
            kube_cluster, ALICE_NS, job_id, {"master-0": ("m0", "m1"), "worker-0": ("w0",)}
        )
        assert job["engine"] == "kubeflow" and job["owner"] == "alice"
        assert [r["name"] for r in job["replicas"]] == ["master-0", "worker-0"]

        # The operator's object and the code's ConfigMap, owned by it, in alice's namespace.
        obj = await get_custom(kube_admin, ALICE_NS, PYTORCHJOBS, job_id)
        assert obj["metadata"]["annotations"]["distrun.io/owner"] == "alice"
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "distrun"
        assert set(obj["spec"]["pytorchReplicaSpecs"]) == {"Master", "Worker"}
        configmap = await client.CoreV1Api(kube_admin).read_namespaced_config_map(job_id, ALICE_NS)
        (reference,) = configmap.metadata.owner_references
        assert (reference.kind, reference.uid) == ("PyTorchJob", obj["metadata"]["uid"])
        assert any("hello from every replica" in value for value in configmap.data.values())

        path = ("distrun", "jobs", job_id, "logs", "stream")
        ws = await server.websocket("alice", *path)
        first = await receive(ws)
        assert first is not None and first["type"] == "status"
        assert first["job"]["state"] == "pending" and first["job"]["reason"]

    seen = await read_until(ws, has_texts("m0", "m1", "w0"))
    await read_until(ws, lambda _: statuses(seen)[-1]["state"] == "running", seen)
    assert sorted(lines_in(seen)) == [
        ("master-0", 0, "m0"),
        ("master-0", 1, "m1"),
        ("worker-0", 0, "w0"),
    ]
    ws.close()

    # Lines written while nobody listens; the client resumes after what it had.
    logs["master-0"].write("m2")
    logs["worker-0"].write("w1", "w2")
    resumed = await server.websocket("alice", *path, since="master-0:2,worker-0:1")
    again = await read_until(resumed, has_texts("m2", "w1", "w2"))
    assert again[0]["type"] == "status" and again[0]["job"]["state"] == "running"
    assert sorted(lines_in(again)) == [
        ("master-0", 2, "m2"),
        ("worker-0", 1, "w1"),
        ("worker-0", 2, "w2"),
    ]

    await succeed(kube_admin, ALICE_NS, job_id)
    rest = await read_to_end(resumed)
    assert rest[-1] == {"type": "end"}
    assert statuses(again + rest)[-1]["state"] == "succeeded"
    assert lines_in(rest) == []  # nothing repeated
    assert resumed.close_code == 1000

    status, page = await server.call("alice", "distrun", "jobs", job_id, "logs", format="json")
    assert status == 200
    assert sorted((r, seq, text) for r, seq, _, text in page["lines"]) == [
        ("master-0", 0, "m0"),
        ("master-0", 1, "m1"),
        ("master-0", 2, "m2"),
        ("worker-0", 0, "w0"),
        ("worker-0", 1, "w1"),
        ("worker-0", 2, "w2"),
    ]
    assert page["next"] == {"master-0": 3, "worker-0": 3}


# --- tenancy -------------------------------------------------------------------------------


async def test_bob_gets_404_for_everything_of_alices(
    servers: tuple[DistrunServer, DistrunServer], kube_cluster: KubeCluster
) -> None:
    server, _ = servers
    with pods_held(kube_cluster):
        job = await submit_cell(server, CELL)
        job_id = job["id"]
        register_logs(kube_cluster, ALICE_NS, job_id, {"master-0": ("secret",)})
    await alice_reads(server, job_id, "secret")
    for method, path in (
        ("GET", ("distrun", "jobs", job_id)),
        ("GET", ("distrun", "jobs", job_id, "logs")),
        ("GET", ("distrun", "jobs", job_id, "usage")),
        ("POST", ("distrun", "jobs", job_id, "cancel")),
        ("DELETE", ("distrun", "jobs", job_id)),
    ):
        status, body = await server.call(
            "bob", *path, method=method, body={} if method == "POST" else None
        )
        assert status == 404, (method, path, body)
        assert "secret" not in str(body)
    status, listed = await server.call("bob", "distrun", "jobs")
    assert status == 200 and job_id not in [j["id"] for j in listed["jobs"]]

    ws = await server.websocket("bob", "distrun", "jobs", job_id, "logs", "stream")
    messages = await read_to_end(ws)
    assert [m["type"] for m in messages] == ["error"]
    assert ws.close_code == 4404

    # Alice's job is untouched by bob's attempts.
    status, mine = await server.call("alice", "distrun", "jobs", job_id)
    assert status == 200 and mine["state"] != "cancelled"
    status, listed = await server.call("alice", "distrun", "jobs", engine="kubeflow")
    assert job_id in [j["id"] for j in listed["jobs"]]


# --- usage ------------------------------------------------------------------------------


async def test_without_metrics_server_the_usage_says_it_is_not_installed(
    servers: tuple[DistrunServer, DistrunServer], kube_cluster: KubeCluster
) -> None:
    """The tier's API server serves no metrics.k8s.io: no metrics-server is registered."""
    server, _ = servers
    with pods_held(kube_cluster):
        job = await submit_cell(server, CELL)
    status, usage = await server.call("alice", "distrun", "jobs", job["id"], "usage")
    assert status == 200, usage
    assert usage["available"] is False and usage["samples"] == []
    assert usage["reason"] == "metrics-server is not installed in this cluster: no usage"
    # The log stream's usage version sends no usage and still ends with the job.
    path = ("distrun", "jobs", job["id"], "logs", "stream")
    ws = await server.websocket("alice", *path, subprotocols=(V3_USAGE,))
    assert ws.selected_subprotocol == V3_USAGE
    status, _ = await server.call(
        "alice", "distrun", "jobs", job["id"], "cancel", method="POST", body={}
    )
    assert status == 200
    messages = await read_to_end(ws)
    assert messages[-1] == {"type": "end"} and ws.close_code == 1000
    assert not [m for m in messages if m["type"] == "usage"]


# --- no state in the server process ------------------------------------------------------


async def test_another_server_and_a_restarted_one_serve_the_job_from_the_api_server_alone(
    servers: tuple[DistrunServer, DistrunServer], kube_cluster: KubeCluster
) -> None:
    first, second = servers
    with pods_held(kube_cluster):
        job = await submit_cell(first, CELL)
        job_id = job["id"]
        logs = register_logs(
            kube_cluster, ALICE_NS, job_id, {"master-0": ("m0", "m1"), "worker-0": ("w0",)}
        )
    ws = await first.websocket("alice", "distrun", "jobs", job_id, "logs", "stream")
    seen = await read_until(ws, has_texts("m0", "m1", "w0"))
    ws.close()

    # The second server never saw this job: it answers for it all the same.
    status, fetched = await second.call("alice", "distrun", "jobs", job_id)
    assert status == 200 and fetched["id"] == job_id and fetched["state"] == "running"
    status, listed = await second.call("alice", "distrun", "jobs", engine="kubeflow")
    assert job_id in [j["id"] for j in listed["jobs"]]
    status, page = await second.call("alice", "distrun", "jobs", job_id, "logs", format="json")
    assert sorted((r, seq, text) for r, seq, _, text in page["lines"]) == sorted(lines_in(seen))
    logs["master-0"].write("m2")
    ws = await second.websocket(
        "alice", "distrun", "jobs", job_id, "logs", "stream", since="master-0:2,worker-0:1"
    )
    assert lines_in(await read_until(ws, has_texts("m2"))) == [("master-0", 2, "m2")]
    ws.close()

    # A restarted server too; and a cancel through one server is what the other reports.
    first.stop()
    first.start()
    status, page = await first.call(
        "alice", "distrun", "jobs", job_id, "logs", format="json", since="master-0:1"
    )
    assert status == 200
    assert sorted((r, s, t) for r, s, _, t in page["lines"]) == [
        ("master-0", 1, "m1"),
        ("master-0", 2, "m2"),
        ("worker-0", 0, "w0"),
    ]
    status, cancelled = await second.call(
        "alice", "distrun", "jobs", job_id, "cancel", method="POST", body={}
    )
    assert status == 200 and cancelled["state"] == "cancelled"
    deadline = time.monotonic() + WAIT
    while (reply := await first.call("alice", "distrun", "jobs", job_id))[0] != 404:
        assert reply[1]["state"] == "cancelled"
        assert time.monotonic() < deadline, "the cancelled job was never deleted"
        await asyncio.sleep(0.2)  # the foreground deletion completed: the job and its pods are gone
