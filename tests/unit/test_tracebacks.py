"""Tracebacks in a replica's lines: the last complete one, and the same one grouped."""

from distrun.core.tracebacks import (
    MAX_TRACEBACK_LINES,
    TracebackGroup,
    TracebackTracker,
    group_tracebacks,
)

FIRST = [
    "Traceback (most recent call last):",
    '  File "/job/main.py", line 3, in <module>',
    "    step()",
    "KeyError: 'a'",
]
CHAINED = [
    "",
    "During handling of the above exception, another exception occurred:",
    "",
    "Traceback (most recent call last):",
    '  File "/job/main.py", line 5, in <module>',
    "    raise ValueError('b')",
    "    ^^^^^^^^^^^^^^^^^^^^^",
    "ValueError: b",
]


def test_the_last_complete_traceback_is_kept_across_batches():
    tracker = TracebackTracker()
    tracker.feed(["epoch 1", *FIRST[:2]])
    assert tracker.capturing and tracker.last is None
    tracker.feed(FIRST[2:])
    assert tracker.last == FIRST and not tracker.capturing
    tracker.feed(CHAINED + ["after"])
    assert tracker.last == CHAINED[3:]


def test_a_deep_traceback_keeps_its_start_and_its_exception_line():
    tracker = TracebackTracker()
    frames = [f'  File "/job/main.py", line {i}, in f' for i in range(1000)]
    tracker.feed([FIRST[0], *frames, "RecursionError: too deep"])
    assert tracker.last is not None and len(tracker.last) == MAX_TRACEBACK_LINES
    assert tracker.last[-1] == "RecursionError: too deep"


def test_identical_tracebacks_group_in_replica_order():
    groups = group_tracebacks({"worker-0": FIRST, "worker-1": CHAINED, "worker-2": FIRST})
    assert groups == [
        TracebackGroup(["worker-0", "worker-2"], FIRST),
        TracebackGroup(["worker-1"], CHAINED),
    ]
    assert TracebackGroup.from_json(groups[0].to_json()) == groups[0]
