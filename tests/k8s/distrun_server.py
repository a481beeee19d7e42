"""Real jupyter_server processes with the distrun extension and its Kubernetes engines, against
the tier's cluster, for end-to-end tests through the REST API and the log websocket.

The server reaches the cluster as the ServiceAccount `distrun-server`, holding exactly the
ClusterRole `SERVER_RULES` (the README's RBAC) through a RoleBinding in each user namespace
`distrun-<user>`. Users authenticate to the server with their own token (TOKENS).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from kubernetes.client.exceptions import ApiException
from tornado.websocket import WebSocketClientConnection

from tests.server_process import ServerProcess, free_port, merge

from .cluster import KubeCluster

REPO = Path(__file__).resolve().parents[2]
SERVER_NAMESPACE = "distrun-system"
SERVER_ACCOUNT = "distrun-server"
NAMESPACE_TEMPLATE = "distrun-{username}"
USERS = ("alice", "bob")
TOKENS = {user: f"{user}-{secrets.token_hex(8)}" for user in USERS}
BASE_URL = "/hub/user/shared/"  # a base URL as JupyterHub gives one, to prove routes honour it
REQUEST_TIMEOUT = 60.0

_JOB_VERBS = ["get", "list", "watch", "create", "delete"]
# What the server's own Kubernetes identity needs, nothing more. The ConfigMap `update` is the
# log ledger (seqs that survive container restarts and server restarts); `events` and
# `podgroups` give the reasons a job waits.
SERVER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["kubeflow.org"],
        "resources": ["pytorchjobs", "tfjobs", "mpijobs", "xgboostjobs", "paddlejobs", "jaxjobs"],
        "verbs": _JOB_VERBS,
    },
    {
        "apiGroups": ["trainer.kubeflow.org"],
        "resources": ["trainjobs"],
        "verbs": [*_JOB_VERBS, "patch"],  # suspended before a cancel
    },
    {"apiGroups": ["batch.volcano.sh"], "resources": ["jobs"], "verbs": _JOB_VERBS},
    {"apiGroups": ["scheduling.volcano.sh"], "resources": ["podgroups"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "create", "update"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
    {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["list"]},
]


def user_namespace(user: str) -> str:
    return NAMESPACE_TEMPLATE.replace("{username}", user)


def engine_config(kubeconfig: Path) -> dict[str, Any]:
    """DistrunApp.engines for the three Kubernetes engines, per-user namespaces."""
    kwargs = {"kubeconfig": str(kubeconfig), "namespace": NAMESPACE_TEMPLATE}
    return {
        "kubeflow": {"class": "distrun.engines.kube.kubeflow.KubeflowEngine", "kwargs": kwargs},
        "volcano": {"class": "distrun.engines.kube.volcano.VolcanoEngine", "kwargs": kwargs},
        "trainer": {"class": "distrun.engines.kube.trainer.TrainerEngine", "kwargs": kwargs},
    }


def prepare_server_identity(cluster: KubeCluster) -> Path:
    """Namespaces for the users and the server's ServiceAccount, its ClusterRole bound in each
    user namespace, and a kubeconfig carrying a token for it. Idempotent per cluster."""
    core = kubernetes.client.CoreV1Api(cluster.admin)
    rbac = kubernetes.client.RbacAuthorizationV1Api(cluster.admin)
    for namespace in (SERVER_NAMESPACE, *map(user_namespace, USERS)):
        with contextlib.suppress(ApiException):
            core.read_namespace(namespace)
            continue
        cluster.create_namespace(namespace)
    _create_or_keep(
        lambda: core.create_namespaced_service_account(
            SERVER_NAMESPACE, {"metadata": {"name": SERVER_ACCOUNT}}
        )
    )
    _create_or_keep(
        lambda: rbac.create_cluster_role(
            {"metadata": {"name": SERVER_ACCOUNT}, "rules": SERVER_RULES}
        )
    )
    for user in USERS:
        _create_or_keep(
            lambda user=user: rbac.create_namespaced_role_binding(
                user_namespace(user),
                {
                    "metadata": {"name": SERVER_ACCOUNT},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": SERVER_ACCOUNT,
                    },
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "name": SERVER_ACCOUNT,
                            "namespace": SERVER_NAMESPACE,
                        }
                    ],
                },
            )
        )
    return cluster.service_account_kubeconfig(SERVER_NAMESPACE, SERVER_ACCOUNT)


def unreachable_kubeconfig(cluster: KubeCluster, workdir: Path) -> Path:
    """A kubeconfig whose API server address answers nothing (a closed loopback port)."""
    config = yaml.safe_load(cluster.kubeconfig("admin").read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    path = workdir / "unreachable.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def _create_or_keep(create: Any) -> None:
    try:
        create()
    except ApiException as error:
        if error.status != 409:
            raise


class DistrunServer:
    """A real server (tests/server_process.py) with the Kubernetes engines beside the local
    one, under `BASE_URL`, where each user authenticates with their own token."""

    def __init__(
        self,
        engines: dict[str, Any],
        default_engine: str = "local",
        extra_config: dict[str, Any] | None = None,
    ) -> None:
        workdir = Path(tempfile.mkdtemp(prefix="distrun-srv-"))
        config: dict[str, Any] = {
            "ServerApp": {
                "identity_provider_class": (
                    "tests.k8s.server_identity.TokenPerUserIdentityProvider"
                ),
            },
            "TokenPerUserIdentityProvider": {
                "users_by_token": {token: user for user, token in TOKENS.items()}
            },
            "DistrunApp": {
                "owner_source": "username",
                "default_engine": default_engine,
                "engines": {"local": {"class": "distrun.engines.local.LocalEngine"}, **engines},
            },
        }
        config = merge(config, extra_config or {})
        self.process = ServerProcess(workdir, config=config, token=None, base_url=BASE_URL)

    @property
    def url(self) -> str:
        return self.process.url

    def start(self) -> DistrunServer:
        self.process.start()
        return self

    def stop(self) -> None:
        self.process.stop()

    def kill(self) -> None:
        self.process.kill()

    def log_tail(self) -> str:
        return self.process.log_tail(80)

    async def call(
        self, user: str, *path: str, method: str = "GET", body: Any = None, **query: Any
    ) -> tuple[int, Any]:
        """(status, JSON body or text) of a request as `user`; errors are returned, not raised."""
        return await self.process.request(
            method, "/".join(path), body, headers=_auth(user), query=query
        )

    async def websocket(
        self, user: str, *path: str, subprotocols: tuple[str, ...] | None = None, **query: Any
    ) -> WebSocketClientConnection:
        chosen = {} if subprotocols is None else {"subprotocols": subprotocols}
        return await self.process.websocket(
            "/".join(path), headers=_auth(user), query=query, **chosen
        )


def _auth(user: str) -> dict[str, str]:
    return {"Authorization": f"token {TOKENS[user]}"}


@contextlib.contextmanager
def running(*servers: DistrunServer) -> Iterator[tuple[DistrunServer, ...]]:
    try:
        for server in servers:
            server.start()
        yield servers
    finally:
        for server in servers:
            server.stop()


async def submit_cell(server: DistrunServer, cell: str) -> dict[str, Any]:
    """The job `cell` became, submitted by alice through the REST API."""
    status, job = await server.call("alice", "distrun", "jobs", method="POST", body={"cell": cell})
    assert status == 201, job
    return dict(job)


async def receive(ws: WebSocketClientConnection) -> dict[str, Any] | None:
    """The next JSON message of the log websocket; None once the server closed it."""
    message = await asyncio.wait_for(ws.read_message(), REQUEST_TIMEOUT)
    return None if message is None else dict(json.loads(message))


def delete_user_jobs(cluster: KubeCluster) -> None:
    """Remove every job distrun made in the user namespaces (their pods and ConfigMaps go with
    them), so the tests' jobs never count against a user's limit of unfinished jobs."""
    custom = kubernetes.client.CustomObjectsApi(cluster.admin)
    kinds = [(rule["apiGroups"][0], rule["resources"]) for rule in SERVER_RULES[:3]]
    for user in USERS:
        for group, plurals in kinds:
            version = "v1alpha1" if group != "kubeflow.org" else "v1"
            for plural in plurals:
                custom.delete_collection_namespaced_custom_object(
                    group,
                    version,
                    user_namespace(user),
                    plural,
                    label_selector="app.kubernetes.io/managed-by=distrun",
                )
