"""Certificates for the controllers' admission webhooks in the test tier: a CA and a serving
certificate for 127.0.0.1 (the webhooks are reached by URL, there are no Services) and for the
Service name a controller's certificate rotator checks, valid long enough that the rotator
keeps them instead of making its own."""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# The rotators renew certificates that expire within 90 days: make them outlive that.
CERT_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class Certs:
    """A CA and a serving certificate for 127.0.0.1 and `dns_name`, in PEM; RSA keys in PKCS#1,
    the only form the open-policy-agent/cert-controller rotators parse."""

    ca_cert: bytes
    ca_key: bytes
    tls_cert: bytes
    tls_key: bytes

    @property
    def ca_bundle(self) -> str:
        return base64.b64encode(self.ca_cert).decode()

    def write(self, directory: Path, ca: bool = False) -> Path:
        """`tls.crt` / `tls.key` (and `ca.crt`) in `directory`, as a mounted Secret holds them."""
        directory.mkdir(parents=True, exist_ok=True)
        files = {"tls.crt": self.tls_cert, "tls.key": self.tls_key}
        if ca:
            files["ca.crt"] = self.ca_cert
        for name, content in files.items():
            (directory / name).write_bytes(content)
        (directory / "tls.key").chmod(0o600)
        return directory

    def secret(self, name: str) -> dict[str, Any]:
        data = {
            "ca.crt": self.ca_cert,
            "ca.key": self.ca_key,
            "tls.crt": self.tls_cert,
            "tls.key": self.tls_key,
        }
        return {
            "metadata": {"name": name},
            "stringData": {key: value.decode() for key, value in data.items()},
        }


def make_certs(ca_name: str, dns_name: str) -> Certs:
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name)])
    ca_cert = (
        _certificate(ca_subject, ca_subject, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        # cert-controller verifies the CA against its CAName as a DNS name.
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(ca_name)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    tls_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    names = [x509.DNSName(dns_name), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, dns_name)])
    tls_cert = (
        _certificate(subject, ca_subject, tls_key.public_key(), now)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    return Certs(
        ca_cert.public_bytes(pem), _pkcs1(ca_key), tls_cert.public_bytes(pem), _pkcs1(tls_key)
    )


def _certificate(
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


def _pkcs1(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
