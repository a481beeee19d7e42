"""The identity front: the only way in to Enterprise Gateway, and the reason one user cannot
start, list or reach another user's kernels.

EG trusts whatever KERNEL_USERNAME a caller sends, and anyone holding its one shared token may
send any. The front sits in EG's pod (EG itself listens on loopback) and:

- authenticates every request with a per-user token (gateway_tokens.py) that the hub signs
  with a key only the hub and the front read and hands each user's server (see
  helm/jupyterhub-values.yaml), so a user can present their own name and nobody else's; tokens
  expire, and `python identity_front.py revoke USER` voids a user's tokens at once;
- OVERWRITES KERNEL_USERNAME (and KERNEL_NAMESPACE when a namespace policy is set) when a kernel
  starts, and drops every other KERNEL_* variable a client could use to steer the kernel pod
  (image, uid, volumes, service account);
- records who owns each kernel in the directory the replicas share, signed with its key (a
  record anyone else wrote there names nobody), lists only the caller's kernels and answers
  404 for anybody else's (so kernel ids leak nothing);
- revives the caller's kernels this replica does not know yet (after a rolling update) when
  they list them, so their notebook servers do not think the kernels were culled;
- answers unknown kernel names and upstream failures with a short JSON message, never EG's
  traceback, and exposes nothing but the kernel and kernelspec API (no swagger document).

Run it with the stdlib and tornado only (EG's image has both):

    python identity_front.py  # configured by DISTRUN_FRONT_* and EG_AUTH_TOKEN, see FrontConfig
    python identity_front.py revoke USER  # void every token USER holds now
"""

import asyncio
import hashlib
import hmac
import json
import logging
import os
import re
import signal
import socket
import sys
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlencode

from gateway_tokens import Verdict, verify
from gateway_tokens import revoke as revoke_tokens
from tornado import httpclient, web, websocket
from tornado.httputil import HTTPHeaders
from user_namespaces import user_namespace

log = logging.getLogger("distrun.identity_front")

NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
KERNEL_ID = r"(?P<kernel_id>[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
# KERNEL_* variables a client may still set; the front sets the identity ones itself.
CLIENT_KERNEL_VARS = frozenset({"KERNEL_WORKING_DIR", "KERNEL_LAUNCH_TIMEOUT"})
UPSTREAM_RESPONSE_HEADERS = ("Content-Type", "Location", "Cache-Control")


# --- tokens and namespaces ------------------------------------------------------------------


def kernel_namespace(policy: str, username: str) -> str | None:
    """The namespace a user's kernel pods run in: `policy` is "", a fixed namespace, or a
    template with `{username}`: the user's own namespace, named as the hub's profile hook names
    it (user_namespaces.py). None: no namespace can be formed."""
    if not policy:
        return None
    if "{username}" not in policy:
        return policy if NAMESPACE_RE.match(policy) else None
    try:
        return user_namespace(policy, username)
    except ValueError:
        return None


# --- configuration and ownership ------------------------------------------------------------


@dataclass(frozen=True)
class FrontConfig:
    upstream: str  # EG's base URL, e.g. http://127.0.0.1:8889
    upstream_token: str  # EG's own token; never leaves the pod
    key: bytes  # the HMAC key user tokens are signed with
    state_dir: Path  # shared by every replica: who owns which kernel
    revocations: Path  # shared by every replica: whose tokens are void since when
    namespace_policy: str = ""
    client_envs: frozenset[str] = field(default_factory=lambda: frozenset({"DISTRUN_URL"}))
    request_timeout: float = 120.0

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> "FrontConfig":
        env = dict(os.environ if environ is None else environ)
        key = env.get("DISTRUN_FRONT_KEY", "")
        if len(key) < 32:
            raise SystemExit("DISTRUN_FRONT_KEY must hold at least 32 characters of secret")
        names = env.get("DISTRUN_FRONT_CLIENT_ENVS", "DISTRUN_URL,DISTRUN_TOKEN")
        return cls(
            upstream=env.get("DISTRUN_FRONT_UPSTREAM", "http://127.0.0.1:8889").rstrip("/"),
            upstream_token=env["EG_AUTH_TOKEN"],
            key=key.encode(),
            state_dir=Path(env["DISTRUN_GATEWAY_STATE"]) / "owners",
            revocations=Path(env["DISTRUN_GATEWAY_STATE"]) / "revoked",
            namespace_policy=env.get("DISTRUN_FRONT_KERNEL_NAMESPACE", ""),
            client_envs=frozenset(n for n in names.split(",") if n),
        )


