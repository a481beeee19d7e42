"""Fixtures of the Kubernetes tier: one real control plane per test session.

The binaries are built (or taken from the cache, or waited for while tests/prepare.py builds
them) before the first test that needs each, outside that test's timeout: a cold build takes
many minutes.
`kube_cluster` starts the cluster once per session;
`kube_admin` / `kube_alice` / `kube_bob` are `kubernetes_asyncio` ApiClients acting as each user;
`kube_namespace` is a fresh namespace (admin-only) removed after the test;
`servers` is two jupyter_server processes with the Kubernetes engines, per test module.
Set DISTRUN_SKIP_K8S=1 to skip the tier; any other failure to build or start is an error.
"""

from __future__ import annotations

import os
import secrets
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from distrun.engines.kube.kubeflow import KubeflowEngine

from .binaries import (
    Binaries,
    BuildError,
    cache_root,
    ensure_all,
    ensure_metrics_server,
    file_lock,
)
from .cluster import KubeCluster
from .controller_builds import (
    ControllerBinaries,
    KatibBinaries,
    ensure_controllers,
    ensure_katib,
    ensure_katib_suggestion,
)
from .controllers import start_kueue, start_training_operator, training_operator_for
from .distrun_server import (
    DistrunServer,
    delete_user_jobs,
    engine_config,
    prepare_server_identity,
    running,
    user_namespace,
)
from .katib_controller import (
    INJECTION_LABELS,
    KatibCluster,
    hosts_file,
    start_deployment_controllers,
    start_katib,
    start_suggestion_service,
)
from .metrics_server import metrics_server
from .real_controllers import (
    start_job_controller,
    start_jobset,
    start_trainer,
    start_volcano,
)
from .real_controllers import start_kueue as start_kueue_everywhere
from .real_operator import clear_v1_jobs

SKIP_REASON = (
    "\n\n    !!! Kubernetes tier SKIPPED because DISTRUN_SKIP_K8S=1: no real kube-apiserver, "
    "CRD schemas, RBAC or kwok pods were tested. Unset it to run them. !!!\n"
)


class Build:
    """What the builds before the first test needing each produced, for the fixtures to use or
    raise."""

    binaries: Binaries | None = None
    error: BuildError | None = None
    controllers: ControllerBinaries | None = None  # only when a test asks for them
    katib: KatibBinaries | None = None  # likewise
    katib_suggestion: Path | None = None
    metrics_server: Path | None = None  # likewise


def skipping() -> bool:
    return os.environ.get("DISTRUN_SKIP_K8S") == "1"


def pytest_report_header() -> str | None:
    return SKIP_REASON.strip() if skipping() else None


def needs(item: pytest.Item, fixture: str) -> bool:
    return fixture in getattr(item, "fixturenames", ())


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """Before the first test that needs a component, wait for its build (or build it): here,
    outside the test's timeout (pytest-timeout's own wrapper is inside this one), since a cold
    build takes minutes. `.ci/test` builds them in the background (tests/prepare.py) while the
    tiers that need none run, so here they are usually done."""
    if not skipping() and Build.error is None:
        try:
            build_for(item)
        except BuildError as error:  # raised again by the fixture: a test error, not a crash
            Build.error = error
    yield


def build_for(item: pytest.Item) -> None:
    def report(message: str) -> None:
        terminal = item.config.pluginmanager.get_plugin("terminalreporter")
        if terminal is not None:
            terminal.write_line(f"[distrun k8s] {message}")

    cluster = ("kube_cluster", "controllers_cluster", "katib_binaries")
    if Build.binaries is None and any(needs(item, fixture) for fixture in cluster):
        Build.binaries = ensure_all(report)
    if Build.controllers is None and needs(item, "controller_binaries"):
        Build.controllers = ensure_controllers(report)
    if Build.katib is None and needs(item, "katib_binaries"):
        Build.katib = ensure_katib(report)
    if Build.katib_suggestion is None and needs(item, "katib_cluster"):
        Build.katib_suggestion = ensure_katib_suggestion(report)
    if Build.metrics_server is None and (
        needs(item, "kube_metrics") or needs(item, "controllers_metrics")
    ):
        Build.metrics_server = ensure_metrics_server(report) / "metrics-server"


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    if skipping():
        warnings.warn(SKIP_REASON, UserWarning, stacklevel=1)
        pytest.skip(SKIP_REASON)
    if Build.error is not None:
        raise Build.error
    with KubeCluster(Build.binaries or ensure_all()) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def controller_binaries() -> ControllerBinaries:
    """The real controllers and their manifests (controller_builds.py)."""
    if skipping():
        pytest.skip(SKIP_REASON)
    if Build.error is not None:
        raise Build.error
    return Build.controllers or ensure_controllers()


