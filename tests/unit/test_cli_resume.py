"""The websocket log stream resumes after a disconnect: nothing lost, nothing repeated."""

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from distrun.client.base import ClientError, LinesEvent, PartialEvent, StatusEvent
from distrun.client.log_resume import (
    MessageStream,
    RetryPolicy,
    StreamDisconnected,
    resumable_stream,
    rows_of_runs,
)
from distrun.client.server_client import error_from_response
from distrun.core.errors import Conflict, EngineError, Forbidden, LimitExceeded, NotFound, SpecError
from distrun.core.logs import Cursor


class FakeStream:
    """One connection: a list of messages, then a close with `code`."""

    def __init__(self, messages: list[dict[str, Any]], code: int | None) -> None:
        self.messages = [json.dumps(m) for m in messages]
        self.close_code = code
        self.closed = False

    async def read(self) -> str | None:
        return self.messages.pop(0) if self.messages else None

    def close(self) -> None:
        self.closed = True


class FakeServer:
    """Hands out scripted connections and records the cursor of every (re)connect."""

    def __init__(self, script: list[FakeStream | Exception]) -> None:
        self.script = script
        self.cursors: list[Cursor] = []
        self.opened: list[FakeStream] = []

    async def open(self, cursor: Cursor) -> MessageStream:
        self.cursors.append(cursor)
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        self.opened.append(step)
        return step


def lines(replica: str, *seqs: int) -> dict[str, Any]:
    runs = [
        {
            "replica": replica,
            "seq": s,
            "times_ms": [1000 + 1000 * s],
            "texts": [f"{replica} line {s}"],
        }
        for s in seqs
    ]
    return {"type": "runs", "runs": runs}


STATUS = {"type": "status", "job": {"id": "j-abcde", "state": "running"}}
END = {"type": "end"}
delays: list[float] = []


async def no_sleep(seconds: float) -> None:
    delays.append(seconds)


async def collect(events: AsyncIterator[Any]) -> list[Any]:
    return [event async for event in events]


def seen(events: list[Any]) -> list[tuple[str, int]]:
    return [
        (line.replica, line.seq) for e in events if isinstance(e, LinesEvent) for line in e.lines
    ]


async def test_reconnects_with_since_after_the_last_seq_and_drops_repeats() -> None:
    server = FakeServer(
        [
            FakeStream([STATUS, lines("worker-0", 0, 1), lines("worker-1", 0)], code=1006),
            # the server resends worker-0:1 after the reconnect; the client must drop it
            FakeStream([STATUS, lines("worker-0", 1, 2), lines("worker-1", 1), END], code=1000),
        ]
    )
    events = await collect(resumable_stream(server.open, "j-abcde", sleep=no_sleep))
    assert server.cursors == [{}, {"worker-0": 2, "worker-1": 1}]
    assert seen(events) == [("worker-0", 0), ("worker-0", 1), ("worker-1", 0), ("worker-0", 2),
                            ("worker-1", 1)]  # fmt: skip
    assert sum(isinstance(e, StatusEvent) for e in events) == 2
    assert all(stream.closed for stream in server.opened)


async def test_unfinished_lines_pass_through_and_never_move_the_cursor() -> None:
    partial = {
        "type": "partial",
        "lines": [["worker-0", 1, 2.0, "a bar 50%"], ["worker-0", 0, 2.0, "already finished"]],
    }
    server = FakeServer(
        [
            FakeStream([lines("worker-0", 0), partial], code=1006),
            FakeStream([lines("worker-0", 1), END], code=1000),
        ]
    )
    events = await collect(resumable_stream(server.open, "j", sleep=no_sleep))
    assert server.cursors == [{}, {"worker-0": 1}]  # the unfinished line did not count
    [shown] = [e for e in events if isinstance(e, PartialEvent)]
    assert [(line.seq, line.text) for line in shown.lines] == [(1, "a bar 50%")]
    assert seen(events) == [("worker-0", 0), ("worker-0", 1)]


async def test_resume_starts_from_the_given_since() -> None:
    server = FakeServer([FakeStream([lines("worker-0", 4, 5), END], code=1000)])
    events = await collect(
        resumable_stream(server.open, "j", since={"worker-0": 5}, sleep=no_sleep)
    )
    assert server.cursors == [{"worker-0": 5}]
    assert seen(events) == [("worker-0", 5)]


async def test_a_clean_close_without_end_is_a_disconnect_and_resumes() -> None:
    server = FakeServer(
        [FakeStream([lines("worker-0", 0)], code=1000), FakeStream([END], code=1000)]
    )
    events = await collect(resumable_stream(server.open, "j", sleep=no_sleep))
    assert seen(events) == [("worker-0", 0)]
    assert server.cursors == [{}, {"worker-0": 1}]


async def test_refused_connections_are_retried_with_growing_backoff() -> None:
    delays.clear()
    server = FakeServer(
        [StreamDisconnected("refused"), StreamDisconnected("refused"), FakeStream([END], 1000)]
    )
    policy = RetryPolicy(attempts=5, first_delay=0.5, max_delay=0.75)
    assert await collect(resumable_stream(server.open, "j", policy=policy, sleep=no_sleep)) == []
    assert delays == [0.5, 0.75]


