"""Every distrun route rejects anonymous requests; the authorizer decides reads and writes."""

import json

import pytest
from tornado.httpclient import HTTPClientError

from tests.server.conftest import CAROL, ReadOnlyCarolAuthorizer, distrun_routes, handler_methods

EXPECTED_ROUTES = {
    "/distrun/engines",
    "/distrun/jobs",
    "/distrun/jobs/{job_id}",
    "/distrun/jobs/{job_id}/cancel",
    "/distrun/jobs/{job_id}/logs",
    "/distrun/jobs/{job_id}/logs/stream",
    "/distrun/jobs/{job_id}/usage",
    "/distrun/jobs/{job_id}/scalars",
    "/distrun/jobs/{job_id}/tensorboard",
    "/distrun/metrics",
    "/distrun/sweeps",
    "/distrun/sweeps/{sweep_id}",
    "/distrun/sweeps/{sweep_id}/cancel",
    "/distrun/streams/{ticket}",
}
SPEC = {"framework": "generic", "code": ""}


async def test_the_extension_registers_its_routes_under_the_base_url(jp_serverapp):
    assert set(distrun_routes(jp_serverapp)) == EXPECTED_ROUTES


@pytest.mark.parametrize("credentials", [{}, {"Authorization": "token wrong-token"}])
async def test_every_route_and_method_rejects_requests_without_a_valid_token(
    jp_serverapp, jp_fetch, http_server_client, fake_engine, credentials
):
    job = json.loads(
        (await jp_fetch("distrun", "jobs", method="POST", body=json.dumps({"spec": SPEC}))).body
    )
    checked = 0
    for template, handler in distrun_routes(jp_serverapp).items():
        path = (
            template.replace("{job_id}", job["id"])
            .replace("{sweep_id}", "sweep-abc123")
            .replace("{ticket}", "a-ticket-of-16-chars")
        )
        url = "/a%40b" + path
        for method in handler_methods(handler):
            body = "{}" if method in ("post", "put", "patch") else None
            response = await http_server_client.fetch(
                url, method=method.upper(), body=body, headers=credentials, raise_error=False
            )
            assert response.code in (401, 403), (method, url, response.code)
            assert b"Traceback" not in response.body
            checked += 1
    assert checked == 18
    assert fake_engine.job(job["id"]).state.value == "pending"  # the anonymous cancel did nothing


async def test_the_authorizer_is_asked_about_the_distrun_resource(jp_fetch):
    ReadOnlyCarolAuthorizer.decisions.clear()
    await jp_fetch("distrun", "jobs")
    await jp_fetch("distrun", "jobs", method="POST", body=json.dumps({"spec": SPEC}))
    assert ("alice", "read", "distrun") in ReadOnlyCarolAuthorizer.decisions
    assert ("alice", "write", "distrun") in ReadOnlyCarolAuthorizer.decisions


async def test_a_user_without_write_permission_can_list_but_not_submit(jp_fetch):
    listed = await jp_fetch("distrun", "jobs", headers=CAROL)
    assert json.loads(listed.body) == {"jobs": []}
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch(
            "distrun", "jobs", method="POST", body=json.dumps({"spec": SPEC}), headers=CAROL
        )
    assert caught.value.code == 403


async def test_a_websocket_without_a_token_is_refused(jp_ws_fetch, jp_fetch):
    job = json.loads(
        (await jp_fetch("distrun", "jobs", method="POST", body=json.dumps({"spec": SPEC}))).body
    )
    with pytest.raises(HTTPClientError) as caught:
        await jp_ws_fetch(
            "distrun", "jobs", job["id"], "logs", "stream", headers={"Authorization": ""}
        )
    assert caught.value.code == 403


async def test_cookie_authenticated_writes_need_the_xsrf_token(http_server_client, jp_auth_header):
    first = await http_server_client.fetch("/a%40b/distrun/jobs", headers=jp_auth_header)
    cookies = "; ".join(c.split(";")[0] for c in first.headers.get_list("Set-Cookie"))
    assert cookies
    read = await http_server_client.fetch("/a%40b/distrun/jobs", headers={"Cookie": cookies})
    assert read.code == 200
    write = await http_server_client.fetch(
        "/a%40b/distrun/jobs",
        method="POST",
        body=json.dumps({"spec": SPEC}),
        headers={"Cookie": cookies},
        raise_error=False,
    )
    assert write.code == 403
    assert b"'_xsrf' argument missing" in write.body