class OwnerStore:
    """kernel id -> owner, one small file per kernel in the directory all replicas share.

    Each record carries an HMAC of the kernel id and owner under the front's key: the shared
    volume is storage, not an authority, so a record written by anyone without the key (a pod
    that reached the volume) names no owner and its kernel is nobody's."""

    def __init__(self, directory: Path, key: bytes) -> None:
        self.directory = directory
        self.key = key
        directory.mkdir(parents=True, exist_ok=True)

    def record(self, kernel_id: str, owner: str) -> None:
        temporary = self.directory / f".{kernel_id}.{uuid.uuid4().hex}"
        temporary.write_text(f"{owner}\n{self._mac(kernel_id, owner)}")
        temporary.replace(self.directory / kernel_id)  # atomic: readers see all or nothing

    def owner(self, kernel_id: str) -> str | None:
        try:
            owner, _, mac = (self.directory / kernel_id).read_text().rpartition("\n")
        except (FileNotFoundError, UnicodeDecodeError):
            return None
        if not hmac.compare_digest(mac, self._mac(kernel_id, owner)):
            logging.getLogger("distrun.front").warning(
                "kernel %s: its owner record is not signed with this front's key; ignored",
                kernel_id,
            )
            return None
        return owner

    def _mac(self, kernel_id: str, owner: str) -> str:
        message = f"distrun-kernel-owner\0{kernel_id}\0{owner}".encode()
        return hmac.new(self.key, message, hashlib.sha256).hexdigest()

    def forget(self, kernel_id: str) -> None:
        (self.directory / kernel_id).unlink(missing_ok=True)

    def kernels_of(self, owner: str) -> list[str]:
        return [
            path.name
            for path in self.directory.iterdir()
            if not path.name.startswith(".") and self.owner(path.name) == owner
        ]


def authenticate(config: FrontConfig, headers: HTTPHeaders) -> Verdict:
    """Whom the request's `Authorization: token ...` (or `Bearer`) proves."""
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    if scheme.lower() not in ("token", "bearer"):
        return Verdict(None, "a valid distrun gateway token is required")
    return verify(config.key, token.strip(), config.revocations)


# --- handlers -------------------------------------------------------------------------------


class FrontHandler(web.RequestHandler):
    """Authenticates the caller; subclasses reach EG through `upstream()`."""

    config: FrontConfig
    owners: OwnerStore
    username: str

    def initialize(self, config: FrontConfig, owners: OwnerStore) -> None:
        self.config = config
        self.owners = owners

    def prepare(self) -> None:
        verdict = authenticate(self.config, self.request.headers)
        if verdict.username is None:
            raise web.HTTPError(401, reason=verdict.reason)
        self.username = verdict.username

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": self._reason}))

    def fail(self, status: int, message: str) -> NoReturn:
        raise web.HTTPError(status, reason=message)

    async def upstream(
        self, path: str, method: str = "GET", body: bytes | None = None
    ) -> httpclient.HTTPResponse:
        request = httpclient.HTTPRequest(
            self.config.upstream + path,
            method=method,
            body=body,
            headers={
                "Authorization": f"token {self.config.upstream_token}",
                "Content-Type": "application/json",
            },
            request_timeout=self.config.request_timeout,
            allow_nonstandard_methods=True,
        )
        try:
            return await httpclient.AsyncHTTPClient().fetch(request, raise_error=False)
        except (OSError, httpclient.HTTPClientError) as exc:
            log.error("gateway unreachable: %s", exc)
            raise web.HTTPError(502, reason="the kernel gateway is not reachable") from None

    def relay(self, response: httpclient.HTTPResponse) -> None:
        """Pass EG's answer on; an EG failure becomes a short message (its body is a traceback)."""
        if response.code >= 500:
            log.error("gateway answered %s: %s", response.code, (response.body or b"")[:2000])
            self.fail(502, f"the kernel gateway failed ({response.code}); see its log")
        self.set_status(response.code)
        for name in UPSTREAM_RESPONSE_HEADERS:
            if name in response.headers:
                self.set_header(name, response.headers[name])
        self.finish(None if response.code in (204, 304) else response.body or b"")

    async def check_owner(self, kernel_id: str) -> None:
        owner = await asyncio.to_thread(self.owners.owner, kernel_id)
        if owner != self.username:
            self.fail(404, f"no kernel {kernel_id}")


