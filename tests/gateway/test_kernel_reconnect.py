"""A kernel websocket opened again with the same session id answers, whichever way the first
one went: still open (a network blip), or dropped by the client while the server was still
connecting upstream (what Chromium does to JupyterLab's first kernel websocket when the
gateway connection selects no subprotocol; JupyterLab reconnects at once, same session id).
"""

import asyncio
import uuid

import pytest
from tornado import httpclient, websocket

from .conftest import KERNEL_NAME, SERVER_TOKEN, Gateways, execute, http, user_token

pytestmark = pytest.mark.integration

ALICE = user_token("alice")


def channels(base: str, kernel_id: str, session_id: str) -> str:
    return (
        f"{base.replace('http', 'ws', 1)}/api/kernels/{kernel_id}/channels?session_id={session_id}"
    )


async def open_channels(url: str, token: str) -> websocket.WebSocketClientConnection:
    headers = {"Authorization": f"token {token}"}
    request = httpclient.HTTPRequest(url, headers=headers, request_timeout=60)
    return await websocket.websocket_connect(request)


async def test_a_second_websocket_of_the_same_session_answers_while_the_first_is_open(
    gateways: Gateways,
) -> None:
    front = gateways.start("a").url
    status, kernel = http(f"{front}/api/kernels", "POST", {"name": KERNEL_NAME}, ALICE)
    assert status == 201, kernel
    session = uuid.uuid4().hex
    first = await open_channels(channels(front, kernel["id"], session), ALICE)

    stdout, errors = await execute(channels(front, kernel["id"], session), ALICE, "print(6 * 7)")

    assert (stdout, errors) == ("42\n", [])
    assert await first.read_message() is None  # the replaced connection was closed
    stdout, errors = await execute(channels(front, kernel["id"], session), ALICE, "print(7 * 6)")
    assert (stdout, errors) == ("42\n", [])


async def test_a_reconnect_after_a_dropped_first_websocket_answers_through_the_server(
    gateways: Gateways, notebook_server: object
) -> None:
    gateway = gateways.start("a")
    server = notebook_server(gateway, "alice")  # type: ignore[operator]
    status, kernel = http(server.url + "api/kernels", "POST", {"name": KERNEL_NAME}, SERVER_TOKEN)
    assert status == 201, kernel
    base = server.url.rstrip("/")
    for _ in range(5):
        session = uuid.uuid4().hex
        url = channels(base, kernel["id"], session)
        # The client leaves right after the handshake, before the server's upstream is up.
        dropped = await open_channels(url, SERVER_TOKEN)
        dropped.close()
        await asyncio.sleep(0)

        stdout, errors = await execute(url, SERVER_TOKEN, "print(6 * 7)")

        assert (stdout, errors) == ("42\n", [])
