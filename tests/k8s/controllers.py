"""The real job controllers, run against the tier's API server the way an operator installs
them: their admission webhooks registered, their certificates in place, waited for until ready.

`start_training_operator` runs the Kubeflow Training Operator v1.9.4 (built from its Go module by
binaries.py) watching ONE namespace: the rest of the tier keeps creating the operators' pods
itself (operator_sim.py), and a cluster-wide operator would make a second set beside them.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import os
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.server_process import free_port

from .cluster import KubeCluster, exists, wait_for
from .processes import Component, http_ok, unverified_loopback_context

OPERATOR_NAMESPACE = "kubeflow"
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
WEBHOOK_SECRET = "training-operator-webhook-cert"
# What the operator's certificate rotator checks the stored certificates against.
CA_NAME = "training-operator-ca"
SERVICE_DNS_NAME = f"training-operator.{OPERATOR_NAMESPACE}.svc"
# The rotator renews certificates that expire within 90 days: make them outlive that.
CERT_VALIDITY = datetime.timedelta(days=365)
# The rotator only checks that a file exists here (upstream hard-codes the path); the webhook
# server reads its own copy under $TMPDIR.
HARD_CODED_CERT = Path("/tmp/k8s-webhook-server/serving-certs/tls.crt")
VALIDATED_KINDS = ("pytorchjob", "tfjob", "xgboostjob", "paddlejob", "jaxjob")  # MPI: none
READY_TIMEOUT = 120.0


@dataclass(frozen=True)
class WebhookCerts:
    ca_cert: bytes
    ca_key: bytes  # RSA, PKCS#1: the only form the rotator parses
    tls_cert: bytes
    tls_key: bytes


def webhook_certs(ca_name: str = CA_NAME, dns_name: str = SERVICE_DNS_NAME) -> WebhookCerts:
    """A CA and a serving certificate for 127.0.0.1 and `dns_name`, in the form a controller's
    certificate rotator (open-policy-agent/cert-controller) accepts and keeps."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca_cert = (
        _builder(ca_subject, ca_subject, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(ca_name)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    tls_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    names = [x509.DNSName(dns_name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_name)])
    tls_cert = (
        _builder(server_name, ca_subject, tls_key.public_key(), now)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return WebhookCerts(_pem(ca_cert), _pkcs1(ca_key), _pem(tls_cert), _pkcs1(tls_key))


def start_training_operator(
    cluster: KubeCluster, operator: Path, watched_namespace: str
) -> Component:
    """The Training Operator reconciling the jobs of `watched_namespace`, ready for jobs."""
    certs = webhook_certs()
    workdir = cluster.workdir / "training-operator"
    _write_serving_certs(workdir / "k8s-webhook-server" / "serving-certs", certs)
    if not HARD_CODED_CERT.exists():
        _write_serving_certs(HARD_CODED_CERT.parent, certs)
    _create_namespace(cluster, OPERATOR_NAMESPACE)
    _store_certs(cluster, OPERATOR_NAMESPACE, WEBHOOK_SECRET, certs)
    webhook_port, metrics_port, probe_port = free_port(), free_port(), free_port()
    _register_webhooks(cluster, webhook_port)
    environment = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig("admin")),
        "MY_POD_NAMESPACE": OPERATOR_NAMESPACE,
        "TMPDIR": str(workdir),
    }
    component = Component(
        "training-operator",
        [
            str(operator),
            f"--namespace={watched_namespace}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{probe_port}",
            f"--webhook-server-port={webhook_port}",
            "--leader-elect=false",
        ],
        cluster.workdir / "logs" / "training-operator.log",
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


def start_kueue(cluster: KubeCluster, kueue: Path, managed_namespace: str) -> Component:
    """Kueue's manager with its PyTorchJob webhooks (defaulting: suspend a queued job;
    validating) for `managed_namespace`. Its internal certificate management is on, as
    installed, with the Secret pre-filled with certificates that also name 127.0.0.1 (the
    webhooks are reached by URL here, not through a Service)."""
    certs = webhook_certs("kueue-ca", f"kueue-webhook-service.{KUEUE_NAMESPACE}.svc")
    workdir = cluster.workdir / "kueue"
    _write_serving_certs(workdir / "certs", certs)
    _create_namespace(cluster, KUEUE_NAMESPACE)
    _store_certs(cluster, KUEUE_NAMESPACE, "kueue-webhook-server-cert", certs)
    webhook_port, metrics_port, probe_port = free_port(), free_port(), free_port()
    config = workdir / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "config.kueue.x-k8s.io/v1beta1",
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
    _register_kueue_webhooks(cluster, webhook_port, certs.ca_cert, managed_namespace)
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


def _register_kueue_webhooks(
    cluster: KubeCluster, port: int, ca_bundle: bytes, namespace: str
) -> None:
    def webhook(kind: str, path: str, operations: list[str]) -> dict[str, Any]:
        return {
            "name": f"{kind}pytorchjob.kb.io",
            "clientConfig": {
                "url": f"https://127.0.0.1:{port}{path}",
                "caBundle": base64.b64encode(ca_bundle).decode(),
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


def _store_certs(cluster: KubeCluster, namespace: str, secret: str, certs: WebhookCerts) -> None:
    data = {
        "ca.crt": certs.ca_cert,
        "ca.key": certs.ca_key,
        "tls.crt": certs.tls_cert,
        "tls.key": certs.tls_key,
    }
    body = {
        "metadata": {"name": secret},
        "stringData": {name: value.decode() for name, value in data.items()},
    }
    kubernetes.client.CoreV1Api(cluster.admin).create_namespaced_secret(namespace, body)


def _create_namespace(cluster: KubeCluster, name: str) -> None:
    core = kubernetes.client.CoreV1Api(cluster.admin)
    if not exists(lambda: core.read_namespace(name)):
        cluster.create_namespace(name)
    wait_for(lambda: exists(lambda: core.read_namespace(name)), f"namespace {name}")


def _write_serving_certs(directory: Path, certs: WebhookCerts) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tls.crt").write_bytes(certs.tls_cert)
    (directory / "tls.key").write_bytes(certs.tls_key)
    (directory / "tls.key").chmod(0o600)


def _builder(
    subject: x509.Name, issuer: x509.Name, key: rsa.RSAPublicKey, now: datetime.datetime
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + CERT_VALIDITY)
    )


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pkcs1(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,  # "RSA PRIVATE KEY": PKCS#1
        serialization.NoEncryption(),
    )
