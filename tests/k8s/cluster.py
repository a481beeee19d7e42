"""A real, loopback-only Kubernetes control plane for tests, with simulated nodes.

`KubeCluster` runs etcd, kube-apiserver (token authentication, RBAC), kube-controller-manager
(garbage collection, namespaces, service accounts), kube-scheduler and kwok, which plays the
kubelet of two fake nodes (`kwok-node-0`, and `kwok-gpu-node-1` with `nvidia.com/gpu: 8`).
It installs the operators' real CRDs before the controllers start, and gives each ordinary user
(`alice`, `bob`, in no privileged group) a namespace of the same name where a Role lets them
manage pods, their logs and the training job kinds; nowhere else.

What a simulated pod does is told by its annotations (see kwok-stages.yaml):

    kwok.distrun.test/exit-code: "0"    end Succeeded ("1": Failed); absent: run until deleted
    kwok.distrun.test/run-for: "2s"     how long it runs before it ends (default: at once)
    kwok.distrun.test/start-after: "1s" how long it stays Pending once scheduled
    kwok.distrun.test/message: "..."    the container's termination message
    kwok.distrun.test/reason: "..."     its reason (default Completed / Error): OOMKilled with 137
    kwok.distrun.test/usage-cpu: "1"    what its containers use, as metrics-server sees it
    kwok.distrun.test/usage-memory: "1Gi"   (both needed; kwok-metrics.yaml, metrics_server.py)

and what it "prints" by `KubeCluster.pod_log`, a file that kwok serves as the container's log
through the API (`read_namespaced_pod_log`, with `follow=True` too). Create it before the pod.
Unlike a kubelet, kwok never ends a `follow=True` stream, not even after the pod finished: a
reader must stop on the pod's terminal phase itself.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import secrets
import shutil
import ssl
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import kubernetes_asyncio
import yaml
from kubernetes.client.exceptions import ApiException
from typing_extensions import Self

from tests.server_process import free_port

from .binaries import Binaries
from .pki import FRONT_PROXY_CLIENT, Pki, write_pki
from .processes import Component, http_ok, unverified_loopback_context

HERE = Path(__file__).parent
KWOK_STAGES = HERE / "kwok-stages.yaml"
KWOK_METRICS = HERE / "kwok-metrics.yaml"  # simulated usage, served as a kubelet's

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"  # the `kubernetes` service, first address of SERVICE_CIDR
CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "resourcequota-controller",  # quotas are enforced only once it has counted their usage
)
ORDINARY_USERS = ("alice", "bob")
STARTUP_TIMEOUT = 120.0  # seconds, per component; generous for a loaded 2-core machine
KWOK_LOGS = ("kwok.x-k8s.io", "v1alpha1", "logs")

TRAINING_JOB_RESOURCES = {
    "kubeflow.org": [
        "pytorchjobs",
        "tfjobs",
        "mpijobs",
        "xgboostjobs",
        "paddlejobs",
        "jaxjobs",
    ],
    "trainer.kubeflow.org": ["trainjobs", "trainingruntimes"],
    "batch.volcano.sh": ["jobs"],
    "scheduling.volcano.sh": ["podgroups"],
}
ALL_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"]


@dataclass(frozen=True)
class FakeNode:
    name: str
    gpus: int = 0

    def manifest(self) -> dict[str, Any]:
        capacity = {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "1Ti"}
        if self.gpus:
            capacity["nvidia.com/gpu"] = str(self.gpus)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                },
                "annotations": {
                    "kwok.x-k8s.io/node": "fake",
                    # Where metrics-server scrapes this node's kubelet metrics: kwok's Metric
                    # (kwok-metrics.yaml), on kwok's port, instead of /metrics/resource.
                    "metrics.k8s.io/resource-metrics-path": (
                        f"/metrics/nodes/{self.name}/metrics/resource"
                    ),
                },
            },
            "status": {"capacity": capacity, "allocatable": capacity},
        }


NODES = (FakeNode("kwok-node-0"), FakeNode("kwok-gpu-node-1", gpus=8))


@dataclass
class PodLog:
    """A container's log as kwok serves it: each `write` appends lines the API then returns."""

    path: Path

    def write(self, *lines: str | bytes, stream: str = "stdout", partial: bool = False) -> None:
        """Append `lines`; with `partial`, pieces of a line not yet ended instead, as a kubelet
        records a line longer than 16 KiB or written in parts: the API serves the pieces joined,
        up to the next complete entry (and a last unended line without its newline)."""
        # The CRI log format kubelets write: "<RFC 3339 time> <stream> <F|P> <line>".
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        head = f"{stamp} {stream} {'P' if partial else 'F'} ".encode()
        with self.path.open("ab") as log:
            log.writelines(
                head + (line.encode() if isinstance(line, str) else line) + b"\n" for line in lines
            )

    def rotate(self) -> None:
        """What the kubelet does at containerLogMaxSize: the file is renamed (the API no
        longer serves it) and a new, empty one takes its place."""
        self.path.rename(self.path.with_name(f"{self.path.name}.{time.time_ns()}"))
        self.path.touch()


