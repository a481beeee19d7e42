"""The real job controllers, run against the tier's API server the way an operator installs
them: their admission webhooks registered, their certificates in place, waited for until ready.

`start_training_operator` runs the Kubeflow Training Operator v1.9.4 (built from its Go module by
binaries.py) watching ONE namespace; several may run, one per namespace (the first one started
in a cluster serves the validating webhooks, which every job of the cluster goes through): the
tests that still make the operators' pods themselves (operator_sim.py) do so in namespaces no
operator watches, where an operator would make a second set beside theirs.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes
import yaml

from tests.server_process import free_port

from .cluster import KubeCluster, exists, wait_for
from .processes import Component, http_ok, unverified_loopback_context
from .webhook_certs import Certs, make_certs

OPERATOR_NAMESPACE = "kubeflow"
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
WEBHOOK_SECRET = "training-operator-webhook-cert"
# What the operator's certificate rotator checks the stored certificates against.
CA_NAME = "training-operator-ca"
SERVICE_DNS_NAME = f"training-operator.{OPERATOR_NAMESPACE}.svc"
# The rotator only checks that a file exists here (upstream hard-codes the path); the webhook
# server reads its own copy under $TMPDIR.
HARD_CODED_CERT = Path("/tmp/k8s-webhook-server/serving-certs/tls.crt")
VALIDATED_KINDS = ("pytorchjob", "tfjob", "xgboostjob", "paddlejob", "jaxjob")  # MPI: none
READY_TIMEOUT = 120.0
# The webhooks' certificates of each cluster (by its work directory), made by its first operator.
_OPERATOR_CERTS: dict[Path, Certs] = {}


def start_training_operator(
    cluster: KubeCluster, operator: Path, watched_namespace: str
) -> Component:
    """The Training Operator reconciling the jobs of `watched_namespace`, ready for jobs.
    The first one started in `cluster` stores the certificates and registers the webhooks
    (on its port): stop it last."""
    first = cluster.workdir not in _OPERATOR_CERTS
    if first:
        _OPERATOR_CERTS[cluster.workdir] = make_certs(CA_NAME, SERVICE_DNS_NAME)
    certs = _OPERATOR_CERTS[cluster.workdir]
    workdir = cluster.workdir / f"training-operator-{watched_namespace}"
    certs.write(workdir / "k8s-webhook-server" / "serving-certs")
    if not HARD_CODED_CERT.exists():
        certs.write(HARD_CODED_CERT.parent)
    webhook_port, metrics_port, probe_port = free_port(), free_port(), free_port()
    if first:
        _create_namespace(cluster, OPERATOR_NAMESPACE)
        _store_certs(cluster, OPERATOR_NAMESPACE, WEBHOOK_SECRET, certs)
        _register_webhooks(cluster, webhook_port)
    environment = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig("admin")),
        "MY_POD_NAMESPACE": OPERATOR_NAMESPACE,
        "TMPDIR": str(workdir),
    }
    component = Component(
        f"training-operator-{watched_namespace}",
        [
            str(operator),
            f"--namespace={watched_namespace}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{probe_port}",
            f"--webhook-server-port={webhook_port}",
            "--leader-elect=false",
        ],
        cluster.workdir / "logs" / f"training-operator-{watched_namespace}.log",
        env=environment,
    )
    cluster.components.append(component)
    component.start()
    component.wait_ready(
        lambda: http_ok(f"http://127.0.0.1:{probe_port}/readyz", None), READY_TIMEOUT
    )
    # The webhooks are served only once the rotator has taken the certificates, after /readyz.
    paths = tuple(f"/validate-kubeflow-org-v1-{kind}" for kind in VALIDATED_KINDS)
    component.wait_ready(lambda: _webhooks_served(webhook_port, paths), READY_TIMEOUT)
    return component


def stop_training_operator(cluster: KubeCluster, component: Component) -> None:
    """Stops an operator started by `start_training_operator` (not the first of the cluster,
    which serves the webhooks); what it made stays."""
    cluster.components.remove(component)
    component.stop()


@contextlib.contextmanager
def training_operator_for(cluster: KubeCluster, namespace: str) -> Iterator[None]:
    """A Training Operator reconciling `namespace` (created if need be) inside the block; not
    the cluster's first (that one serves the webhooks and is never stopped)."""
    core = kubernetes.client.CoreV1Api(cluster.admin)
    if not exists(lambda: core.read_namespace(namespace)):
        cluster.create_namespace(namespace)
    operator = start_training_operator(cluster, cluster.binaries.training_operator, namespace)
    try:
        yield
    finally:
        stop_training_operator(cluster, operator)


def _webhooks_served(port: int, paths: tuple[str, ...]) -> bool:
    context = unverified_loopback_context()
    for path in paths:
        url = f"https://127.0.0.1:{port}{path}"
        try:
            with urllib.request.urlopen(url, context=context, timeout=5):
                pass
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return False
        except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
            return False
    return True


KUEUE_NAMESPACE = "kueue-system"
KUEUE_INTEGRATIONS = ("batch/job", "kubeflow.org/pytorchjob")
# Kueue v0.17 stores these kinds as v1beta2 and serves v1beta1 (deprecated) through the
# conversion webhook its manifests patch into these CRDs (config/components/crd/kustomization).
# Its certificate rotator injects the webhook's CA into them and Kueue does not start before it
# has: a CRD without a conversion webhook keeps it waiting.
KUEUE_CONVERTED_CRDS = (
    "localqueues",
    "clusterqueues",
    "cohorts",
    "workloads",
    "multikueueclusters",
)


