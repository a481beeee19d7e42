"""Cross-site requests: a page on another site can make a logged-in browser send its cookies,
but not read them. So every state-changing call made with the login cookie needs the `_xsrf`
token, and the log websocket refuses a foreign Origin (cross-site websocket hijacking)."""

import asyncio
import json
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError, HTTPRequest
from tornado.websocket import websocket_connect

from tests.security.conftest import BASE, TIMEOUT, Api
from tests.server.conftest import distrun_routes, handler_methods

RUNNING = "import time\nprint('started', flush=True)\nwhile True:\n    time.sleep(0.1)\n"
STATE_CHANGING = ("post", "put", "patch", "delete")
FOREIGN = "http://evil.example.com"


@pytest.fixture
async def browser(api: Api) -> dict[str, str]:
    """alice's login cookie and `_xsrf` cookie, as her browser holds them after it loaded the
    server's page with her token."""
    page = await api.client.fetch(
        f"http://127.0.0.1:{api.port}{BASE}/", headers=api.alice, follow_redirects=False
    )
    cookies = dict(
        cookie.split(";")[0].split("=", 1) for cookie in page.headers.get_list("Set-Cookie")
    )
    assert "_xsrf" in cookies and len(cookies) >= 2, cookies
    return cookies


def cookie_header(cookies: dict[str, str]) -> str:
    return "; ".join(f"{name}={value}" for name, value in cookies.items())


def state_changing_calls(serverapp: Any, job_id: str) -> list[tuple[str, str]]:
    """(METHOD, path) of every state-changing method of every registered distrun route."""
    calls = []
    for template, handler in distrun_routes(serverapp).items():
        path = template.removeprefix("/distrun/").replace("{job_id}", job_id)
        calls += [(m.upper(), path) for m in sorted(handler_methods(handler) & set(STATE_CHANGING))]
    return calls


async def test_every_state_changing_call_with_the_cookie_alone_is_refused(
    api: Api, jp_serverapp: Any, browser: dict[str, str]
):
    job = await api.submit({"framework": "generic", "code": RUNNING})
    calls = state_changing_calls(jp_serverapp, job["id"])
    assert {method for method, _ in calls} == {"POST", "DELETE"}
    cookie = {"Cookie": cookie_header(browser)}
    forged = {**cookie, "X-XSRFToken": "2|00000000|" + "0" * 32 + "|1700000000"}
    for method, path in calls:
        for headers in (cookie, forged):
            reply = await api.call(method, path, {"spec": _spec()}, headers=headers)
            assert reply.code == 403, (method, path, reply.code)
            assert b"XSRF" in reply.body.upper()
    assert (await api.call("GET", f"jobs/{job['id']}")).json["state"] in ("pending", "running")
    assert len((await api.call("GET", "jobs")).json["jobs"]) == 1  # the POSTs created nothing
    await api.call("POST", f"jobs/{job['id']}/cancel", {})


async def test_the_same_calls_with_the_xsrf_token_succeed(api: Api, browser: dict[str, str]):
    """The refusals above are about the token, not about the cookie."""
    headers = {"Cookie": cookie_header(browser), "X-XSRFToken": browser["_xsrf"]}
    submitted = await api.call("POST", "jobs", {"spec": _spec()}, headers=headers)
    assert submitted.code == 201, submitted.body
    job_id = submitted.json["id"]
    cancelled = await api.call("POST", f"jobs/{job_id}/cancel", {}, headers=headers)
    assert cancelled.code == 200 and cancelled.json["state"] == "cancelled"
    assert (await api.call("DELETE", f"jobs/{job_id}", headers=headers)).code == 204


async def test_a_cookie_read_from_a_foreign_origin_is_refused(api: Api, browser: dict[str, str]):
    headers = {"Cookie": cookie_header(browser), "Origin": FOREIGN}
    assert (await api.call("GET", "jobs", headers=headers)).code == 404


async def test_the_log_websocket_refuses_a_foreign_origin_and_accepts_its_own(
    api: Api, jp_http_port: int, browser: dict[str, str]
):
    job = await api.submit({"framework": "generic", "code": RUNNING})
    await api.wait_for_output(job["id"], "started")
    url = f"ws://127.0.0.1:{jp_http_port}{BASE}/distrun/jobs/{job['id']}/logs/stream"
    cookie = cookie_header(browser)
    for origin in (FOREIGN, f"http://127.0.0.1:{jp_http_port}.evil.example.com", "null"):
        request = HTTPRequest(url, headers={"Cookie": cookie, "Origin": origin})
        with pytest.raises(HTTPClientError) as caught:
            await websocket_connect(request)
        assert caught.value.code == 403, origin
    own = HTTPRequest(url, headers={"Cookie": cookie, "Origin": f"http://127.0.0.1:{jp_http_port}"})
    ws = await websocket_connect(own)
    first = json.loads(await asyncio.wait_for(ws.read_message(), TIMEOUT))
    assert first["type"] == "status" and first["job"]["id"] == job["id"]
    ws.close()
    await api.call("POST", f"jobs/{job['id']}/cancel", {})


def _spec() -> dict[str, Any]:
    return {"framework": "generic", "code": RUNNING}