class PassThroughHandler(FrontHandler):
    """Read-only kernelspec and version endpoints, same for every user."""

    async def get(self, *args: str, **kwargs: str) -> None:
        self.relay(await self.upstream(self.request.uri or "/"))


class KernelsHandler(FrontHandler):
    async def get(self) -> None:
        """The caller's kernels, including those only another (or a former) replica knew."""
        listing = await self.upstream("/api/kernels")
        if listing.code != 200:
            return self.relay(listing)
        known = {model["id"]: model for model in json.loads(listing.body)}
        mine = await asyncio.to_thread(self.owners.kernels_of, self.username)
        models = []
        for kernel_id in mine:
            model = known.get(kernel_id) or await self._revive(kernel_id)
            if model is not None:
                models.append(model)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(models))

    async def _revive(self, kernel_id: str) -> dict[str, Any] | None:
        """EG revives a kernel from its persisted session when asked for it by id."""
        response = await self.upstream(f"/api/kernels/{kernel_id}")
        if response.code == 404:
            await asyncio.to_thread(self.owners.forget, kernel_id)  # gone for good
            return None
        if response.code != 200:
            return None  # keep the record; the next listing tries again
        model: dict[str, Any] = json.loads(response.body)
        return model

    async def post(self) -> None:
        request = self._start_request()
        names = await self.upstream("/api/kernelspecs")
        if names.code != 200:
            return self.relay(names)
        available = json.loads(names.body)["kernelspecs"]
        if request["name"] not in available:
            self.fail(
                404,
                f"no kernel named {request['name']!r}; available: {', '.join(sorted(available))}",
            )
        response = await self.upstream("/api/kernels", "POST", json.dumps(request).encode())
        if response.code == 201:
            kernel_id = json.loads(response.body)["id"]
            await asyncio.to_thread(self.owners.record, kernel_id, self.username)
            log.info("user %s started kernel %s (%s)", self.username, kernel_id, request["name"])
        self.relay(response)

    def _start_request(self) -> dict[str, Any]:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            self.fail(400, "the request body must be JSON")
        if not isinstance(body, dict) or not isinstance(body.get("env", {}), dict):
            self.fail(400, 'the request body must look like {"name": ..., "env": {...}}')
        name = body.get("name") or ""
        if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9._-]{1,64}$", name):
            self.fail(400, "name the kernel to start, e.g. python_distrun")
        env = {
            key: str(value)
            for key, value in body.get("env", {}).items()
            if key in CLIENT_KERNEL_VARS or key in self.config.client_envs
        }
        env["KERNEL_USERNAME"] = self.username
        if self.config.namespace_policy:
            namespace = kernel_namespace(self.config.namespace_policy, self.username)
            if namespace is None:
                self.fail(403, f"user name {self.username!r} cannot form a kernel namespace")
            env["KERNEL_NAMESPACE"] = str(namespace)
        return {"name": name, "env": env}


class KernelHandler(FrontHandler):
    async def get(self, kernel_id: str) -> None:
        await self.check_owner(kernel_id)
        self.relay(await self.upstream(f"/api/kernels/{kernel_id}"))

    async def delete(self, kernel_id: str) -> None:
        await self.check_owner(kernel_id)
        response = await self.upstream(f"/api/kernels/{kernel_id}", "DELETE")
        if response.code in (204, 404):
            await asyncio.to_thread(self.owners.forget, kernel_id)
        self.relay(response)


