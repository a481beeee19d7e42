"""Fixtures of the Kubernetes tier: one real control plane per test session.

`kube_cluster` builds (or takes from the cache) the binaries and starts the cluster once;
`kube_admin` / `kube_alice` / `kube_bob` are `kubernetes_asyncio` ApiClients acting as each user;
`kube_namespace` is a fresh namespace (admin-only) removed after the test.
Set DISTRUN_SKIP_K8S=1 to skip the tier; any other failure to build or start is an error.
"""

from __future__ import annotations

import os
import secrets
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from .binaries import ensure_all
from .cluster import KubeCluster

SKIP_REASON = (
    "\n\n    !!! Kubernetes tier SKIPPED because DISTRUN_SKIP_K8S=1: no real kube-apiserver, "
    "CRD schemas, RBAC or kwok pods were tested. Unset it to run them. !!!\n"
)


def pytest_report_header() -> str | None:
    if os.environ.get("DISTRUN_SKIP_K8S") == "1":
        return SKIP_REASON.strip()
    return None


@pytest.fixture(scope="session")
def kube_cluster() -> Iterator[KubeCluster]:
    if os.environ.get("DISTRUN_SKIP_K8S") == "1":
        warnings.warn(SKIP_REASON, UserWarning, stacklevel=1)
        pytest.skip(SKIP_REASON)
    binaries = ensure_all()
    with KubeCluster(binaries) as cluster:
        yield cluster


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
def kube_namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    name = f"t-{secrets.token_hex(4)}"
    kube_cluster.create_namespace(name)
    yield name
    kube_cluster.delete_namespace(name)
