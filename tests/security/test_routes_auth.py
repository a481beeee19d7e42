"""Nobody anonymous gets in: every registered distrun route (read from the server's router, not
from a list in this file) refuses every HTTP method without valid credentials, and a route
added later without authentication makes the check fail."""

from typing import Any

import pytest
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from tests.security.conftest import BASE, Api
from tests.server.conftest import distrun_routes, handler_methods

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
BAD_CREDENTIALS = {
    "none": {},
    "wrong token": {"Authorization": "token not-the-token"},
    "bearer scheme": {"Authorization": "Bearer not-the-token"},
    "empty token": {"Authorization": "token "},
    "forged cookie": {"Cookie": "username-127-0-0-1-8888=alice; _xsrf=x"},
}
RUNNING = "import time\nprint('secret output', flush=True)\nwhile True:\n    time.sleep(0.1)\n"


async def anonymous_holes(
    api: Api, serverapp: Any, job_id: str, credentials: dict[str, str]
) -> list[str]:
    """Every (method, route) that does not refuse these credentials, with what it answered."""
    holes = []
    for template, handler in distrun_routes(serverapp).items():
        path = (
            template.removeprefix("/distrun/")
            .replace("{job_id}", job_id)
            .replace("{ticket}", "a-ticket-of-16-chars")
        )
        implemented = {method.upper() for method in handler_methods(handler)}
        for method in METHODS:
            reply = await api.call(method, path, headers=credentials)
            refused = reply.code in (401, 403)
            if method not in implemented:
                # Not a method of ours: 405, or jupyter_server's CORS preflight, which says nothing.
                preflight = method == "OPTIONS" and reply.code in (200, 204) and not reply.body
                refused |= reply.code == 405 or preflight
            leaks = any(word in reply.body for word in (b"secret output", b"Traceback"))
            if not refused or leaks:
                holes.append(f"{method} {template} -> {reply.code} {reply.body[:80]!r}")
    return holes


@pytest.fixture
async def running_job(api: Api) -> Any:
    job = await api.submit({"framework": "generic", "code": RUNNING})
    await api.wait_for_output(job["id"], "secret output")
    yield job
    await api.call("POST", f"jobs/{job['id']}/cancel", {})


async def test_the_router_holds_every_distrun_route(jp_serverapp):
    """The enumeration the other tests rely on finds the routes (so it cannot pass vacuously)."""
    routes = distrun_routes(jp_serverapp)
    assert len(routes) >= 6
    assert "/distrun/jobs/{job_id}/logs/stream" in routes


@pytest.mark.parametrize("credentials", BAD_CREDENTIALS.values(), ids=BAD_CREDENTIALS.keys())
async def test_every_route_refuses_every_method_without_valid_credentials(
    api: Api, jp_serverapp: Any, running_job: Any, credentials: dict[str, str]
):
    assert await anonymous_holes(api, jp_serverapp, running_job["id"], credentials) == []
    # Nothing the refused requests asked for happened: the job runs, no job was added.
    assert (await api.call("GET", f"jobs/{running_job['id']}")).json["state"] == "running"
    assert [job["id"] for job in (await api.call("GET", "jobs")).json["jobs"]] == [
        running_job["id"]
    ]


@pytest.mark.parametrize("credentials", BAD_CREDENTIALS.values(), ids=BAD_CREDENTIALS.keys())
async def test_the_log_websocket_refuses_a_handshake_without_valid_credentials(
    jp_http_port: int, running_job: Any, credentials: dict[str, str]
):
    url = f"ws://127.0.0.1:{jp_http_port}{BASE}/distrun/jobs/{running_job['id']}/logs/stream"
    with pytest.raises(HTTPClientError) as caught:
        await websocket_connect(HTTPRequest(url, headers=credentials, request_timeout=30))
    assert caught.value.code in (401, 403)


async def test_a_route_added_without_authentication_is_caught(
    api: Api, jp_serverapp: Any, jp_base_url: str
):
    class LeakyHandler(APIHandler):
        async def get(self) -> None:  # no @web.authenticated: the mistake to catch
            self.finish({"jobs": []})

    jp_serverapp.web_app.add_handlers(
        ".*$", [(url_path_join(jp_base_url, "distrun", "leaky"), LeakyHandler)]
    )
    holes = await anonymous_holes(api, jp_serverapp, "no-such-job", {})
    assert holes == ["GET /distrun/leaky -> 200 b'{\"jobs\": []}'"]