@pytest.fixture(scope="session")
def katib_binaries() -> KatibBinaries:
    """Katib's controller, our check of its Experiments, its manifests."""
    if skipping():
        pytest.skip(SKIP_REASON)
    if Build.error is not None:
        raise Build.error
    return Build.katib or ensure_katib()


@pytest.fixture(scope="session")
def katib_cluster(katib_binaries: KatibBinaries) -> Iterator[KatibCluster]:
    """A cluster of its own where Katib runs whole (katib_controller.py): its controller and
    webhooks, its Optuna suggestion service (one per machine at a time: its port is fixed),
    Deployment controllers for its suggestion Deployments, and the Training Operator for the
    namespace `KatibCluster.trials`, labelled for Katib, where trials run."""
    suggestion = Build.katib_suggestion or ensure_katib_suggestion()
    with (
        file_lock(cache_root() / "katib-suggestion-port.lock"),
        KubeCluster(Build.binaries or ensure_all()) as cluster,
    ):
        hosts = hosts_file(cluster.workdir / "katib")
        start_deployment_controllers(cluster)
        service = start_suggestion_service(cluster, suggestion)
        start_katib(cluster, katib_binaries, hosts)
        trials = "katib-trials"
        cluster.create_namespace(trials)
        kubernetes.client.CoreV1Api(cluster.admin).patch_namespace(
            trials, {"metadata": {"labels": INJECTION_LABELS}}
        )
        start_training_operator(cluster, cluster.binaries.training_operator, trials)
        yield KatibCluster(cluster, katib_binaries, hosts, trials, service)


@pytest.fixture(scope="session")
def controllers_cluster(controller_binaries: ControllerBinaries) -> Iterator[KubeCluster]:
    """A cluster of its own where real controllers run cluster-wide (tests start those they
    need, with real_controllers.py), with kube-controller-manager's job controller. Not the
    tier's `kube_cluster`, where Training Operators watch chosen namespaces only."""
    with KubeCluster(Build.binaries or ensure_all()) as cluster:
        start_job_controller(cluster, cluster.binaries.kube_controller_manager)
        yield cluster


@pytest.fixture(scope="session")
def volcano_controllers(
    controllers_cluster: KubeCluster, controller_binaries: ControllerBinaries
) -> None:
    """Volcano's webhooks, scheduler and job controller in `controllers_cluster`."""
    start_volcano(controllers_cluster, controller_binaries)


@pytest.fixture(scope="session")
def trainer_controllers(
    controllers_cluster: KubeCluster, controller_binaries: ControllerBinaries
) -> None:
    """JobSet, then Trainer and its ClusterTrainingRuntimes, in `controllers_cluster`."""
    start_jobset(controllers_cluster, controller_binaries)
    start_trainer(controllers_cluster, controller_binaries)


@pytest.fixture(scope="session")
def kueue_controllers(
    controllers_cluster: KubeCluster, controller_binaries: ControllerBinaries
) -> None:
    """Kueue with every webhook of its manifests in `controllers_cluster`, once a session."""
    start_kueue_everywhere(controllers_cluster, controller_binaries)


@pytest.fixture(scope="module")
def kube_metrics(kube_cluster: KubeCluster) -> Iterator[None]:
    """The real metrics-server serving `metrics.k8s.io` in `kube_cluster` from kwok's
    simulated usage (metrics_server.py), for one module: a cluster without it is what the
    other modules test (`metrics.k8s.io` answers 404)."""
    binary = Build.metrics_server or ensure_metrics_server() / "metrics-server"
    with metrics_server(kube_cluster, binary):
        yield


@pytest.fixture(scope="module")
def controllers_metrics(controllers_cluster: KubeCluster) -> Iterator[None]:
    """The same metrics-server in `controllers_cluster`, where the real Trainer, JobSet and
    Volcano controllers run, for one module."""
    binary = Build.metrics_server or ensure_metrics_server() / "metrics-server"
    with metrics_server(controllers_cluster, binary):
        yield


