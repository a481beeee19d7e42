"""The log websocket through a real jupyter_server with an in-memory engine."""

import asyncio
import json
import weakref
from collections.abc import Callable
from typing import Any

from tornado.websocket import WebSocketClientConnection

from distrun.client.log_resume import rows_of_runs
from distrun.core.job import JobState
from distrun.core.logs import LineRun
from distrun.server.log_stream import FRAME_MAX_BYTES, FRAME_MAX_LINES, frames
from tests.fake_engine import FakeEngine
from tests.reliability.helpers import gc_disabled
from tests.server.conftest import BOB

SPEC = {"framework": "generic", "code": "", "roles": {"worker": {"replicas": 2}}}
TIMEOUT = 30


class _AnyTime:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, float)


ANY_TIME = _AnyTime()


class _AnyMillis:
    def __eq__(self, other: object) -> bool:
        return isinstance(other, int)


ANY_MILLIS = _AnyMillis()


async def submit(api: Any) -> str:
    job = await api("jobs", method="POST", body={"spec": SPEC})
    return str(job["id"])


async def receive(ws: WebSocketClientConnection) -> dict[str, Any] | None:
    message = await asyncio.wait_for(ws.read_message(), TIMEOUT)
    return None if message is None else json.loads(message)


async def receive_all(ws: WebSocketClientConnection) -> list[dict[str, Any]]:
    """Every message until the server closes the connection."""
    messages = []
    while (message := await receive(ws)) is not None:
        messages.append(message)
    return messages


def rows(messages: list[dict[str, Any]]) -> list[list[Any]]:
    """The lines of the `runs` messages, as `[replica, seq, time, text]` rows."""
    return rows_of_runs([run for m in messages if m["type"] == "runs" for run in m["runs"]])


def texts(messages: list[dict[str, Any]]) -> list[str]:
    return [row[3] for row in rows(messages)]


