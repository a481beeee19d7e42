"""The real metrics-server (v0.8.0, built from its Go module by binaries.py) serving
`metrics.k8s.io` through the tier's kube-apiserver, from kwok's simulated usage.

kube-apiserver runs with its aggregation layer on (`KubeCluster.aggregation_flags`); this
registers the `v1beta1.metrics.k8s.io` APIService on a Service of type ExternalName naming
127.0.0.1 (there is no kube-proxy; the aggregator dials an ExternalName itself), and runs
metrics-server as kwokctl runs it on a host: it reads each node's `daemonEndpoints` port
(kwok's) and the `metrics.k8s.io/resource-metrics-path` annotation, where kwok's Metric
(kwok-metrics.yaml) serves the usage its ClusterResourceUsage gives each pod.

metrics-server reports a pod once two scrapes have it with CPU time and memory (CPU is a rate
between them; kwok's first answer for a container has no CPU time yet), so a pod's PodMetrics
appear two to three resolutions after kwok gives it usage.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes_asyncio import client

from tests.server_process import free_port

from .cluster import STARTUP_TIMEOUT, KubeCluster, wait_for
from .processes import Component, http_ok, unverified_loopback_context

RESOLUTION_SECONDS = 10  # metrics-server's smallest --metric-resolution
# Up to three scrapes (see above), then distrun's own 15 s between listings: a bound, with room.
USAGE_WAIT = 6 * RESOLUTION_SECONDS + 30.0
CPU_ANNOTATION = "kwok.distrun.test/usage-cpu"  # read by kwok-metrics.yaml
MEMORY_ANNOTATION = "kwok.distrun.test/usage-memory"
MIB, GIB = 2**20, 2**30
API_SERVICE = "v1beta1.metrics.k8s.io"
SERVICE = ("kube-system", "metrics-server")  # the name the serving certificate holds (pki.py)


@contextlib.contextmanager
def metrics_server(cluster: KubeCluster, binary: Path) -> Iterator[Component]:
    """metrics-server serving `metrics.k8s.io` in `cluster` inside the block; afterwards the
    APIService is gone again (the API answers 404, as in a cluster without it)."""
    assert cluster.pki is not None
    port = free_port()
    admin = cluster.kubeconfig("admin")
    component = cluster.start_component(
        "metrics-server",
        [
            str(binary),
            f"--kubeconfig={admin}",
            f"--authentication-kubeconfig={admin}",
            f"--authorization-kubeconfig={admin}",
            "--bind-address=127.0.0.1",
            f"--secure-port={port}",
            f"--tls-cert-file={cluster.pki.serving_cert}",
            f"--tls-private-key-file={cluster.pki.serving_key}",
            f"--metric-resolution={RESOLUTION_SECONDS}s",
            "--kubelet-request-timeout=5s",  # below the resolution, as it requires
            "--kubelet-use-node-status-port",
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-certificate-authority={cluster.pki.ca_cert}",  # kwok's serving cert
        ],
    )
    try:
        component.wait_ready(
            lambda: http_ok(f"https://127.0.0.1:{port}/livez", unverified_loopback_context()),
            STARTUP_TIMEOUT,
        )
        register(cluster, port)
        yield component
    finally:
        unregister(cluster)
        cluster.components.remove(component)
        component.stop()


def register(cluster: KubeCluster, port: int) -> None:
    """The Service and the APIService, then wait until the aggregator finds it Available."""
    assert cluster.pki is not None
    namespace, name = SERVICE
    kubernetes.client.CoreV1Api(cluster.admin).create_namespaced_service(
        namespace,
        {
            "metadata": {"name": name},
            "spec": {
                "type": "ExternalName",
                "externalName": "127.0.0.1",
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            },
        },
    )
    registration = kubernetes.client.ApiregistrationV1Api(cluster.admin)
    ca_bundle = base64.b64encode(cluster.pki.ca_cert.read_bytes()).decode()
    registration.create_api_service(
        {
            "metadata": {"name": API_SERVICE},
            "spec": {
                "group": "metrics.k8s.io",
                "version": "v1beta1",
                "service": {"namespace": namespace, "name": name, "port": port},
                "caBundle": ca_bundle,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        }
    )

    said = [""]  # the aggregator's last word on it, for the timeout's message

    def available() -> bool:
        conditions = registration.read_api_service(API_SERVICE).status.conditions or []
        said[0] = "; ".join(f"{c.type}={c.status} {c.reason}: {c.message}" for c in conditions)
        return any(c.type == "Available" and c.status == "True" for c in conditions)

    try:
        wait_for(
            available, f"the APIService {API_SERVICE} to be Available", cluster.check_alive, 40
        )
    except TimeoutError as error:
        raise TimeoutError(f"{error} ({said[0] or 'no condition'})") from None


def unregister(cluster: KubeCluster) -> None:
    namespace, name = SERVICE
    with contextlib.suppress(kubernetes.client.ApiException):
        kubernetes.client.ApiregistrationV1Api(cluster.admin).delete_api_service(API_SERVICE)
    with contextlib.suppress(kubernetes.client.ApiException):
        kubernetes.client.CoreV1Api(cluster.admin).delete_namespaced_service(name, namespace)


async def annotate(api: Any, namespace: str, pod: Any, annotations: dict[str, str]) -> None:
    body = {"metadata": {"annotations": annotations}}
    await client.CoreV1Api(api).patch_namespaced_pod(pod.metadata.name, namespace, body)


async def use(api: Any, namespace: str, pod: Any, cpu: str, memory: str) -> None:
    """kwok's simulated usage of the pod's containers from now on (`kubectl top`'s figures once
    metrics-server has scraped it twice)."""
    await annotate(api, namespace, pod, {CPU_ANNOTATION: cpu, MEMORY_ANNOTATION: memory})
