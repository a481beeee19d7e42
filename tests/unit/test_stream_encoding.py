"""The websocket's `lines` messages are encoded once per batch object."""

import gc
import json

from distrun.core.logs import LogBatch, LogLine
from distrun.server import log_stream as stream
from distrun.server.log_stream import FRAME_MAX_LINES, encoded_frames


def test_one_batch_object_is_encoded_once_and_forgotten_with_it() -> None:
    batch = LogBatch([LogLine("worker-0", seq, 1.5, f"line {seq}") for seq in range(3)])
    messages = encoded_frames(batch)
    assert encoded_frames(batch) is messages
    assert [json.loads(message) for message in messages] == [
        {"type": "lines", "lines": [["worker-0", seq, 1.5, f"line {seq}"] for seq in range(3)]}
    ]
    key = id(batch)
    del batch
    gc.collect()
    assert key not in stream._encoded


def test_equal_batches_that_are_different_objects_are_encoded_separately() -> None:
    lines = [LogLine("worker-1", 0, 2.0, 'quote " and \\ and ünï')]
    first, second = LogBatch(lines), LogBatch(list(lines))
    assert encoded_frames(first) is not encoded_frames(second)
    assert encoded_frames(first) == encoded_frames(second)
    assert json.loads(encoded_frames(first)[0])["lines"][0][3] == 'quote " and \\ and ünï'


def test_a_large_batch_becomes_several_bounded_messages() -> None:
    lines = [LogLine("worker-0", seq, 1.0, "x") for seq in range(FRAME_MAX_LINES + 5)]
    messages = [json.loads(message) for message in encoded_frames(LogBatch(lines))]
    assert [len(message["lines"]) for message in messages] == [FRAME_MAX_LINES, 5]
    assert [row[1] for message in messages for row in message["lines"]] == list(range(len(lines)))
