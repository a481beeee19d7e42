"""The websocket's `runs` messages: encoded once per batch object, bounded in size."""

import asyncio
import gc
import json
import weakref
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from tornado.websocket import WebSocketClosedError

from distrun.core.logs import LineRun, LogBatch, LogEvent, LogLine
from distrun.server import log_stream as stream
from distrun.server.log_stream import FRAME_MAX_LINES, LogStreamHandler, encoded_frames


def test_one_batch_object_is_encoded_once_and_forgotten_with_it() -> None:
    batch = LogBatch([LogLine("worker-0", seq, 1.5, f"line {seq}") for seq in range(3)])
    messages = encoded_frames(batch)
    assert encoded_frames(batch) is messages
    run = {
        "replica": "worker-0",
        "seq": 0,
        "times_ms": [1500] * 3,
        "texts": ["line 0", "line 1", "line 2"],
    }
    assert [json.loads(message) for message in messages] == [{"type": "runs", "runs": [run]}]
    key = id(batch)
    del batch
    gc.collect()
    assert key not in stream._encoded


def test_equal_batches_that_are_different_objects_are_encoded_separately() -> None:
    lines = [LogLine("worker-1", 0, 2.0, 'quote " and \\ and ünï')]
    first, second = LogBatch(lines), LogBatch(list(lines))
    assert encoded_frames(first) is not encoded_frames(second)
    assert encoded_frames(first) == encoded_frames(second)
    assert json.loads(encoded_frames(first)[0])["runs"][0]["texts"] == ['quote " and \\ and ünï']


def test_a_large_batch_becomes_several_bounded_messages() -> None:
    batch = LogBatch(
        runs=[LineRun("worker-0", 0, [1000] * (FRAME_MAX_LINES + 5), ["x"] * (FRAME_MAX_LINES + 5))]
    )
    messages = [json.loads(message) for message in encoded_frames(batch)]
    runs = [run for message in messages for run in message["runs"]]
    assert [len(run["texts"]) for run in runs] == [FRAME_MAX_LINES, 5]
    assert [run["seq"] for run in runs] == [0, FRAME_MAX_LINES]


def test_lines_and_runs_are_two_forms_of_one_batch() -> None:
    runs = [
        LineRun("worker-0", 3, [1000, 3000], ["a3", "a4"]),
        LineRun("worker-1", 0, [2000, 3000], ["b0", "b1"]),
    ]
    lines = LogBatch(runs=runs).lines
    assert [(line.replica, line.seq, line.time, line.text) for line in lines] == [
        ("worker-0", 3, 1.0, "a3"),
        ("worker-1", 0, 2.0, "b0"),
        ("worker-0", 4, 3.0, "a4"),
        ("worker-1", 1, 3.0, "b1"),
    ]
    assert LogBatch(lines).runs == [
        LineRun("worker-0", 3, [1000], ["a3"]),
        LineRun("worker-1", 0, [2000], ["b0"]),
        LineRun("worker-0", 4, [3000], ["a4"]),
        LineRun("worker-1", 1, [3000], ["b1"]),
    ]
    assert len(LogBatch(runs=runs)) == len(LogBatch(lines)) == 4
    assert LogBatch(runs=runs) == LogBatch(lines)


def test_a_text_orjson_refuses_is_encoded_by_json() -> None:
    batch = LogBatch([LogLine("worker-0", 0, 1.0, "lone \udc80 surrogate")])
    (message,) = encoded_frames(batch)
    assert json.loads(message)["runs"][0]["texts"] == ["lone \udc80 surrogate"]


async def test_a_sent_batch_is_not_held_while_the_next_event_is_awaited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Held until the next event came (a second or more), 600 viewers' batches, their runs and
    # lists were alive at every young collection, for it to scan.
    sent: list[object] = []
    waiting = asyncio.Event()
    resume = asyncio.Event()

    async def follower() -> AsyncIterator[LogEvent]:
        yield LogBatch([LogLine("worker-0", 0, 1.5, "line 0")])
        waiting.set()
        await resume.wait()

    class Handler:
        protocol = stream.V2_RUNS
        ws_connection = None
        _write = LogStreamHandler._write

        async def write_message(self, message: bytes) -> None:
            sent.append(message)

    batches: list[weakref.ref[LogBatch]] = []
    real = stream.encoded_frames

    def recorded(batch: LogBatch, protocol: str = stream.V2_RUNS) -> list[bytes]:
        batches.append(weakref.ref(batch))
        return real(batch, protocol)

    monkeypatch.setattr(stream, "encoded_frames", recorded)
    handler: Any = Handler()
    relay = asyncio.create_task(LogStreamHandler._relay(handler, follower(), None))
    await waiting.wait()
    assert sent and batches and batches[0]() is None
    resume.set()
    await relay


class _Writer:
    """What LogStreamHandler._write uses of a handler: write_message's futures left to the
    test, and a socket that has taken every byte written or not."""

    _write = LogStreamHandler._write

    def __init__(self, backed_up: bool) -> None:
        self.ws_connection = SimpleNamespace(stream=SimpleNamespace(writing=lambda: backed_up))
        self.sent: list[asyncio.Future[None]] = []

    def write_message(self, message: bytes) -> asyncio.Future[None]:
        self.sent.append(asyncio.get_running_loop().create_future())
        return self.sent[-1]


async def test_a_message_the_socket_took_whole_is_not_waited_for() -> None:
    """tornado's write future (a task of its own) is not awaited when nothing is left to
    write: no step of the handler's per message; a later error is not left unretrieved."""
    writer = _Writer(backed_up=False)
    write = writer._write(b"one")
    with pytest.raises(StopIteration):
        write.send(None)  # done in its first step: nothing awaited
    errors: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        writer.sent.pop().set_exception(WebSocketClosedError())
        await asyncio.sleep(0)  # its callbacks
        gc.collect()
    finally:
        loop.set_exception_handler(None)
    assert errors == []


async def test_a_message_the_socket_has_not_taken_is_waited_for() -> None:
    writer = _Writer(backed_up=True)
    write = asyncio.create_task(writer._write(b"one"))
    await asyncio.sleep(0.01)
    assert not write.done()
    writer.sent[0].set_result(None)
    await write