async def test_gives_up_with_a_clear_error_after_the_retries() -> None:
    server = FakeServer([StreamDisconnected("connection refused")] * 3)
    policy = RetryPolicy(attempts=3)
    with pytest.raises(ClientError, match=r"lost the log stream of job j after 3 attempts "
                       r"\(connection refused\); is the server still running\?"):  # fmt: skip
        await collect(resumable_stream(server.open, "j", policy=policy, sleep=no_sleep))
    assert len(server.cursors) == 3


async def test_progress_resets_the_retry_budget() -> None:
    # Each connection delivers a line before dropping: that is progress, never "giving up".
    script: list[FakeStream | Exception] = [
        FakeStream([lines("worker-0", i)], code=1006) for i in range(5)
    ]
    script.append(FakeStream([END], code=1000))
    server = FakeServer(script)
    events = await collect(
        resumable_stream(server.open, "j", policy=RetryPolicy(attempts=2), sleep=no_sleep)
    )
    assert seen(events) == [("worker-0", i) for i in range(5)]


async def test_an_error_message_with_4404_is_not_found_and_not_retried() -> None:
    server = FakeServer(
        [FakeStream([{"type": "error", "message": "no job j"}], code=4404), StreamDisconnected("")]
    )
    with pytest.raises(NotFound, match="no job j"):
        await collect(resumable_stream(server.open, "j", sleep=no_sleep))
    assert len(server.cursors) == 1


async def test_an_error_message_with_4400_is_a_spec_error() -> None:
    server = FakeServer([FakeStream([{"type": "error", "message": "bad since"}], code=4400)])
    with pytest.raises(SpecError, match="bad since"):
        await collect(resumable_stream(server.open, "j", sleep=no_sleep))


async def test_a_message_that_is_not_json_is_a_clear_error() -> None:
    stream = FakeStream([], code=None)
    stream.messages = ["<html>"]
    with pytest.raises(ClientError, match="not JSON"):
        await collect(resumable_stream(FakeServer([stream]).open, "j", sleep=no_sleep))


@pytest.mark.parametrize(
    ("status", "error_type"),
    [(403, Forbidden), (404, NotFound), (409, Conflict), (413, LimitExceeded), (502, EngineError),
     (500, ClientError), (401, ClientError)],
)  # fmt: skip
def test_http_errors_map_to_domain_errors(status: int, error_type: type[Exception]) -> None:
    error = error_from_response(status, b'{"message": "what went wrong"}', "GET x")
    assert isinstance(error, error_type)
    if status != 401:
        assert str(error) == "what went wrong"


def test_a_400_keeps_the_line_and_field_and_says_the_line_once() -> None:
    body = json.dumps({"message": "line 2: unknown setting 'wokers'", "line": 2, "field": "roles"})
    error = error_from_response(400, body.encode(), "POST jobs")
    assert isinstance(error, SpecError)
    assert (str(error), error.line, error.field) == ("line 2: unknown setting 'wokers'", 2, "roles")
    unprefixed = error_from_response(400, b'{"message": "oops", "line": 3}', "POST jobs")
    assert str(unprefixed) == "line 3: oops"


def test_a_response_without_json_still_names_the_request() -> None:
    error = error_from_response(502, b"<html>Bad Gateway</html>", "GET distrun/jobs")
    assert str(error) == "HTTP 502 for GET distrun/jobs"


def test_jupyter_servers_own_token_refusal_points_at_the_token() -> None:
    for status in (401, 403):
        error = error_from_response(status, b'{"message": "Forbidden", "reason": null}', "GET x")
        assert isinstance(error, ClientError)
        assert str(error) == (
            f"the server refused the request (HTTP {status}); check the token (--token-file, DISTRUN_TOKEN or DISTRUN_TOKEN_FILE)"
        )


def test_runs_become_rows_in_capture_order_each_replica_in_seq_order() -> None:
    runs = [
        {"replica": "worker-0", "seq": 4, "times_ms": [1000, 3000], "texts": ["a4", "a5"]},
        {"replica": "worker-1", "seq": 0, "times_ms": [2000, 3000], "texts": ["b0", "b1"]},
    ]
    assert rows_of_runs(runs) == [
        ["worker-0", 4, 1.0, "a4"],
        ["worker-1", 0, 2.0, "b0"],
        ["worker-0", 5, 3.0, "a5"],
        ["worker-1", 1, 3.0, "b1"],
    ]


@pytest.mark.parametrize(
    "run",
    [
        {"replica": "worker-0", "seq": 0, "times_ms": [1000]},
        {"replica": "worker-0", "seq": 0, "times_ms": [1000, 2000], "texts": ["one"]},
        {"replica": "worker-0", "seq": "0", "times_ms": [1000], "texts": ["one"]},
    ],
)
def test_a_malformed_run_is_a_client_error_not_a_traceback(run: dict[str, Any]) -> None:
    with pytest.raises(ClientError, match="malformed runs message"):
        rows_of_runs([run])
