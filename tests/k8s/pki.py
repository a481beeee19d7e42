"""Certificates and keys for a loopback-only test cluster: one CA, one serving certificate (used
by kube-apiserver, by kwok's kubelet endpoint and by metrics-server), the front proxy's client
certificate (kube-apiserver's aggregation layer) and the service-account signing key."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

SERVING_DNS_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "metrics-server.kube-system.svc",  # the name the aggregator checks (metrics_server.py)
)
FRONT_PROXY_CLIENT = "front-proxy-client"  # kube-apiserver's --requestheader-allowed-names
VALIDITY = datetime.timedelta(days=7)


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    serving_cert: Path
    serving_key: Path
    service_account_key: Path  # private, signs tokens (apiserver, controller-manager)
    service_account_public_key: Path  # verifies them (apiserver)
    proxy_client_cert: Path  # kube-apiserver's, to the aggregated API servers it proxies to
    proxy_client_key: Path


def write_pki(directory: Path, service_ip: str) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "distrun-test-ca")])
    ca_cert = (
        certificate_builder(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    serving_key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(name) for name in SERVING_DNS_NAMES]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ("127.0.0.1", service_ip)]
    serving_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")])
    serving_cert = (
        certificate_builder(serving_name, ca_name, serving_key.public_key(), now)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    proxy_client_key = ec.generate_private_key(ec.SECP256R1())
    proxy_client_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, FRONT_PROXY_CLIENT)])
    proxy_client_cert = (
        certificate_builder(proxy_client_name, ca_name, proxy_client_key.public_key(), now)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )

    service_account_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)

    pki = Pki(
        ca_cert=directory / "ca.crt",
        serving_cert=directory / "serving.crt",
        serving_key=directory / "serving.key",
        service_account_key=directory / "service-account.key",
        service_account_public_key=directory / "service-account.pub",
        proxy_client_cert=directory / "front-proxy-client.crt",
        proxy_client_key=directory / "front-proxy-client.key",
    )
    pki.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    pki.serving_cert.write_bytes(serving_cert.public_bytes(serialization.Encoding.PEM))
    pki.serving_key.write_bytes(private_pem(serving_key))
    pki.service_account_key.write_bytes(private_pem(service_account_key))
    pki.proxy_client_cert.write_bytes(proxy_client_cert.public_bytes(serialization.Encoding.PEM))
    pki.proxy_client_key.write_bytes(private_pem(proxy_client_key))
    pki.service_account_public_key.write_bytes(
        service_account_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    for key in (pki.serving_key, pki.service_account_key, pki.proxy_client_key):
        key.chmod(0o600)
    return pki


def certificate_builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    now: datetime.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
    )


def private_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
