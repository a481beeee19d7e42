"""A real jupyter_server with the distrun extension, its engine replaced by tests/fake_engine.py,
and several users: the server's token is alice's, BOB_TOKEN is bob's, CAROL_TOKEN is carol's
(who may read but not write)."""

import asyncio
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest
from jupyter_server.auth import Authorizer
from jupyter_server.auth.identity import IdentityProvider, User
from jupyter_server.serverapp import ServerApp
from jupyter_server.utils import url_path_join
from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse

# The jp_* fixtures (pytest_plugins is only honoured in the rootdir's conftest).
from pytest_jupyter.jupyter_server import *
from tornado.escape import url_escape
from tornado.httpclient import HTTPRequest, HTTPResponse
from tornado.web import RequestHandler
from tornado.websocket import WebSocketClientConnection, websocket_connect

from distrun.core.stream_versions import STREAM_PROTOCOLS
from distrun.server.app import DistrunApp
from tests.fake_engine import FakeEngine

OPENAPI_DOCUMENT = Path(__file__).parents[2] / "server_ext" / "distrun" / "server" / "openapi.yaml"
BOB_TOKEN = "bob-secret-token"
BOB = {"Authorization": f"token {BOB_TOKEN}"}
CAROL_TOKEN = "carol-read-only-token"
CAROL = {"Authorization": f"token {CAROL_TOKEN}"}


@pytest.fixture
async def jp_asyncio_loop() -> asyncio.AbstractEventLoop:
    """pytest-jupyter's fixtures run on this loop; make it pytest-asyncio's, the one the async
    tests run on (pytest-jupyter's own loop would leave the server on a loop nobody runs)."""
    return asyncio.get_running_loop()


@pytest.fixture(autouse=True)
async def jp_server_cleanup() -> AsyncIterator[None]:
    """Stop the server (and so the extension) after a test that started one, and only then."""
    yield
    if ServerApp.initialized():
        await ServerApp.instance()._cleanup()
        ServerApp.clear_instance()


class TokenPerUserIdentityProvider(IdentityProvider):
    """Token auth with a name per token, so tests can be two different people."""

    async def get_user_token(self, handler: RequestHandler) -> User | None:
        token = self.get_token(handler)
        if token and token == self.token:
            return User("alice")
        if token == BOB_TOKEN:
            return User("bob")
        if token == CAROL_TOKEN:
            return User("carol")
        return None


class ReadOnlyCarolAuthorizer(Authorizer):
    """Carol may read but not write; every decision is recorded for the tests."""

    decisions: ClassVar[list[tuple[str, str, str]]] = []

    def is_authorized(
        self, handler: RequestHandler, user: User, action: str, resource: str
    ) -> bool:
        self.decisions.append((user.username, action, resource))
        return not (user.username == "carol" and action == "write")


@pytest.fixture
def fake_engine() -> FakeEngine:
    return FakeEngine("local")


@pytest.fixture
def jp_server_config(fake_engine: FakeEngine) -> dict[str, Any]:
    return {
        "ServerApp": {
            "jpserver_extensions": {"distrun": True},
            "identity_provider_class": TokenPerUserIdentityProvider,
            "authorizer_class": ReadOnlyCarolAuthorizer,
        },
        "DistrunApp": {"engine_factories": {"local": lambda app: fake_engine}},
    }


@pytest.fixture
def distrun_app(jp_serverapp: Any) -> DistrunApp:
    app: DistrunApp = next(iter(jp_serverapp.extension_manager.extension_apps["distrun"]))
    return app


Fetch = Callable[..., Awaitable[HTTPResponse]]


@pytest.fixture
def api(jp_fetch: Fetch) -> Callable[..., Awaitable[Any]]:
    """A JSON call to the distrun API as alice (pass headers=BOB for bob)."""

    async def call(*path: str, method: str = "GET", body: Any = None, **kwargs: Any) -> Any:
        if body is not None:
            kwargs["body"] = json.dumps(body)
        response = await jp_fetch("distrun", *path, method=method, **kwargs)
        return json.loads(response.body) if response.body else None

    return call


def distrun_routes(serverapp: Any) -> dict[str, type[RequestHandler]]:
    """The server's registered distrun routes as path templates ("/distrun/jobs/{job_id}")."""
    base = serverapp.base_url.rstrip("/")
    routes: dict[str, type[RequestHandler]] = {}
    for pattern, handler in _rules(serverapp.web_app.default_router):
        path = pattern.rstrip("$")
        if path.startswith(f"{base}/distrun"):
            routes[re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", path[len(base) :])] = handler
    return routes


def _rules(router: Any) -> list[tuple[str, Any]]:
    found = []
    for rule in router.rules:
        if hasattr(rule.target, "rules"):
            found += _rules(rule.target)
        elif getattr(rule.matcher, "regex", None) is not None:
            found.append((rule.matcher.regex.pattern, rule.target))
    return found


def handler_methods(handler: type[RequestHandler]) -> set[str]:
    """The HTTP methods a handler implements itself (not RequestHandler's 405 defaults)."""
    return {
        method
        for method in ("get", "post", "put", "patch", "delete")
        if getattr(handler, method) is not getattr(RequestHandler, method)
    }


@pytest.fixture
def checked(http_server_client, jp_auth_header):
    """A request to the real server whose request and response are validated against the
    document; returns (status, body)."""
    openapi = OpenAPI.from_file_path(str(OPENAPI_DOCUMENT))

    async def call(
        method: str, path: str, body: Any = None, *, valid_request: bool = True
    ) -> tuple[int, Any]:
        data = None if body is None else body if isinstance(body, bytes) else json.dumps(body)
        response = await http_server_client.fetch(
            "/a%40b" + path,
            method=method,
            body=data,
            headers=jp_auth_header,
            raise_error=False,
            allow_nonstandard_methods=True,
        )
        url = urlsplit(path)
        request = MockRequest(
            "http://localhost",
            method,
            url.path,
            args=parse_qsl(url.query),
            headers=jp_auth_header,
            data=data.encode() if isinstance(data, str) else data,
        )
        if valid_request:
            openapi.validate_request(request)
        content_type = response.headers.get("Content-Type", "")
        openapi.validate_response(
            request,
            MockResponse(
                response.body,
                status_code=response.code,
                headers=dict(response.headers),
                content_type=content_type,
            ),
        )
        if content_type.startswith("application/json") and response.body:
            return response.code, json.loads(response.body)
        return response.code, response.body.decode()

    return call


@pytest.fixture
def jp_ws_fetch(
    jp_serverapp: Any, jp_auth_header: dict[str, str], jp_http_port: int, jp_base_url: str
) -> Callable[..., Awaitable[WebSocketClientConnection]]:
    """Opens a websocket to the test server (as pytest-jupyter's does), offering the log
    stream's versions as current clients do (a client that offers none gets version 1:
    core/stream_versions.py); `subprotocols=[]` offers none."""

    def connect(
        *parts: str, headers: dict[str, str] | None = None, params: Any = None, **kwargs: Any
    ) -> Awaitable[WebSocketClientConnection]:
        path = url_path_join(jp_base_url, url_escape(url_path_join(*parts), plus=False))
        query = f"?{urlencode(params)}" if params else ""
        request = HTTPRequest(
            f"ws://localhost:{jp_http_port}{path}{query}",
            headers={**jp_auth_header, **(headers or {})},
            connect_timeout=120,
        )
        kwargs.setdefault("subprotocols", list(STREAM_PROTOCOLS))
        return websocket_connect(request, **kwargs)

    return connect