async def eventually(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(TIMEOUT):
        while not condition():
            await asyncio.sleep(0.01)


async def open_stream(
    api: Any, jp_ws_fetch: Any, distrun_app: Any
) -> tuple[WebSocketClientConnection, Any]:
    """A stream of a new job, open past its first status, and the server's handler of it."""
    job_id = await submit(api)
    ws = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
    assert (await receive(ws) or {})["type"] == "status"
    [handler] = distrun_app.streams.values()
    return ws, handler


async def test_stream_sends_status_lines_as_they_come_then_end_and_closes_1000(
    api, jp_ws_fetch, fake_engine: FakeEngine
):
    job_id = await submit(api)
    fake_engine.emit(job_id, "worker-0", "before connect")
    ws = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
    first = await receive(ws)
    assert first is not None
    assert first["type"] == "status"
    assert first["job"]["id"] == job_id
    assert first["job"]["state"] == "pending"
    assert await receive(ws) == {
        "type": "runs",
        "runs": [
            {"replica": "worker-0", "seq": 0, "times_ms": [ANY_MILLIS], "texts": ["before connect"]}
        ],
    }

    fake_engine.set_state(job_id, JobState.RUNNING)
    running = await receive(ws)
    assert running is not None
    assert running["type"] == "status"
    assert running["job"]["state"] == "running"
    fake_engine.emit(job_id, "worker-1", "live")
    assert texts([await receive(ws) or {}]) == ["live"]

    fake_engine.emit(job_id, "worker-0", "last words")
    fake_engine.finish(job_id)
    rest = await receive_all(ws)
    assert texts(rest) == ["last words"]
    assert [m["job"]["state"] for m in rest if m["type"] == "status"] == ["succeeded"]
    assert rest[-1] == {"type": "end"}
    assert ws.close_code == 1000


async def test_reconnecting_with_since_resumes_without_loss_or_repeat(
    api, jp_ws_fetch, fake_engine: FakeEngine
):
    job_id = await submit(api)
    fake_engine.set_state(job_id, JobState.RUNNING)
    fake_engine.emit(job_id, "worker-0", "a0", "a1", "a2")
    fake_engine.emit(job_id, "worker-1", "b0")
    ws = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
    received: list[list[Any]] = []
    while len(received) < 4:
        message = await receive(ws)
        assert message is not None
        received += rows([message])
    ws.close()

    fake_engine.emit(job_id, "worker-0", "a3")
    fake_engine.emit(job_id, "worker-1", "b1", "b2")
    fake_engine.finish(job_id)
    last_seq: dict[str, int] = {}
    for replica, seq, _, _ in received:
        last_seq[replica] = seq
    since = ",".join(f"{replica}:{seq + 1}" for replica, seq in last_seq.items())
    ws = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream", params={"since": since})
    resumed = await receive_all(ws)
    assert [line[3] for line in received] + texts(resumed) == [
        "a0",
        "a1",
        "a2",
        "b0",
        "a3",
        "b1",
        "b2",
    ]
    assert ws.close_code == 1000


async def test_replica_filter_streams_only_those_replicas(api, jp_ws_fetch, fake_engine):
    job_id = await submit(api)
    fake_engine.emit(job_id, "worker-0", "zero")
    fake_engine.emit(job_id, "worker-1", "one")
    fake_engine.finish(job_id)
    ws = await jp_ws_fetch(
        "distrun", "jobs", job_id, "logs", "stream", params={"replica": "worker-1"}
    )
    messages = await receive_all(ws)
    assert texts(messages) == ["one"]
    assert messages[-1] == {"type": "end"}


async def test_many_lines_are_coalesced_into_bounded_frames(api, jp_ws_fetch, fake_engine):
    job_id = await submit(api)
    fake_engine.emit(job_id, "worker-0", *[f"line {i}" for i in range(10_000)])
    fake_engine.finish(job_id)
    ws = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
    messages = await receive_all(ws)
    line_frames = [m for m in messages if m["type"] == "runs"]
    assert texts(messages) == [f"line {i}" for i in range(10_000)]
    assert len(line_frames) == 5
    assert all(len(rows([m])) == FRAME_MAX_LINES for m in line_frames)


async def test_permessage_deflate_is_offered_only_where_configured_and_loses_nothing(
    api, jp_ws_fetch, fake_engine, distrun_app
):
    job_id = await submit(api)
    fake_engine.emit(job_id, "worker-0", *[f"line {i} ünï" for i in range(3_000)])
    fake_engine.finish(job_id)
    for configured in (False, True):
        distrun_app.log_stream_compression = configured
        ws = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream", compression_options={})
        extensions = ws.headers.get("Sec-WebSocket-Extensions", "")
        assert ("permessage-deflate" in extensions) is configured
        messages = await receive_all(ws)
        assert texts(messages) == [f"line {i} ünï" for i in range(3_000)]
        assert messages[-1] == {"type": "end"}


async def test_unknown_job_gets_an_error_then_close_4404(api, jp_ws_fetch):
    ws = await jp_ws_fetch("distrun", "jobs", "nope-00000", "logs", "stream")
    assert await receive_all(ws) == [{"type": "error", "message": "no job 'nope-00000'"}]
    assert ws.close_code == 4404


async def test_another_users_job_gets_close_4404(api, jp_ws_fetch):
    job_id = await submit(api)
    ws = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream", headers=BOB)
    messages = await receive_all(ws)
    assert [m["type"] for m in messages] == ["error"]
    assert ws.close_code == 4404


async def test_malformed_since_gets_an_error_then_close_4400(api, jp_ws_fetch):
    job_id = await submit(api)
    ws = await jp_ws_fetch(
        "distrun", "jobs", job_id, "logs", "stream", params={"since": "worker-0:ten"}
    )
    messages = await receive_all(ws)
    assert messages[0]["type"] == "error"
    assert messages[0]["field"] == "since"
    assert "worker-0:ten" in messages[0]["message"]
    assert ws.close_code == 4400


async def test_unknown_replica_gets_close_4400(api, jp_ws_fetch):
    job_id = await submit(api)
    ws = await jp_ws_fetch(
        "distrun", "jobs", job_id, "logs", "stream", params={"replica": "worker-9"}
    )
    messages = await receive_all(ws)
    assert "has no replica worker-9" in messages[0]["message"]
    assert ws.close_code == 4400


async def test_client_disconnect_stops_the_follower_and_its_task(
    api, jp_ws_fetch, fake_engine: FakeEngine, distrun_app
):
    job_id = await submit(api)
    ws = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
    assert (await receive(ws) or {})["type"] == "status"
    await eventually(lambda: fake_engine.active_followers == 1)
    assert len(distrun_app.streams) == 1
    ws.close()
    await eventually(lambda: fake_engine.active_followers == 0 and not distrun_app.streams)


async def test_a_closed_streams_ping_timer_stops_at_once_and_lets_go_of_the_handler(
    api, jp_ws_fetch, fake_engine: FakeEngine, distrun_app
):
    ws, handler = await open_stream(api, jp_ws_fetch, distrun_app)
    ping = handler.ping_callback
    assert ping is not None and ping.is_running()
    ws.close()
    await eventually(lambda: not distrun_app.streams)
    # jupyter_server would stop it at the next ping, 30 s later, and keep it (a cycle).
    assert not ping.is_running()
    assert handler.ping_callback is None


async def test_a_closed_streams_handler_is_freed_at_once_without_the_garbage_collector(
    api, jp_ws_fetch, fake_engine: FakeEngine, distrun_app
):
    ws, handler = await open_stream(api, jp_ws_fetch, distrun_app)
    handler_gone = weakref.ref(handler)
    del handler
    with gc_disabled():  # no cycle may keep it, nor any timer
        ws.close()
        await eventually(lambda: handler_gone() is None)


async def test_stream_socket_has_tcp_nodelay(api, jp_ws_fetch, distrun_app):
    ws, handler = await open_stream(api, jp_ws_fetch, distrun_app)
    assert handler.socket_nodelay() is True
    ws.close()


async def test_server_stop_closes_open_streams_and_the_engines(
    api, jp_ws_fetch, fake_engine: FakeEngine, distrun_app
):
    job_id = await submit(api)
    ws = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
    assert (await receive(ws) or {})["type"] == "status"
    await distrun_app.stop_extension()
    assert not distrun_app.streams
    assert fake_engine.active_followers == 0
    assert fake_engine.closed


def run(texts: list[str], replica: str = "worker-0", first_seq: int = 0) -> LineRun:
    return LineRun(replica, first_seq, [1000] * len(texts), texts)


def frame_lines(frame: list[LineRun]) -> list[tuple[str, int, str]]:
    return [(line.replica, line.seq, line.text) for r in frame for line in r.lines()]


def test_frames_cut_at_the_line_limit_and_a_cut_run_goes_on_in_the_next():
    result = frames([run(["x"] * (2 * FRAME_MAX_LINES + 1), first_seq=5)])
    assert [sum(map(len, frame)) for frame in result] == [FRAME_MAX_LINES, FRAME_MAX_LINES, 1]
    seqs = [seq for frame in result for _, seq, _ in frame_lines(frame)]
    assert seqs == list(range(5, 5 + 2 * FRAME_MAX_LINES + 1))


def test_frames_cut_near_the_byte_limit_and_give_a_huge_line_its_own_frame():
    big, huge = "y" * (FRAME_MAX_BYTES // 3), "z" * (2 * FRAME_MAX_BYTES)
    result = frames([run([big, big, big, huge, "after"])])
    assert [sum(map(len, frame)) for frame in result] == [2, 1, 1, 1]
    assert frame_lines(result[2]) == [("worker-0", 3, huge)]


def test_small_runs_of_several_replicas_share_a_frame():
    runs = [run(["a0", "a1"], "worker-0"), run(["b7"], "worker-1", 7), run(["c0"], "worker-2")]
    assert frames(runs) == [runs]


def test_frames_of_nothing_is_no_frame():
    assert frames([]) == []


async def test_a_client_that_stops_reading_holds_back_only_its_own_follower(
    api, jp_ws_fetch, fake_engine: FakeEngine, distrun_app
):
    job_id = await submit(api)
    stalled = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
    await eventually(lambda: fake_engine.active_followers == 1)
    count = 30_000  # 30 MB: more than the loopback socket buffers hold
    fake_engine.emit(job_id, "worker-0", *[f"{i:08d}" + "x" * 1000 for i in range(count)])
    fake_engine.finish(job_id)
    reader = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
    received = len(rows(await receive_all(reader)))
    assert received == count
    # The stalled client's follower waits on its socket instead of reading ahead into memory.
    assert fake_engine.lines_followed[0] < count
    assert len(distrun_app.streams) == 1
    stalled.close()
    await eventually(lambda: fake_engine.active_followers == 0 and not distrun_app.streams)


async def test_an_unfinished_line_goes_out_as_a_partial_message_that_is_no_line(
    api, jp_ws_fetch, fake_engine: FakeEngine
):
    job_id = await submit(api)
    ws = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
    assert (await receive(ws) or {})["type"] == "status"
    fake_engine.emit(job_id, "worker-0", "before")
    assert texts([await receive(ws) or {}]) == ["before"]
    fake_engine.set_partial(job_id, "worker-0", "Epoch 1:  50%|#####")
    assert await receive(ws) == {
        "type": "partial",
        "lines": [["worker-0", 1, ANY_TIME, "Epoch 1:  50%|#####"]],
    }
    fake_engine.emit(job_id, "worker-0", "Epoch 1: 100%|##########")
    fake_engine.set_partial(job_id, "worker-0", "")
    fake_engine.finish(job_id)
    rest = await receive_all(ws)
    assert texts(rest) == ["Epoch 1: 100%|##########"]
    assert ws.close_code == 1000


async def test_streams_beyond_the_per_user_limit_close_4429_and_others_are_not_counted(
    api, jp_ws_fetch, distrun_app
):
    distrun_app.max_streams_per_user = 2
    job_id = await submit(api)
    held = []
    for _ in range(2):
        ws = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
        assert (await receive(ws) or {})["type"] == "status"
        held.append(ws)
    third = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
    [error] = await receive_all(third)
    assert "you have 2 log streams open" in error["message"]
    assert third.close_code == 4429
    bobs_job = str((await api("jobs", method="POST", body={"spec": SPEC}, headers=BOB))["id"])
    bobs = await jp_ws_fetch("distrun", "jobs", bobs_job, "logs", "stream", headers=BOB)
    assert (await receive(bobs) or {})["type"] == "status"  # alice's streams are not bob's
    held[0].close()
    await eventually(lambda: distrun_app.streams_of("alice") == 1)
    again = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
    assert (await receive(again) or {})["type"] == "status"
    for ws in [held[1], bobs, again]:
        ws.close()


async def test_a_viewer_that_left_gives_its_place_back_before_its_follower_has_let_go(
    api, jp_ws_fetch, distrun_app, fake_engine: FakeEngine
):
    """The Kubernetes soak of 2026-11-26: 150 viewers left, 150 came, and 129 of them were
    refused, because a stream counted until its follower had let go of its feed (watches,
    anchors: API calls on a loaded server), not until its client had gone."""
    distrun_app.max_streams_per_user = 2
    fake_engine.followers_let_go = asyncio.Event()
    job_id = await submit(api)
    first = []
    for _ in range(2):
        ws = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
        assert (await receive(ws) or {})["type"] == "status"
        first.append(ws)
    handlers = list(distrun_app.streams.values())
    for ws in first:
        ws.close()
    await eventually(lambda: all(handler.ws_connection is None for handler in handlers))
    assert fake_engine.active_followers == 2, "still letting go"
    second = []
    for _ in range(2):
        ws = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
        message = await receive(ws) or {}
        assert message["type"] == "status", message
        second.append(ws)
    third = await jp_ws_fetch("distrun", "jobs", job_id, "logs", "stream")
    [error] = await receive_all(third)
    assert "you have 2 log streams open" in error["message"], "the open ones still count"
    fake_engine.followers_let_go.set()
    for ws in second:
        ws.close()
    await eventually(lambda: fake_engine.active_followers == 0 and not distrun_app.streams)
