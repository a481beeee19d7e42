"""A real jupyter_server with the distrun extension and a real engine (the local engine: real
supervisor and replica processes), used by two people: the server's token is alice's, BOB's
token is bob's (tests/server/conftest.py's identity provider).

`engine_name` is parametrised, so each Kubernetes engine joins these tests by adding its name
and its server configuration to ENGINE_CONFIGS.
"""

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# The jp_* fixtures (pytest_plugins is only honoured in the rootdir's conftest).
from pytest_jupyter.jupyter_server import *
from tornado.httpclient import AsyncHTTPClient, HTTPResponse

from tests.conftest import kill_every_job
from tests.server.conftest import (  # noqa: F401 (fixtures)
    BOB,
    TokenPerUserIdentityProvider,
    jp_asyncio_loop,
    jp_server_cleanup,
)
from tests.server_process import ServerProcess

TIMEOUT = 60
BASE = "/a%40b"  # pytest-jupyter's base URL: a non-trivial one, as behind JupyterHub


def local_engine_config(state_dir: Path) -> dict[str, Any]:
    """A server alice, bob and carol share, with the local engine on for them: the setting of
    one team that trusts each other (test_shared_server.py: off by default). What these tests
    check holds at the API either way: nobody reaches another's jobs through the server."""
    return {
        "local_engine_on_shared_server": True,
        "state_dir": str(state_dir),
        "engines": {
            "local": {"class": "distrun.engines.local.LocalEngine", "kwargs": {"grace_seconds": 1}}
        },
        "default_engine": "local",
    }


ENGINE_CONFIGS: dict[str, Callable[[Path], dict[str, Any]]] = {"local": local_engine_config}


@contextmanager
def server_process(workdir: Path, **distrun: Any) -> Iterator[ServerProcess]:
    """A real server of its own process (for tests that measure its memory or hammer it, and
    must not share a process or an event loop with pytest), stopped afterwards with every job
    it left running."""
    server = ServerProcess(workdir, config={"DistrunApp": distrun})
    try:
        yield server.start()
    finally:
        server.stop()
        kill_every_job(server.state_dir)


@pytest.fixture(params=sorted(ENGINE_CONFIGS))
def engine_name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def distrun_limits() -> dict[str, int]:
    """DistrunApp limit traits for the test server; override in a module to tighten them."""
    return {}


@pytest.fixture
def state_dir(tmp_path: Path) -> AsyncIterator[Path]:
    path = tmp_path / "state"
    yield path
    kill_every_job(path)


@pytest.fixture
def jp_server_config(
    engine_name: str, state_dir: Path, distrun_limits: dict[str, int]
) -> dict[str, Any]:
    return {
        "ServerApp": {
            "jpserver_extensions": {"distrun": True},
            "identity_provider_class": TokenPerUserIdentityProvider,
        },
        "DistrunApp": {**ENGINE_CONFIGS[engine_name](state_dir), **distrun_limits},
    }


@dataclass
class Reply:
    code: int
    body: bytes
    headers: Any

    @property
    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


class Api:
    """Requests to the real server as alice (the default) or with any other headers."""

    def __init__(self, client: AsyncHTTPClient, port: int, alice: dict[str, str]) -> None:
        self.client, self.port, self.alice = client, port, alice

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{BASE}/distrun/{path.lstrip('/')}"

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        raw: bytes | None = None,
    ) -> Reply:
        data = raw if raw is not None else None if body is None else json.dumps(body).encode()
        if data is None and method in ("POST", "PUT", "PATCH"):
            data = b""
        response: HTTPResponse = await self.client.fetch(
            self.url(path),
            method=method,
            body=data,
            headers=self.alice if headers is None else headers,
            raise_error=False,
            allow_nonstandard_methods=True,
            request_timeout=TIMEOUT,
        )
        return Reply(response.code, response.body or b"", response.headers)

    async def submit(self, spec: dict[str, Any], headers: dict[str, str] | None = None) -> Any:
        reply = await self.call("POST", "jobs", {"spec": spec}, headers)
        assert reply.code == 201, reply.body
        return reply.json

    async def wait_until(
        self, job_id: str, done: Callable[[dict[str, Any]], bool], headers: dict[str, str] | None
    ) -> dict[str, Any]:
        async with asyncio.timeout(TIMEOUT):
            while True:
                reply = await self.call("GET", f"jobs/{job_id}", headers=headers)
                assert reply.code == 200, reply.body
                if done(reply.json):
                    return dict(reply.json)
                await asyncio.sleep(0.1)

    async def finished(self, job_id: str, headers: dict[str, str] | None = None) -> Any:
        return await self.wait_until(job_id, lambda job: job["state"] in TERMINAL, headers)

    async def logs(self, job_id: str, headers: dict[str, str] | None = None) -> str:
        reply = await self.call("GET", f"jobs/{job_id}/logs?prefix=0", headers=headers)
        assert reply.code == 200, reply.body
        return reply.body.decode()

    async def wait_for_output(self, job_id: str, text: str) -> None:
        async with asyncio.timeout(TIMEOUT):
            while text not in await self.logs(job_id):
                await asyncio.sleep(0.1)


TERMINAL = ("succeeded", "failed", "cancelled")


@pytest.fixture
async def api(
    http_server_client: Any, jp_http_port: int, jp_auth_header: dict[str, str]
) -> AsyncIterator[Api]:
    """(`http_server_client` is what makes pytest-jupyter's server listen.)"""
    client = AsyncHTTPClient(force_instance=True)
    yield Api(client, jp_http_port, jp_auth_header)
    client.close()
