"""The chart against a real kube-apiserver: every rendered object passes a server-side dry run,
and the singleuser ServiceAccount's rights are checked with SubjectAccessReviews."""

import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from distrun.engines.kube.kubeflow import KubeflowEngine
from distrun.engines.kube.trainer import TrainerEngine
from distrun.engines.kube.volcano import VolcanoEngine

from ..k8s.cluster import KubeCluster
from ..k8s.conftest import kube_cluster  # noqa: F401  (the session's control plane)
from .test_chart import CHART, helm, render  # noqa: F401

pytestmark = pytest.mark.kubernetes

# What distrun's engines do in a user's namespace.
NEEDED = [
    ("create", "kubeflow.org", "pytorchjobs", ""),
    ("delete", "kubeflow.org", "tfjobs", ""),
    ("watch", "kubeflow.org", "mpijobs", ""),
    ("create", "trainer.kubeflow.org", "trainjobs", ""),
    ("create", "batch.volcano.sh", "jobs", ""),
    ("create", "", "configmaps", ""),
    ("list", "", "pods", ""),
    ("get", "", "pods", "log"),
    ("list", "", "events", ""),
]
# What it must never do, even in its own namespace.
FORBIDDEN = [
    ("create", "", "pods", ""),
    ("get", "", "secrets", ""),
    ("create", "rbac.authorization.k8s.io", "rolebindings", ""),
    ("create", "", "pods", "exec"),
    ("delete", "", "namespaces", ""),
]


def kubectl(cluster: KubeCluster, *args: str, stdin: str | None = None) -> str:
    result = subprocess.run(
        ["kubectl", f"--kubeconfig={cluster.kubeconfig('admin')}", *args],
        check=False, input=stdin, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def namespaces(kube_cluster: KubeCluster) -> Iterator[tuple[str, str]]:  # noqa: F811
    """The release's namespace and a namespace of someone else."""
    suffix = secrets.token_hex(3)  # deleted namespaces linger while they terminate
    names = (f"jhub-{suffix}", f"other-{suffix}")
    for name in names:
        kube_cluster.create_namespace(name)
    yield names
    for name in names:
        kube_cluster.delete_namespace(name)


def allowed(cluster: KubeCluster, user: str, namespace: str, check: tuple[str, ...]) -> bool:
    verb, group, resource, subresource = check
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user,
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
            "resourceAttributes": {
                "namespace": namespace, "verb": verb, "group": group,
                "resource": resource, "subresource": subresource,
            },
        },
    }  # fmt: skip
    api = kubernetes.client.AuthorizationV1Api(cluster.admin)
    result: Any = api.create_subject_access_review(review)
    return bool(result.status.allowed)


@pytest.mark.parametrize("policy", ["profiles", "shared", "per-user"])
def test_every_rendered_object_passes_a_server_side_dry_run(
    kube_cluster: KubeCluster,  # noqa: F811
    helm: Path,  # noqa: F811
    namespaces: tuple[str, str],
    policy: str,
) -> None:
    release, _ = namespaces
    args = ["--set", "profiles.enabled=false", "--set", f"kernels.namespacePolicy={policy}"]
    objects = render(helm, *(args if policy != "profiles" else []), namespace=release)
    kinds = {obj["kind"] for obj in objects}
    assert {"Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"} <= kinds
    out = kubectl(kube_cluster, "apply", "--dry-run=server", "-n", release, "-o", "name",
                  "-f", "-", stdin=yaml.safe_dump_all(objects))  # fmt: skip
    assert len(out.split()) == len(objects)


def test_the_singleuser_account_can_run_jobs_in_its_namespace_and_nothing_elsewhere(
    kube_cluster: KubeCluster,  # noqa: F811
    helm: Path,  # noqa: F811
    namespaces: tuple[str, str],
) -> None:
    release, other = namespaces
    rbac = [
        obj
        for obj in render(helm, "--set", "profiles.enabled=false", namespace=release)
        if obj["kind"] in ("ServiceAccount", "Role", "RoleBinding")
    ]
    kubectl(kube_cluster, "apply", "-n", release, "-f", "-", stdin=yaml.safe_dump_all(rbac))
    user = f"system:serviceaccount:{release}:distrun-singleuser"
    until_bound(kube_cluster, user, release)

    for check in NEEDED:
        assert allowed(kube_cluster, user, release, check), check
    for check in FORBIDDEN:
        assert not allowed(kube_cluster, user, release, check), check
    for check in NEEDED:
        assert not allowed(kube_cluster, user, other, check), check
    gateway = f"system:serviceaccount:{release}:distrun-distrun-gateway"
    assert allowed(kube_cluster, gateway, release, ("create", "", "pods", ""))
    assert not allowed(kube_cluster, gateway, release, ("get", "", "secrets", ""))
    assert not allowed(kube_cluster, gateway, other, ("create", "", "pods", ""))


