"""A real jupyter_server with the distrun extension, its engine replaced by tests/fake_engine.py,
and two users: the server's token is alice's, BOB_TOKEN is bob's."""

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from jupyter_server.auth.identity import IdentityProvider, User

# The jp_* fixtures (pytest_plugins is only honoured in the rootdir's conftest).
from pytest_jupyter.jupyter_server import *
from tornado.httpclient import HTTPResponse
from tornado.web import RequestHandler

from distrun.app import DistrunApp
from tests.fake_engine import FakeEngine

BOB_TOKEN = "bob-secret-token"
BOB = {"Authorization": f"token {BOB_TOKEN}"}


@pytest.fixture
async def jp_asyncio_loop() -> asyncio.AbstractEventLoop:
    """pytest-jupyter's fixtures run on this loop; make it pytest-asyncio's, the one the async
    tests run on (pytest-jupyter's own loop would leave the server on a loop nobody runs)."""
    return asyncio.get_running_loop()


class TwoUserIdentityProvider(IdentityProvider):
    """Token auth with a name per token, so tests can be two different people."""

    async def get_user_token(self, handler: RequestHandler) -> User | None:
        token = self.get_token(handler)
        if token and token == self.token:
            return User("alice")
        if token == BOB_TOKEN:
            return User("bob")
        return None


@pytest.fixture
def fake_engine() -> FakeEngine:
    return FakeEngine("local")


@pytest.fixture
def jp_server_config(fake_engine: FakeEngine) -> dict[str, Any]:
    return {
        "ServerApp": {
            "jpserver_extensions": {"distrun": True},
            "identity_provider_class": TwoUserIdentityProvider,
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