class KernelActionHandler(FrontHandler):
    async def post(self, kernel_id: str, action: str) -> None:
        await self.check_owner(kernel_id)
        self.relay(await self.upstream(f"/api/kernels/{kernel_id}/{action}", "POST", b"{}"))


class ChannelSessions:
    """At most one upstream websocket per kernel session at EG, ever.

    EG (jupyter_server 1) "replaces the stale connection" when a second websocket of the same
    kernel and session_id arrives while the first is open, and the second then hangs. Browsers
    reconnect with the same session_id at once (JupyterLab does after a refused subprotocol or
    a network blip), often before the first connection's close has reached EG. So a new
    connection of a session first retires the one it replaces: closes it both ways and waits
    until EG has closed its end (or `retire_timeout` passed), then connects.
    """

    retire_timeout = 10.0

    def __init__(self) -> None:
        self._holders: dict[str, ChannelsHandler] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def connect(
        self, key: str, handler: "ChannelsHandler"
    ) -> websocket.WebSocketClientConnection:
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            stale = self._holders.get(key)
            if stale is not None:
                log.info("session %s connected again: closing its previous websocket first", key)
                await stale.retire(self.retire_timeout)
            peer = await handler.connect_upstream()
            self._holders[key] = handler
            return peer

    def release(self, key: str, handler: "ChannelsHandler") -> None:
        """`handler`'s upstream end is closed: EG holds no websocket of the session now."""
        if self._holders.get(key) is handler:
            del self._holders[key]
        lock = self._locks.get(key)
        if key not in self._holders and lock is not None and not lock.locked():
            del self._locks[key]


class ChannelsHandler(websocket.WebSocketHandler):
    """The kernel's websocket, piped to EG's after the caller proved they own the kernel."""

    config: FrontConfig
    owners: OwnerStore
    sessions: ChannelSessions
    kernel_id: str

    def initialize(
        self, config: FrontConfig, owners: OwnerStore, sessions: ChannelSessions
    ) -> None:
        self.config = config
        self.owners = owners
        self.sessions = sessions
        self.peer: websocket.WebSocketClientConnection | None = None
        self.pump: asyncio.Task[None] | None = None
        self.session_key = ""
        self.session_id = ""
        self.upstream_closed = asyncio.Event()

    async def get(self, *args: str, **kwargs: str) -> None:
        verdict = authenticate(self.config, self.request.headers)
        username = verdict.username
        if username is None:
            return self._refuse(401, verdict.reason)
        self.kernel_id = kwargs["kernel_id"]
        if await asyncio.to_thread(self.owners.owner, self.kernel_id) != username:
            return self._refuse(404, f"no kernel {self.kernel_id}")
        session_id = self.get_query_argument("session_id", "") or uuid.uuid4().hex
        self.session_key = f"{self.kernel_id}:{session_id}"
        self.session_id = session_id
        try:
            self.peer = await self.sessions.connect(self.session_key, self)
        except (OSError, websocket.WebSocketError, httpclient.HTTPClientError) as exc:
            log.error("cannot open the gateway websocket of %s: %s", self.kernel_id, exc)
            return self._refuse(502, "the kernel gateway is not reachable")
        await super().get(*args, **kwargs)

    def _refuse(self, status: int, message: str) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.write(json.dumps({"message": message}))
        self.finish()

    async def connect_upstream(self) -> websocket.WebSocketClientConnection:
        # Each websocket is a session of its own at EG: EG 3.3.0 "restores" a reconnecting
        # session from the zmq streams it buffered for the closed websocket, and a restored
        # session never answered (a new notebook's first cell stayed [*]).
        path = (
            self.request.path
            + "?"
            + urlencode({"session_id": f"{self.session_id}.{uuid.uuid4().hex}"})
        )
        url = self.config.upstream.replace("http", "ws", 1) + path
        headers = HTTPHeaders({"Authorization": f"token {self.config.upstream_token}"})
        request = httpclient.HTTPRequest(url, headers=headers, request_timeout=30)
        peer = await websocket.websocket_connect(request)
        _nodelay(getattr(peer, "stream", None))
        return peer

    async def retire(self, timeout: float) -> None:
        """Closes this connection both ways; returns once EG closed its end (or `timeout`)."""
        assert self.peer is not None
        self.peer.close()
        if self.ws_connection is not None:
            self.close(1001, "replaced by a newer connection of the same session")
        try:
            await asyncio.wait_for(self._upstream_end(), timeout)
        except asyncio.TimeoutError:
            log.warning("EG did not close the replaced websocket of %s", self.session_key)
        self.sessions.release(self.session_key, self)

    async def _upstream_end(self) -> None:
        if self.pump is not None:
            await self.upstream_closed.wait()
            return
        assert self.peer is not None  # never opened downstream: nobody else reads EG's end
        while await self.peer.read_message() is not None:
            pass

    def open(self, *args: str, **kwargs: str) -> None:
        self.set_nodelay(True)
        self.pump = asyncio.ensure_future(self._pump_from_upstream())

    async def _pump_from_upstream(self) -> None:
        assert self.peer is not None
        while True:
            message = await self.peer.read_message()
            if message is None:
                break
            try:
                await self.write_message(message, binary=isinstance(message, bytes))
            except websocket.WebSocketClosedError:
                break
        self.upstream_closed.set()
        self.sessions.release(self.session_key, self)
        self.close()

    def on_message(self, message: str | bytes) -> Awaitable[None] | None:
        if self.peer is None:
            return None
        return self.peer.write_message(message, binary=isinstance(message, bytes))

    def on_close(self) -> None:
        if self.peer is not None:
            self.peer.close()  # the pump reads on to EG's close, then releases the session


