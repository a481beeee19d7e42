"""A log stream opened before its job exists (server/stream_tickets.py), through a real
jupyter_server: the socket named by a ticket follows the job its owner submits with that
ticket, from its first line, and never another user's."""

import asyncio

import pytest
from tornado.httpclient import HTTPClientError

from distrun.server.stream_tickets import STREAM_TICKET_HEADER
from tests.fake_engine import FakeEngine
from tests.server.conftest import BOB
from tests.server.test_stream import SPEC, receive, receive_all, texts

TICKET = "t0ket-for-the-next-job-1"


async def test_a_stream_opened_before_the_submission_follows_its_job_from_the_first_line(
    api, jp_ws_fetch, fake_engine: FakeEngine, distrun_app
):
    ws = await jp_ws_fetch("distrun", "streams", TICKET)
    job = await api(
        "jobs", method="POST", body={"spec": SPEC}, headers={STREAM_TICKET_HEADER: TICKET}
    )
    first = await receive(ws)
    assert first is not None and first["type"] == "status"
    assert first["job"]["id"] == job["id"]
    fake_engine.emit(job["id"], "worker-0", "first")
    fake_engine.finish(job["id"])
    rest = await receive_all(ws)
    assert texts(rest) == ["first"]
    assert rest[-1] == {"type": "end"}
    assert ws.close_code == 1000
    assert len(distrun_app.stream_tickets) == 0  # used once, then forgotten


async def test_a_stream_opened_after_the_submission_answered_follows_its_job_too(
    api, jp_ws_fetch, fake_engine: FakeEngine
):
    job = await api(
        "jobs", method="POST", body={"spec": SPEC}, headers={STREAM_TICKET_HEADER: TICKET}
    )
    fake_engine.emit(job["id"], "worker-1", "before the socket")
    ws = await jp_ws_fetch("distrun", "streams", TICKET)
    fake_engine.finish(job["id"])
    messages = await receive_all(ws)
    assert [m["job"]["id"] for m in messages if m["type"] == "status"] == [job["id"]] * 2
    assert texts(messages) == ["before the socket"]
    assert ws.close_code == 1000


async def test_another_users_socket_with_the_same_ticket_gets_nothing_of_the_job(
    api, jp_ws_fetch, fake_engine: FakeEngine, distrun_app
):
    distrun_app.stream_tickets.seconds = 0.5
    bobs = await jp_ws_fetch("distrun", "streams", TICKET, headers=BOB)
    alices = await jp_ws_fetch("distrun", "streams", TICKET)
    job = await api(
        "jobs", method="POST", body={"spec": SPEC}, headers={STREAM_TICKET_HEADER: TICKET}
    )
    fake_engine.emit(job["id"], "worker-0", "alice's secret")
    messages = await receive_all(bobs)
    assert [m["type"] for m in messages] == ["error"]
    assert "no job of yours was submitted with stream ticket" in messages[0]["message"]
    assert job["id"] not in str(messages)
    assert bobs.close_code == 4404
    fake_engine.finish(job["id"])  # alice's own socket followed her job all along
    assert texts(await receive_all(alices)) == ["alice's secret"]


async def test_a_failed_submission_refuses_its_socket_at_once(api, jp_ws_fetch):
    ws = await jp_ws_fetch("distrun", "streams", TICKET)
    with pytest.raises(HTTPClientError) as refused:
        await api(
            "jobs",
            method="POST",
            body={"spec": {**SPEC, "framework": "no-such"}},
            headers={STREAM_TICKET_HEADER: TICKET},
        )
    assert refused.value.code == 400
    messages = await asyncio.wait_for(receive_all(ws), 5)  # not the ticket's 30 s
    assert [m["type"] for m in messages] == ["error"]
    assert ws.close_code == 4404


async def test_a_malformed_ticket_is_refused_in_words_and_submits_nothing(api, fake_engine):
    with pytest.raises(HTTPClientError) as refused:
        await api("jobs", method="POST", body={"spec": SPEC}, headers={STREAM_TICKET_HEADER: "a b"})
    assert refused.value.code == 400
    assert STREAM_TICKET_HEADER in refused.value.response.body.decode()
    assert await api("jobs") == {"jobs": []}
