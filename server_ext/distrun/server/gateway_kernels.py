"""Kernels through a gateway (Enterprise Gateway behind the identity front), without two faults
of jupyter_server's gateway client that users meet on their first notebook.

gateway_config/singleuser/jupyter_server_config.py names both classes:

- `GatewayKernelSessions`: jupyter_server's session manager hands a new kernel the server's
  whole environment, and the gateway kernel manager logs those arguments at INFO when the
  kernel starts: the hub's API token and the user's gateway token went to the server log.
  What reaches the gateway is unchanged (the gateway client builds the request from
  `os.environ`, filtered to `KERNEL_*` and `GatewayClient.allowed_envs`); only the copy that
  was logged goes.
- `GatewayKernelConnection`: JupyterLab opens a kernel's websocket offering a subprotocol;
  the gateway connection selects none, so Chromium drops it right after the handshake and
  JupyterLab reconnects at once with the same session id. jupyter_server cancelled the first
  connection's pending upstream connect, which drops the socket it brings without closing it,
  so the gateway held two websockets of one session, and Enterprise Gateway's "replace the
  stale connection" left the live one hanging: a new notebook's first cell never answered.
  Here a session's connections reach the gateway one at a time, in the order the client made
  them: a new one waits until the one it replaces has closed its upstream end, and a socket
  that arrives after its client left is closed at once.
"""

import asyncio
import contextlib
from typing import Any, ClassVar

from jupyter_server.gateway.connections import GatewayWebSocketConnection
from jupyter_server.gateway.managers import GatewaySessionManager
from tornado.concurrent import Future, chain_future

# What a kernel's start needs from the session besides the gateway client's own environment.
_SESSION_ENV = ("JPY_SESSION_NAME",)
# How long a new connection of a session waits for the one it replaces to close upstream.
REPLACED_CLOSE_SECONDS = 10.0


class GatewayKernelSessions(GatewaySessionManager):
    def get_kernel_env(self, path: Any, name: Any = None) -> dict[str, str]:
        env: dict[str, str] = super().get_kernel_env(path, name)
        return {key: env[key] for key in _SESSION_ENV if key in env}


class GatewayKernelConnection(GatewayWebSocketConnection):
    # kernel id:session id -> its newest connection, until that one's upstream end is closed
    _sessions: ClassVar[dict[str, "GatewayKernelConnection"]] = {}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.upstream_closed = asyncio.Event()

    @property
    def _session_key(self) -> str:
        return f"{self.kernel_id}:{self.session_id}"

    async def connect(self) -> None:
        key = self._session_key
        previous = self._sessions.get(key)
        self._sessions[key] = self
        if previous is None or previous is self:  # the first, or this one's own retry
            await super().connect()  # type: ignore[no-untyped-call]
            return
        previous.disconnect()
        waiting: Future[Any] = Future()
        self.ws_future = waiting  # the client's messages wait here meanwhile
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(previous.upstream_closed.wait(), REPLACED_CLOSE_SECONDS)
        await super().connect()  # type: ignore[no-untyped-call]
        chain_future(self.ws_future, waiting)

    def disconnect(self) -> None:  # type: ignore[override]  # upstream: sync, mistyped
        self.disconnected = True
        if self.ws is not None:
            self.ws.close()  # _read_messages sees the end and marks it
        elif self.ws_future is None or self.ws_future.done():
            self._mark_closed()
        # A pending connect is not cancelled (that would drop its socket, open):
        # _connection_done closes the socket it brings.

    def _connection_done(self, fut: Any) -> None:
        if fut.cancelled() or fut.exception() is not None:
            self._mark_closed()
        elif self.disconnected:
            asyncio.ensure_future(self._close_unread(fut.result()))
        super()._connection_done(fut)  # type: ignore[no-untyped-call]

    async def _close_unread(self, socket: Any) -> None:
        socket.close()
        while await socket.read_message() is not None:
            pass
        self._mark_closed()

    async def _read_messages(self) -> None:
        reading = self.ws is not None
        await super()._read_messages()  # type: ignore[no-untyped-call]
        if reading and self.disconnected:
            self._mark_closed()

    def _mark_closed(self) -> None:
        self.upstream_closed.set()
        if self._sessions.get(self._session_key) is self:
            del self._sessions[self._session_key]