@dataclass
class KubeCluster:
    binaries: Binaries
    workdir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="distrun-k8s-")))
    keep_workdir: bool = field(default_factory=lambda: bool(os.environ.get("DISTRUN_K8S_KEEP")))

    def __post_init__(self) -> None:
        self.tokens = {user: secrets.token_hex(16) for user in ("admin", *ORDINARY_USERS)}
        self.components: list[Component] = []
        self.pki: Pki | None = None
        self.server = ""  # https://127.0.0.1:<port> once started
        self.kwok_port = 0
        self._admin: kubernetes.client.ApiClient | None = None
        self.kwok: Component | None = None

    # -- lifecycle -------------------------------------------------------------------------

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> None:
        self.pki = write_pki(self.workdir / "pki", SERVICE_IP)
        (self.workdir / "logs").mkdir()
        self.start_etcd_and_apiserver()
        self.write_kubeconfigs()
        self.install_crds()
        self.start_controllers()
        self.register_nodes()
        for user in ORDINARY_USERS:
            self.create_namespace(user)
            self.grant_namespace(user, user)
        self.grant_cluster_read(ORDINARY_USERS)

    def stop(self) -> None:
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        for component in reversed(self.components):
            component.stop()
        self.components.clear()
        if not self.keep_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def check_alive(self) -> None:
        """Raise with the component's log if any part of the control plane has died."""
        for component in self.components:
            component.check_alive()

    # -- components ------------------------------------------------------------------------

    def start_component(self, name: str, argv: list[str]) -> Component:
        component = Component(name, argv, self.workdir / "logs" / f"{name}.log")
        self.components.append(component)
        component.start()
        return component

    def start_etcd_and_apiserver(self) -> None:
        assert self.pki is not None
        client_port, peer_port, api_port = free_port(), free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{client_port}", f"http://127.0.0.1:{peer_port}"
        etcd = self.start_component(
            "etcd",
            [
                str(self.binaries.etcd),
                "--name=distrun",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=distrun={peer_url}",
                "--unsafe-no-fsync",  # a throwaway store; durability only costs time
                "--log-level=warn",
            ],
        )
        etcd.wait_ready(lambda: http_ok(f"{client_url}/health"), STARTUP_TIMEOUT)

        token_file = self.workdir / "tokens.csv"
        token_file.write_text(
            f"{self.tokens['admin']},admin,admin,system:masters\n"
            + "".join(f"{self.tokens[user]},{user},{user}\n" for user in ORDINARY_USERS)
        )
        token_file.chmod(0o600)
        self.server = f"https://127.0.0.1:{api_port}"
        apiserver = self.start_component(
            "kube-apiserver",
            [
                str(self.binaries.kube_apiserver),
                f"--etcd-servers={client_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--tls-cert-file={self.pki.serving_cert}",
                f"--tls-private-key-file={self.pki.serving_key}",
                f"--client-ca-file={self.pki.ca_cert}",
                f"--token-auth-file={token_file}",
                "--authorization-mode=RBAC",
                # As kubeadm and managed clusters run it: Pod Security Admission, not this
                # flag, is what must refuse a user's privileged pods (test_multi_user.py).
                "--allow-privileged=true",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={self.pki.service_account_public_key}",
                f"--service-account-signing-key-file={self.pki.service_account_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # Nodes would stay tainted not-ready: no node-lifecycle controller clears it.
                "--disable-admission-plugins=TaintNodesByCondition",
                "--kubelet-preferred-address-types=InternalIP",
                f"--cert-dir={self.workdir / 'apiserver-certs'}",
                "--profiling=false",
                *self.aggregation_flags(),
            ],
        )
        self.wait_apiserver_ready(apiserver)

    def aggregation_flags(self) -> list[str]:
        """The aggregation layer, for metrics-server's `metrics.k8s.io` (metrics_server.py):
        kube-apiserver proxies to it with the front proxy's client certificate and the user in
        headers; it reaches the APIService's Service by its ExternalName (there is no
        kube-proxy). Not `--enable-aggregator-routing`: routing to endpoints refuses an
        ExternalName Service ("unsupported service type")."""
        assert self.pki is not None
        return [
            f"--requestheader-client-ca-file={self.pki.ca_cert}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={self.pki.proxy_client_cert}",
            f"--proxy-client-key-file={self.pki.proxy_client_key}",
        ]

    def wait_apiserver_ready(self, apiserver: Component) -> None:
        assert self.pki is not None
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        apiserver.wait_ready(
            lambda: http_ok(f"{self.server}/readyz", context, self.tokens["admin"]),
            STARTUP_TIMEOUT,
        )

    def restart_apiserver(self, down_for: float = 0.0) -> None:
        """Stops kube-apiserver (every watch and log stream through it breaks), waits
        `down_for` seconds, starts it again on the same port and etcd, and waits until ready."""
        [apiserver] = [c for c in self.components if c.name == "kube-apiserver"]
        apiserver.stop()
        time.sleep(down_for)
        apiserver.start()
        self.wait_apiserver_ready(apiserver)

    def start_controllers(self) -> None:
        assert self.pki is not None
        admin = self.kubeconfig("admin")
        delegated = [
            f"--kubeconfig={admin}",
            f"--authentication-kubeconfig={admin}",
            f"--authorization-kubeconfig={admin}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
        ]
        kcm_port, scheduler_port, self.kwok_port = free_port(), free_port(), free_port()
        controller_manager = self.start_component(
            "kube-controller-manager",
            [
                str(self.binaries.kube_controller_manager),
                *delegated,
                f"--secure-port={kcm_port}",
                f"--cert-dir={self.workdir / 'kcm-certs'}",
                f"--controllers={','.join(CONTROLLERS)}",
                f"--service-account-private-key-file={self.pki.service_account_key}",
                f"--root-ca-file={self.pki.ca_cert}",
                "--use-service-account-credentials=false",
            ],
        )
        scheduler = self.start_component(
            "kube-scheduler",
            [
                str(self.binaries.kube_scheduler),
                *delegated,
                f"--secure-port={scheduler_port}",
                f"--cert-dir={self.workdir / 'scheduler-certs'}",
            ],
        )
        kwok = self.kwok = self.start_component(
            "kwok",
            [
                str(self.binaries.kwok),
                f"--kubeconfig={admin}",
                f"--config={KWOK_STAGES}",
                f"--config={KWOK_METRICS}",
                f"--config={self.write_kwok_fallback_logs()}",
                "--manage-all-nodes=true",
                "--node-ip=127.0.0.1",
                f"--node-port={self.kwok_port}",
                f"--server-address=127.0.0.1:{self.kwok_port}",
                f"--tls-cert-file={self.pki.serving_cert}",
                f"--tls-private-key-file={self.pki.serving_key}",
                "--enable-crds=Logs",
            ],
        )
        loopback = unverified_loopback_context()
        controller_manager.wait_ready(
            lambda: http_ok(f"https://127.0.0.1:{kcm_port}/healthz", loopback), STARTUP_TIMEOUT
        )
        scheduler.wait_ready(
            lambda: http_ok(f"https://127.0.0.1:{scheduler_port}/healthz", loopback),
            STARTUP_TIMEOUT,
        )
        kwok_context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        kwok.wait_ready(
            lambda: http_ok(f"https://127.0.0.1:{self.kwok_port}/healthz", kwok_context),
            STARTUP_TIMEOUT,
        )

    def write_kwok_fallback_logs(self) -> Path:
        """A ClusterLogs rule for every container that has no `pod_log`: an empty log."""
        logs_dir = self.workdir / "pod-logs"
        logs_dir.mkdir(exist_ok=True)
        empty = logs_dir / "empty.log"
        empty.touch()
        config = self.workdir / "kwok-fallback-logs.yaml"
        rule = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterLogs",
            "metadata": {"name": "empty-by-default"},
            "spec": {"logs": [{"logsFile": str(empty)}]},
        }
        config.write_text(yaml.safe_dump(rule))
        return config

    # -- clients and kubeconfigs -----------------------------------------------------------

    def kubeconfig(self, user: str) -> Path:
        """The kubeconfig file of "admin", "alice" or "bob"."""
        path = self.workdir / "kubeconfigs" / f"{user}.yaml"
        if not path.is_file():
            raise KeyError(f"no kubeconfig for {user!r}; users are {sorted(self.tokens)}")
        return path

    def service_account_kubeconfig(self, namespace: str, account: str) -> Path:
        """A kubeconfig holding a fresh token of ServiceAccount `account` (as a pod of it
        would hold one), written once per account."""
        path = self.workdir / "kubeconfigs" / f"sa-{namespace}-{account}.yaml"
        if path.is_file():
            return path
        core = kubernetes.client.CoreV1Api(self.admin)
        request = core.create_namespaced_service_account_token(
            account, namespace, {"spec": {"expirationSeconds": 24 * 3600}}
        )
        config = yaml.safe_load(self.kubeconfig("admin").read_text())
        config["users"] = [{"name": account, "user": {"token": request.status.token}}]
        context = {"cluster": "distrun-test", "user": account, "namespace": namespace}
        config["contexts"] = [{"name": account, "context": context}]
        config["current-context"] = account
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def write_kubeconfigs(self) -> None:
        assert self.pki is not None
        directory = self.workdir / "kubeconfigs"
        directory.mkdir()
        for user, token in self.tokens.items():
            config = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "distrun-test",
                        "cluster": {
                            "server": self.server,
                            "certificate-authority": str(self.pki.ca_cert),
                        },
                    }
                ],
                "users": [{"name": user, "user": {"token": token}}],
                "contexts": [
                    {
                        "name": user,
                        "context": {
                            "cluster": "distrun-test",
                            "user": user,
                            "namespace": user if user in ORDINARY_USERS else "default",
                        },
                    }
                ],
                "current-context": user,
            }
            path = directory / f"{user}.yaml"
            path.write_text(yaml.safe_dump(config))
            path.chmod(0o600)

    @property
    def admin(self) -> kubernetes.client.ApiClient:
        """A synchronous admin client, for harness set-up; tests use `api_client`."""
        if self._admin is None:
            self._admin = kubernetes.config.new_client_from_config(str(self.kubeconfig("admin")))
        return self._admin

    @contextlib.asynccontextmanager
    async def api_client(self, user: str = "admin") -> AsyncIterator[Any]:
        """A `kubernetes_asyncio` ApiClient acting as `user`, loaded from its kubeconfig."""
        client = await kubernetes_asyncio.config.new_client_from_config(
            config_file=str(self.kubeconfig(user)), persist_config=False
        )
        try:
            yield client
        finally:
            await client.close()

    # -- cluster contents ------------------------------------------------------------------

    def install_crds(self) -> None:
        # Raw responses: turning these large schemas into client models takes seconds each.
        extensions = kubernetes.client.ApiextensionsV1Api(self.admin)
        names = []
        for path in self.binaries.crds:
            manifest = json.loads(path.read_text())
            extensions.create_custom_resource_definition(manifest, _preload_content=False)
            names.append(manifest["metadata"]["name"])

        def established(name: str) -> bool:
            response = extensions.read_custom_resource_definition(name, _preload_content=False)
            conditions = (json.loads(response.data).get("status") or {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        for name in names:
            wait_for(lambda name=name: established(name), f"CRD {name} to be established")

    def register_nodes(self) -> None:
        core = kubernetes.client.CoreV1Api(self.admin)
        for node in NODES:
            core.create_node(node.manifest())
        for node in NODES:
            wait_for(
                lambda node=node: node_ready(core.read_node(node.name)),
                f"kwok to make node {node.name} Ready",
                self.check_alive,
            )

    def create_namespace(self, name: str) -> None:
        """Create `name` and wait for its default service account (pods need it)."""
        core = kubernetes.client.CoreV1Api(self.admin)
        core.create_namespace({"metadata": {"name": name}})
        wait_for(
            lambda: exists(lambda: core.read_namespaced_service_account("default", name)),
            f"the default service account of namespace {name}",
            self.check_alive,
        )

    def delete_namespace(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            kubernetes.client.CoreV1Api(self.admin).delete_namespace(name)

    def grant_namespace(self, user: str, namespace: str) -> None:
        """Let `user` manage pods, their logs and every training job kind in `namespace`."""
        rbac = kubernetes.client.RbacAuthorizationV1Api(self.admin)
        rules = [
            {
                "apiGroups": [""],
                "resources": ["pods", "pods/log", "services", "configmaps", "events"],
                "verbs": ALL_VERBS,
            },
            *(
                {"apiGroups": [group], "resources": resources, "verbs": ALL_VERBS}
                for group, resources in TRAINING_JOB_RESOURCES.items()
            ),
        ]
        role = "distrun-user"
        rbac.create_namespaced_role(namespace, {"metadata": {"name": role}, "rules": rules})
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": f"{role}-{user}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                ],
            },
        )

    def grant_cluster_read(self, users: tuple[str, ...]) -> None:
        """Cluster-scoped kinds a user of training jobs reads: runtimes, queues, nodes."""
        rbac = kubernetes.client.RbacAuthorizationV1Api(self.admin)
        name = "distrun-user-cluster-read"
        rules = [
            {
                "apiGroups": ["trainer.kubeflow.org"],
                "resources": ["clustertrainingruntimes"],
                "verbs": ["get", "list", "watch"],
            },
            {
                "apiGroups": ["scheduling.volcano.sh"],
                "resources": ["queues"],
                "verbs": ["get", "list", "watch"],
            },
        ]
        rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})
        rbac.create_cluster_role_binding(
            {
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": name,
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                    for user in users
                ],
            }
        )

    def follows(self, log: PodLog) -> bool:
        """Whether kwok's reader of a follow stream of `log` is ready for a rotation. kwok
        reads logs with the kubelet's own reader (cri-client's ReadLogs), which starts watching
        the log's folder only once it first reaches the end of the file: a rotation before that
        leaves the stream on the renamed file for good (the kubelet has the same window)."""
        return self.kwok is not None and self.kwok.watches(log.path.parent) > 0

    def pod_log(self, namespace: str, pod: str, container: str | None = None) -> PodLog:
        """The log that the API serves for `pod`'s `container` (every container when None).

        Backed by a kwok `Logs` object named after the pod; create it before the pod runs so
        kwok knows it by the time anyone reads."""
        directory = self.workdir / "pod-logs" / namespace / pod
        directory.mkdir(parents=True, exist_ok=True)
        log = PodLog(directory / f"{container or '_all'}.log")
        log.path.touch()
        entry: dict[str, Any] = {"logsFile": str(log.path)}
        if container is not None:
            entry["containers"] = [container]
        custom = kubernetes.client.CustomObjectsApi(self.admin)
        group, version, plural = KWOK_LOGS
        body = {
            "apiVersion": f"{group}/{version}",
            "kind": "Logs",
            "metadata": {"name": pod, "namespace": namespace},
            "spec": {"logs": [entry]},
        }
        try:
            custom.create_namespaced_custom_object(group, version, namespace, plural, body)
        except ApiException as error:
            if error.status != 409:
                raise
            existing = custom.get_namespaced_custom_object(group, version, namespace, plural, pod)
            existing["spec"]["logs"].append(entry)
            custom.replace_namespaced_custom_object(
                group, version, namespace, plural, pod, existing
            )
        return log


def node_ready(node: Any) -> bool:
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def exists(read: Callable[[], object]) -> bool:
    try:
        read()
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def wait_for(
    condition: Callable[[], bool],
    what: str,
    check: Callable[[], None] | None = None,
    timeout: float = STARTUP_TIMEOUT,
) -> None:
    """Poll `condition()` until true; `check()` may raise when waiting is pointless."""
    deadline = time.monotonic() + timeout
    while not condition():
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)