def start_kueue(cluster: KubeCluster, kueue: Path, managed_namespace: str) -> Component:
    """Kueue's manager with its PyTorchJob webhooks (defaulting: suspend a queued job;
    validating) for `managed_namespace`. Its internal certificate management is on, as
    installed, with the Secret pre-filled with certificates that also name 127.0.0.1 (the
    webhooks are reached by URL here, not through a Service)."""
    certs = make_certs("kueue-ca", f"kueue-webhook-service.{KUEUE_NAMESPACE}.svc")
    workdir = cluster.workdir / "kueue"
    certs.write(workdir / "certs")
    _create_namespace(cluster, KUEUE_NAMESPACE)
    _store_certs(cluster, KUEUE_NAMESPACE, "kueue-webhook-server-cert", certs)
    webhook_port, metrics_port, probe_port = free_port(), free_port(), free_port()
    config = workdir / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta2",
                "kind": "Configuration",
                "namespace": KUEUE_NAMESPACE,
                "health": {"healthProbeBindAddress": f"127.0.0.1:{probe_port}"},
                "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
                "webhook": {
                    "port": webhook_port,
                    "host": "127.0.0.1",
                    "certDir": str(workdir / "certs"),
                },
                "leaderElection": {"leaderElect": False},
                "integrations": {"frameworks": list(KUEUE_INTEGRATIONS)},
            }
        )
    )
    _register_kueue_webhooks(cluster, webhook_port, certs.ca_bundle, managed_namespace)
    convert_through_kueue(cluster, webhook_port)
    component = Component(
        "kueue",
        # Its visibility API server (pending workloads' positions, which distrun does not
        # read) authenticates through in-cluster delegation, which a process outside a pod
        # lacks.
        [str(kueue), f"--config={config}", "--feature-gates=VisibilityOnDemand=false"],
        cluster.workdir / "logs" / "kueue.log",
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig("admin"))},
    )
    cluster.components.append(component)
    component.start()
    component.wait_ready(
        lambda: http_ok(f"http://127.0.0.1:{probe_port}/readyz", None), READY_TIMEOUT
    )
    paths = ("/mutate-kubeflow-org-v1-pytorchjob", "/validate-kubeflow-org-v1-pytorchjob")
    component.wait_ready(lambda: _webhooks_served(webhook_port, paths), READY_TIMEOUT)
    return component


def convert_through_kueue(cluster: KubeCluster, port: int) -> None:
    """Kueue's conversion webhook in the CRDs of KUEUE_CONVERTED_CRDS, as its manifests install
    it, at 127.0.0.1:`port` (no Service here); no caBundle: Kueue's rotator injects it."""
    conversion = {
        "strategy": "Webhook",
        "webhook": {
            "clientConfig": {"url": f"https://127.0.0.1:{port}/convert"},
            "conversionReviewVersions": ["v1"],
        },
    }
    extensions = kubernetes.client.ApiextensionsV1Api(cluster.admin)
    for plural in KUEUE_CONVERTED_CRDS:
        extensions.patch_custom_resource_definition(
            f"{plural}.kueue.x-k8s.io", {"spec": {"conversion": conversion}}
        )


def _register_kueue_webhooks(
    cluster: KubeCluster, port: int, ca_bundle: str, namespace: str
) -> None:
    def webhook(kind: str, path: str, operations: list[str]) -> dict[str, Any]:
        return {
            "name": f"{kind}pytorchjob.kb.io",
            "clientConfig": {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": ca_bundle,
            },
            "rules": [
                {
                    "apiGroups": ["kubeflow.org"],
                    "apiVersions": ["v1"],
                    "operations": operations,
                    "resources": ["pytorchjobs"],
                }
            ],
            "namespaceSelector": {
                "matchLabels": {"kubernetes.io/metadata.name": namespace},
            },
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }

    admission = kubernetes.client.AdmissionregistrationV1Api(cluster.admin)
    admission.create_mutating_webhook_configuration(
        {
            "metadata": {"name": "kueue-mutating-webhook-configuration"},
            # Defaulting on CREATE only, as Kueue's manifests register it: on UPDATE it would
            # suspend again the job Kueue has just admitted.
            "webhooks": [webhook("m", "/mutate-kubeflow-org-v1-pytorchjob", ["CREATE"])],
        }
    )
    admission.create_validating_webhook_configuration(
        {
            "metadata": {"name": "kueue-validating-webhook-configuration"},
            "webhooks": [
                webhook("v", "/validate-kubeflow-org-v1-pytorchjob", ["CREATE", "UPDATE"])
            ],
        }
    )


def _register_webhooks(cluster: KubeCluster, port: int) -> None:
    """The operator's validating webhooks, reached by URL (there is no Service here); the
    rotator fills in their caBundle."""
    webhooks = [
        {
            "name": f"validator.{kind}.training-operator.kubeflow.org",
            "clientConfig": {
                "url": f"https://127.0.0.1:{port}/validate-kubeflow-org-v1-{kind}",
            },
            "rules": [
                {
                    "apiGroups": ["kubeflow.org"],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": [f"{kind}s"],
                }
            ],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
        }
        for kind in VALIDATED_KINDS
    ]
    body = {"metadata": {"name": WEBHOOK_CONFIGURATION}, "webhooks": webhooks}
    admission = kubernetes.client.AdmissionregistrationV1Api(cluster.admin)
    admission.create_validating_webhook_configuration(body)


def _store_certs(cluster: KubeCluster, namespace: str, secret: str, certs: Certs) -> None:
    core = kubernetes.client.CoreV1Api(cluster.admin)
    core.create_namespaced_secret(namespace, certs.secret(secret))


def _create_namespace(cluster: KubeCluster, name: str) -> None:
    core = kubernetes.client.CoreV1Api(cluster.admin)
    if not exists(lambda: core.read_namespace(name)):
        cluster.create_namespace(name)
    wait_for(lambda: exists(lambda: core.read_namespace(name)), f"namespace {name}")
