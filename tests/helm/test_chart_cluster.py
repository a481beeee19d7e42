"""The chart against a real kube-apiserver: every rendered object passes a server-side dry run,
and the singleuser ServiceAccount's rights are checked with SubjectAccessReviews."""

import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

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