def until_bound(
    cluster: KubeCluster,
    user: str,
    namespace: str,
    check: tuple[str, ...] = ("get", "", "pods", ""),
) -> None:
    """A binding just applied reaches the API server's authorizer within moments (through its
    informer): until then every review of it says no. Waits until `check` is allowed."""
    deadline = time.monotonic() + 30
    while not allowed(cluster, user, namespace, check):
        assert time.monotonic() < deadline, f"{user} never got to read pods in {namespace}"
        time.sleep(0.2)


# Cluster-scoped: a Trainer whole-job restart reads the configured ClusterTrainingRuntime.
CLUSTER_SCOPED = {("trainer.kubeflow.org", "clustertrainingruntimes")}


def engine_requests(*, cluster_scoped: bool = False) -> list[tuple[str, str, str, str]]:
    """Every request distrun's Kubernetes engines make in a user's namespace (or, with
    `cluster_scoped`, of cluster-scoped objects), from the engines themselves
    (`KubeEngine.access`), as (verb, group, resource, subresource)."""
    found = {
        (a.verb, a.resource.group, a.resource.plural, a.subresource)
        for engine in (KubeflowEngine, TrainerEngine, VolcanoEngine)
        for a in engine.access()
        if ((a.resource.group, a.resource.plural) in CLUSTER_SCOPED) == cluster_scoped
    }
    return sorted(found)


def test_the_engines_declare_what_the_docs_say_they_need() -> None:
    requests = engine_requests()
    assert ("update", "", "configmaps", "") in requests  # the log ledger
    assert ("get", "scheduling.volcano.sh", "podgroups", "") in requests
    assert ("delete", "trainer.kubeflow.org", "trainjobs", "") in requests
    assert ("get", "", "pods", "log") in requests


@pytest.mark.parametrize("mode", ["profiles", "shared"])
def test_the_chart_grants_every_request_the_engines_make_in_both_namespace_modes(
    kube_cluster: KubeCluster,  # noqa: F811
    helm: Path,  # noqa: F811
    namespaces: tuple[str, str],
    mode: str,
) -> None:
    """SubjectAccessReviews for each verb of each resource the engines use: with profiles, as
    the notebook ServiceAccount of a user's namespace bound to the chart's ClusterRole (the
    binding the hub's profile hook makes); without, as the singleuser ServiceAccount with the
    chart's Role in the jobs' namespace. Nothing in another namespace."""
    release, other = namespaces
    if mode == "profiles":
        roles = [o for o in render(helm, namespace=release) if o["kind"] == "ClusterRole"]
        [notebook] = [r for r in roles if r["metadata"]["name"].endswith("-notebook")]
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "distrun-notebook", "namespace": other},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": notebook["metadata"]["name"]},
            "subjects": [{"kind": "ServiceAccount", "name": "distrun-notebook",
                          "namespace": other}],
        }  # fmt: skip
        objects, user_namespace, elsewhere = [notebook, binding], other, release
        user = f"system:serviceaccount:{other}:distrun-notebook"
    else:
        objects = [
            obj
            for obj in render(helm, "--set", "profiles.enabled=false", namespace=release)
            if obj["kind"] in ("ServiceAccount", "Role", "RoleBinding")
            or obj["metadata"]["name"].endswith("-training-runtime-reader")
        ]
        user_namespace, elsewhere = release, other
        user = f"system:serviceaccount:{release}:distrun-singleuser"
    kubectl(kube_cluster, "apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    try:
        until_bound(kube_cluster, user, user_namespace)
        missing = [
            check
            for check in engine_requests()
            if not allowed(kube_cluster, user, user_namespace, check)
        ]
        assert missing == [], f"the chart's {mode} role lacks {missing}"
        granted_elsewhere = [
            check for check in engine_requests() if allowed(kube_cluster, user, elsewhere, check)
        ]
        assert granted_elsewhere == []
        # Without profiles the singleuser account reads the cluster's Trainer runtimes; with
        # profiles nobody does unless the administrator sets trainer.readClusterRuntimes.
        cluster_reads = engine_requests(cluster_scoped=True)
        assert cluster_reads == [("get", "trainer.kubeflow.org", "clustertrainingruntimes", "")]
        readable = [check for check in cluster_reads if allowed(kube_cluster, user, "", check)]
        assert readable == (cluster_reads if mode == "shared" else [])
    finally:
        if mode == "profiles":
            kubectl(kube_cluster, "delete", "clusterrole", notebook["metadata"]["name"])
        for obj in objects if mode == "shared" else []:
            if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
                kubectl(kube_cluster, "delete", obj["kind"].lower(), obj["metadata"]["name"])