class NotFoundHandler(web.RequestHandler):
    def prepare(self) -> None:
        self.set_status(404)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"message": "not found"}))


class HealthHandler(web.RequestHandler):
    def get(self) -> None:
        self.finish({"status": "ok"})


def _nodelay(stream: Any) -> None:
    sock = getattr(stream, "socket", None)
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def make_app(config: FrontConfig) -> web.Application:
    owners = OwnerStore(config.state_dir, config.key)
    context = {"config": config, "owners": owners}
    channels = {**context, "sessions": ChannelSessions()}
    return web.Application(
        [
            (r"/healthz", HealthHandler),
            (r"/api", PassThroughHandler, context),
            (r"/api/kernelspecs", PassThroughHandler, context),
            (r"/api/kernelspecs/[A-Za-z0-9._-]+", PassThroughHandler, context),
            (r"/kernelspecs/[A-Za-z0-9._-]+/[A-Za-z0-9._-]+", PassThroughHandler, context),
            (r"/api/kernels", KernelsHandler, context),
            (rf"/api/kernels/{KERNEL_ID}", KernelHandler, context),
            (
                rf"/api/kernels/{KERNEL_ID}/(?P<action>interrupt|restart)",
                KernelActionHandler,
                context,
            ),
            (rf"/api/kernels/{KERNEL_ID}/channels", ChannelsHandler, channels),
        ],
        default_handler_class=NotFoundHandler,
        websocket_ping_interval=30,
    )


async def serve(config: FrontConfig, address: str, port: int) -> None:
    server = make_app(config).listen(port, address, xheaders=False)
    log.info("identity front on %s:%d -> %s", address, port, config.upstream)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    await stop.wait()
    server.stop()
    await server.close_all_connections()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config = FrontConfig.from_environ()
    if sys.argv[1:2] == ["revoke"] and len(sys.argv) == 3:
        revoke_tokens(config.revocations, sys.argv[2])
        log.info("every gateway token of %s issued until now is void", sys.argv[2])
        return
    address = os.environ.get("DISTRUN_FRONT_IP", "127.0.0.1")  # the chart sets the pod's
    port = int(os.environ.get("DISTRUN_FRONT_PORT", "8888"))
    asyncio.run(serve(config, address, port))


if __name__ == "__main__":
    main()
