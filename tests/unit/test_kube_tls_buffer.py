"""The API server's TLS connections read into their event loop's one buffer (engines/kube/
client.py's share_tls_buffer), not one of 256 KiB each: over real TLS connections on loopback,
read at the same time, every body arrives whole through it."""

import asyncio
import asyncio.sslproto
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

from distrun.engines.kube.client import TLS_RECORD_READ, TLS_SLICE, share_tls_buffer

BODIES = [os.urandom(3 * 1024 * 1024), os.urandom(2 * 1024 * 1024 + 17)]


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
    body = BODIES[int(request.query["body"])]
    response = web.StreamResponse()
    await response.prepare(request)
    for start in range(0, len(body), 64 * 1024):
        await response.write(body[start : start + 64 * 1024])
        await asyncio.sleep(0)  # the two bodies' bytes interleave
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


async def test_tls_connections_read_into_one_buffer_and_every_body_arrives_whole(
    tls_url: str,
) -> None:
    async with aiohttp.ClientSession() as session:
        responses = [await session.get(f"{tls_url}?body={i}", ssl=False) for i in (0, 1)]
        protocols = [tls_protocol(response) for response in responses]
        owns = [protocol._ssl_buffer for protocol in protocols]
        assert owns[0] is not owns[1]  # asyncio's own: one each
        for response in responses:
            share_tls_buffer(response)
        shared = protocols[0]._ssl_buffer
        assert protocols[1]._ssl_buffer is shared and shared is not owns[0]
        assert len(shared) >= protocols[0].max_size  # asyncio's size: reads as large as before

        async def body(response: aiohttp.ClientResponse) -> bytes:
            async with response:
                return b"".join([chunk async for chunk in response.content.iter_any()])

        received = await asyncio.gather(*(body(response) for response in responses))
        assert all(protocol._ssl_buffer is shared for protocol in protocols)
    assert received == BODIES


async def test_a_large_read_reaches_the_tls_object_a_slice_at_a_time(
    tls_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # OpenSSL's in-memory input keeps the capacity of the largest write it took: handed a
    # 256 KiB read whole, every connection that once caught up holds 256 KiB+ for its life.
    whole = asyncio.sslproto.SSLProtocol.buffer_updated
    reads: list[int] = []
    written: list[int] = []

    def recorded(protocol: Any, nbytes: int) -> None:
        written.append(nbytes)
        whole(protocol, nbytes)

    monkeypatch.setattr(asyncio.sslproto.SSLProtocol, "buffer_updated", recorded)
    async with aiohttp.ClientSession() as session:
        response = await session.get(f"{tls_url}?body=0", ssl=False)
        share_tls_buffer(response)
        protocol = tls_protocol(response)
        sliced = protocol.buffer_updated
        protocol.buffer_updated = lambda nbytes: (reads.append(nbytes), sliced(nbytes))[1]
        written.clear()  # the response's head, read before it was shared
        async with response:
            body = b"".join([chunk async for chunk in response.content.iter_any()])
    assert body == BODIES[0]
    assert max(reads) > TLS_SLICE  # the socket is read in large reads still
    assert max(written) <= TLS_SLICE
    assert sum(written) == sum(reads)


async def test_the_plaintext_is_taken_a_record_at_most_at_a_time(
    tls_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # asyncio asks SSLObject.read for 256 KiB, and each call allocates that much (twice a
    # socket read): past glibc's mmap threshold, a map and an unmap for every line read.
    asked: list[int] = []
    client: list[ssl.SSLObject] = []  # not the server's end, in this process too
    read = ssl.SSLObject.read

    def recorded(self: ssl.SSLObject, size: int = 1024, buffer: Any = None) -> Any:
        if self in client:
            asked.append(size)
        return read(self, size, buffer)

    monkeypatch.setattr(ssl.SSLObject, "read", recorded)
    async with aiohttp.ClientSession() as session:
        response = await session.get(f"{tls_url}?body=1", ssl=False)
        client.append(tls_protocol(response)._sslobj)
        share_tls_buffer(response)
        async with response:
            body = b"".join([chunk async for chunk in response.content.iter_any()])
    assert body == BODIES[1]
    assert asked and max(asked) <= TLS_RECORD_READ
