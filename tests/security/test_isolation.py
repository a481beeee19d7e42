"""One user never sees or touches another's jobs: bob, authenticated, gets for alice's job exactly
what he gets for a job that does not exist, on every endpoint, on every engine."""

import asyncio
import json
from typing import Any
from urllib.parse import quote

import pytest
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from tests.security.conftest import BASE, BOB, TIMEOUT, Api, Reply

RUNNING = "import time\nprint('alice-secret', flush=True)\nwhile True:\n    time.sleep(0.1)\n"
MISSING = "nosuch-abcde"
REST_CALLS = [
    ("GET", "jobs/{id}"),
    ("GET", "jobs/{id}/logs"),
    ("GET", "jobs/{id}/logs?format=json"),
    ("GET", "jobs/{id}/logs?tail=10&replica=worker-0"),
    ("GET", "jobs/{id}/logs?since=worker-0:0&format=json"),
    ("POST", "jobs/{id}/cancel"),
    ("DELETE", "jobs/{id}"),
]


@pytest.fixture
async def alices_job(api: Api) -> Any:
    job = await api.submit({"framework": "generic", "code": RUNNING})
    await api.wait_for_output(job["id"], "alice-secret")
    yield job
    await api.call("POST", f"jobs/{job['id']}/cancel", {})


def shape(reply: Reply, job_id: str) -> tuple[int, str, Any]:
    """What a client can tell from a reply, with the asked-for id blanked out."""
    body = json.loads(reply.body.decode().replace(job_id, "<id>"))
    return reply.code, reply.headers.get("Content-Type", ""), body


async def stream_as(port: int, job_id: str, headers: dict[str, str]) -> tuple[list[Any], Any]:
    url = f"ws://127.0.0.1:{port}{BASE}/distrun/jobs/{job_id}/logs/stream"
    ws = await websocket_connect(HTTPRequest(url, headers=headers, request_timeout=TIMEOUT))
    messages = []
    async with asyncio.timeout(TIMEOUT):
        while (message := await ws.read_message()) is not None:
            messages.append(json.loads(message))
    return messages, ws.close_code


async def test_bob_does_not_see_alices_job_in_any_listing(api: Api, alices_job: Any):
    for query in ("jobs", "jobs?engine=local"):
        listed = await api.call("GET", query, headers=BOB)
        assert listed.code == 200
        assert listed.json == {"jobs": []}
    assert [job["id"] for job in (await api.call("GET", "jobs")).json["jobs"]] == [alices_job["id"]]


@pytest.mark.parametrize(("method", "path"), REST_CALLS)
async def test_bob_gets_for_alices_job_exactly_what_a_missing_job_gets(
    api: Api, alices_job: Any, method: str, path: str
):
    job_id = alices_job["id"]
    body = {} if method == "POST" else None
    hers = await api.call(method, path.format(id=job_id), body, headers=BOB)
    missing = await api.call(method, path.format(id=MISSING), body, headers=BOB)
    assert hers.code == 404
    assert shape(hers, job_id) == shape(missing, MISSING)
    assert b"alice" not in hers.body
    # And nothing happened to it.
    job = (await api.call("GET", f"jobs/{job_id}")).json
    assert job["state"] == "running"
    assert "alice-secret" in await api.logs(job_id)


async def test_bob_cannot_stream_alices_logs(api: Api, alices_job: Any, jp_http_port: int):
    hers, her_code = await stream_as(jp_http_port, alices_job["id"], BOB)
    missing, missing_code = await stream_as(jp_http_port, MISSING, BOB)
    assert her_code == missing_code == 4404
    assert [m["type"] for m in hers] == ["error"]
    assert hers[0]["message"].replace(alices_job["id"], "<id>") == missing[0]["message"].replace(
        MISSING, "<id>"
    )
    # Alice, on the same server, does get her stream: the refusal is about bob.
    url = f"ws://127.0.0.1:{jp_http_port}{BASE}/distrun/jobs/{alices_job['id']}/logs/stream"
    ws = await websocket_connect(HTTPRequest(url, headers=api.alice, request_timeout=TIMEOUT))
    first = json.loads(await asyncio.wait_for(ws.read_message(), TIMEOUT))
    assert first["type"] == "status" and first["job"]["id"] == alices_job["id"]
    ws.close()


@pytest.mark.parametrize(
    "guess",
    [
        "{id}/",
        "{upper}",
        "{id}%0a",
        "..%2Fjobs%2F{id}",
        "{id}%2F..%2F{id}",
        "%2e%2e/{id}",
        "{id}%00",
        "./{id}",
    ],
)
async def test_ids_near_alices_never_reach_her_job(api: Api, alices_job: Any, guess: str):
    job_id = alices_job["id"]
    path = "jobs/" + guess.format(id=job_id, upper=job_id.upper())
    for method, suffix in (("GET", ""), ("GET", "/logs"), ("POST", "/cancel"), ("DELETE", "")):
        reply = await api.call(method, path + suffix, {} if method == "POST" else None, BOB)
        assert reply.code in (403, 404, 405), (method, path + suffix, reply.code)
        assert b"alice-secret" not in reply.body and b'"owner"' not in reply.body
    assert (await api.call("GET", f"jobs/{job_id}")).json["state"] == "running"


async def test_bobs_own_jobs_stay_his_and_alice_cannot_reach_them(api: Api, alices_job: Any):
    bobs = await api.submit({"framework": "generic", "code": "print('bob-secret')"}, BOB)
    assert bobs["owner"] == "bob"
    await api.finished(bobs["id"], BOB)
    assert "bob-secret" in await api.logs(bobs["id"], BOB)
    assert (await api.call("GET", f"jobs/{bobs['id']}/logs")).code == 404
    assert (await api.call("DELETE", f"jobs/{bobs['id']}")).code == 404
    listed = (await api.call("GET", "jobs", headers=BOB)).json["jobs"]
    assert [job["id"] for job in listed] == [bobs["id"]]
    assert quote(alices_job["id"]) not in json.dumps(listed)