@pytest.fixture(scope="session")
def operator_namespace(kube_cluster: KubeCluster) -> str:
    """A namespace the real Kubeflow Training Operator reconciles, for the session; this
    operator, the cluster's first, serves the validating webhooks."""
    name = "real-operator"
    kube_cluster.create_namespace(name)
    start_training_operator(kube_cluster, kube_cluster.binaries.training_operator, name)
    return name


@pytest.fixture(scope="module")
def alice_operator(kube_cluster: KubeCluster, operator_namespace: str) -> Iterator[str]:
    """The real Training Operator reconciling alice's namespace of the server processes
    (`distrun-alice`) for one module, which it returns; started after the session's operator,
    which serves the webhooks. The modules without it make the pods there by hand."""
    namespace = user_namespace("alice")
    with training_operator_for(kube_cluster, namespace):
        yield namespace


KUEUE_QUEUE = "team-a"
KUEUE_CPU_QUOTA = "2"  # one job of two 1-CPU replicas at a time


@pytest.fixture(scope="session")
def kueue_queue(kube_cluster: KubeCluster, operator_namespace: str) -> str:
    """Kueue managing `operator_namespace`: a ClusterQueue with CPU for one 2-replica job and
    its LocalQueue there, whose name this returns."""
    start_kueue(kube_cluster, kube_cluster.binaries.kueue, operator_namespace)
    custom = kubernetes.client.CustomObjectsApi(kube_cluster.admin)
    group, version = "kueue.x-k8s.io", "v1beta1"
    custom.create_cluster_custom_object(
        group, version, "resourceflavors", {"apiVersion": f"{group}/{version}",
        "kind": "ResourceFlavor", "metadata": {"name": "default-flavor"}},
    )  # fmt: skip
    quota = [{"name": "cpu", "nominalQuota": KUEUE_CPU_QUOTA},
             {"name": "memory", "nominalQuota": "64Gi"}]  # fmt: skip
    cluster_queue = {
        "apiVersion": f"{group}/{version}",
        "kind": "ClusterQueue",
        "metadata": {"name": "distrun-cq"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": ["cpu", "memory"],
                                "flavors": [{"name": "default-flavor", "resources": quota}]}],
        },
    }  # fmt: skip
    custom.create_cluster_custom_object(group, version, "clusterqueues", cluster_queue)
    local_queue = {
        "apiVersion": f"{group}/{version}",
        "kind": "LocalQueue",
        "metadata": {"name": KUEUE_QUEUE, "namespace": operator_namespace},
        "spec": {"clusterQueue": "distrun-cq"},
    }
    custom.create_namespaced_custom_object(
        group, version, operator_namespace, "localqueues", local_queue
    )
    return KUEUE_QUEUE


@pytest.fixture
async def kube_admin(kube_cluster: KubeCluster) -> AsyncIterator[Any]:
    async with kube_cluster.api_client("admin") as client:
        yield client


@pytest.fixture
async def kube_alice(kube_cluster: KubeCluster) -> AsyncIterator[Any]:
    async with kube_cluster.api_client("alice") as client:
        yield client


@pytest.fixture
async def kube_bob(kube_cluster: KubeCluster) -> AsyncIterator[Any]:
    async with kube_cluster.api_client("bob") as client:
        yield client


@pytest.fixture
async def kubeflow(kube_admin: Any, operator_namespace: str) -> AsyncIterator[KubeflowEngine]:
    """The Kubeflow engine where the real Training Operator runs, cleared of earlier jobs."""
    await clear_v1_jobs(kube_admin, operator_namespace)
    engine = KubeflowEngine(api_client=kube_admin, namespace=operator_namespace)
    yield engine
    await engine.close()


@pytest.fixture
def kube_namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    name = f"t-{secrets.token_hex(4)}"
    kube_cluster.create_namespace(name)
    yield name
    kube_cluster.delete_namespace(name)


@pytest.fixture(scope="module")
def servers(
    kube_cluster: KubeCluster,
) -> Iterator[tuple[DistrunServer, DistrunServer]]:
    """Two independent server processes with the same Kubernetes engines on the cluster, as
    the distrun-server ServiceAccount; the jobs they made are removed after the module."""
    kubeconfig = prepare_server_identity(kube_cluster)
    engines = engine_config(kubeconfig)
    with running(DistrunServer(engines), DistrunServer(engines)) as (first, second):
        yield first, second
    delete_user_jobs(kube_cluster)
