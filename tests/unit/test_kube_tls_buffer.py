"""A followed log's TLS connection reads into a small buffer (engines/kube/client.py's
bound_tls_buffer): over a real TLS connection on loopback, the body arrives whole through it."""

import datetime
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from distrun.engines.kube.client import LOG_STREAM_TLS_BUFFER, bound_tls_buffer

BODY = os.urandom(3 * 1024 * 1024)


def self_signed(directory: Path) -> ssl.SSLContext:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .sign(key, hashes.SHA256())
    )
    (directory / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (directory / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    return context


async def streamed(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    for start in range(0, len(BODY), 64 * 1024):
        await response.write(BODY[start : start + 64 * 1024])
    await response.write_eof()
    return response


@pytest.fixture
async def tls_url(tmp_path: Path) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/log", streamed)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=self_signed(tmp_path))
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"https://127.0.0.1:{port}/log"
    await runner.cleanup()


def tls_protocol(response: Any) -> Any:
    return response.connection.transport._ssl_protocol


async def test_a_streamed_responses_tls_buffer_is_made_small_and_the_body_arrives_whole(
    tls_url: str,
) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(tls_url, ssl=False) as response,
    ):
        protocol = tls_protocol(response)
        assert len(protocol._ssl_buffer) > LOG_STREAM_TLS_BUFFER  # asyncio's own: 256 KiB
        bound_tls_buffer(response, LOG_STREAM_TLS_BUFFER)
        assert len(protocol._ssl_buffer) == LOG_STREAM_TLS_BUFFER
        body = b"".join([chunk async for chunk in response.content.iter_any()])
        assert len(protocol._ssl_buffer) <= LOG_STREAM_TLS_BUFFER
    assert body == BODY
