"""A replica's unfinished line (a progress bar redrawn with carriage returns) reaches readers
while it is drawn, on the real local engine: as a terminal shows it, a few times a second at
most, with the seq the line gets once finished; the finished line keeps every redraw."""

import asyncio
import time
from contextlib import aclosing
from pathlib import Path

import pytest

from distrun.core.logs import LogBatch, LogLine, PartialUpdate
from distrun.engines.local.engine import LocalEngine
from distrun.engines.local.supervisor_loop import PARTIAL_INTERVAL
from tests.reliability.helpers import WAIT, spec

pytestmark = pytest.mark.integration

BAR_STEPS = 12
STEP_SECONDS = 0.1
BAR = f"""
import sys, time
print("\\x1b[31mERROR\\x1b[0m before the bar", flush=True)
for step in range({BAR_STEPS} + 1):
    done = "#" * step
    sys.stderr.write(f"\\rEpoch 1: {{step * 100 // {BAR_STEPS}:3d}}%|{{done:<{BAR_STEPS}}}|")
    sys.stderr.flush()
    time.sleep({STEP_SECONDS})
sys.stderr.write("\\n")
print("after the bar", flush=True)
"""


def bar(step: int) -> str:
    return f"Epoch 1: {step * 100 // BAR_STEPS:3d}%|{'#' * step:<{BAR_STEPS}}|"


async def follow_all(engine: LocalEngine, job_id: str) -> tuple[list[LogLine], list[LogLine]]:
    lines: list[LogLine] = []
    partials: list[LogLine] = []
    async with aclosing(engine.follow(job_id, "alice")) as events:
        async for event in events:
            if isinstance(event, LogBatch):
                lines += event.lines
            elif isinstance(event, PartialUpdate):
                partials += event.lines
    return lines, partials


async def test_a_progress_bar_is_seen_advancing_before_its_line_ends(
    local_engine: LocalEngine, tmp_path: Path
) -> None:
    job = await local_engine.submit(spec(BAR), "alice")
    started = time.monotonic()
    lines, partials = await asyncio.wait_for(follow_all(local_engine, job.id), WAIT)
    drawing = time.monotonic() - started

    texts = [line.text for line in lines]
    assert texts[0] == "\x1b[31mERROR\x1b[0m before the bar"
    # The finished line is stored as written, every redraw in it.
    assert texts[1] == "".join(f"\r{bar(step)}" for step in range(BAR_STEPS + 1))
    assert texts[2] == "after the bar"
    shown = [p.text for p in partials if p.text]
    assert all(p.seq == 1 for p in partials), "an unfinished line carries the seq it will have"
    assert set(shown) <= {bar(step) for step in range(BAR_STEPS + 1)}
    assert len(set(shown)) >= 3, f"the bar was not seen advancing: {shown}"
    assert shown == sorted(shown), "states arrive in the order they were drawn"
    # Throttled: at most one state per interval (and one at each end of the drawing).
    assert len(partials) <= drawing / PARTIAL_INTERVAL + 3


async def test_the_unfinished_line_can_be_read_and_is_gone_once_finished(
    local_engine: LocalEngine,
) -> None:
    code = "import sys, time\nsys.stdout.write('loading 50%'); sys.stdout.flush()\ntime.sleep(60)\n"
    job = await local_engine.submit(spec(code), "alice")
    deadline = time.monotonic() + WAIT
    found: list[LogLine] = []
    while not found and time.monotonic() < deadline:
        found = await local_engine.read_partials(job.id, "alice")
        await asyncio.sleep(0.05)
    assert [(p.replica, p.seq, p.text) for p in found] == [("worker-0", 0, "loading 50%")]
    assert await local_engine.read_logs(job.id, "alice") == []
    await local_engine.cancel(job.id, "alice")
    assert await local_engine.read_partials(job.id, "alice") == []
    logs = await local_engine.read_logs(job.id, "alice")
    assert [line.text for line in logs] == ["loading 50%"]  # finished when the replica ended
    log_dir = Path(local_engine._files(job.id).logs)
    assert not list(log_dir.glob("*.partial"))
