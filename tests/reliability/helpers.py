"""What the reliability tests share: specs, following a job, checking sequences, finding
a job's processes through /proc."""

import asyncio
import codecs
import gc
import os
import textwrap
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import aclosing, contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tornado.websocket import WebSocketClientConnection

from distrun.core.job import Job
from distrun.core.logs import JobUpdate, LogBatch, LogEvent, LogLine, PartialUpdate
from distrun.core.spec import JobSpec
from distrun.core.terminal import visible_line
from distrun.engines.local.engine import LocalEngine
from tests.server_process import ServerProcess

from .numbered_lines import line_bytes, line_text

WAIT = 120.0  # generous: the machine may be loaded
NUMBERED_LINES_CODE = (Path(__file__).parent / "numbered_lines.py").read_text()


def spec(code: str, replicas: int = 1, framework: str = "generic", **fields: Any) -> JobSpec:
    roles = fields.pop("roles", {"worker": {"replicas": replicas}})
    return JobSpec.from_dict(
        {"framework": framework, "roles": roles, "code": textwrap.dedent(code), **fields}
    )


async def follow_to_end(
    engine: LocalEngine,
    job: Job,
    owner: str = "alice",
    timeout: float = WAIT,
    on_update: Callable[[Job], None] | None = None,
    **kwargs: Any,
) -> tuple[Job, list[LogLine]]:
    """Every event of `follow` until it ends: the last job state and every line (each job
    update also to `on_update`, when given)."""
    lines: list[LogLine] = []
    last = job

    async def consume() -> None:
        nonlocal last
        async with aclosing(engine.follow(job.id, owner, **kwargs)) as events:
            async for event in events:
                if isinstance(event, LogBatch):
                    lines.extend(event.lines)
                elif isinstance(event, JobUpdate):
                    last = event.job
                    if on_update is not None:
                        on_update(last)

    await asyncio.wait_for(consume(), timeout)
    return last, lines


async def wait_for_lines(
    engine: LocalEngine, job: Job, count: int, timeout: float = WAIT
) -> list[LogLine]:
    """The job's logs once they hold at least `count` lines."""

    async def enough() -> list[LogLine]:
        while True:
            lines = await engine.read_logs(job.id, "alice")
            if len(lines) >= count:
                return lines
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(enough(), timeout)


async def first_batch(events: AsyncIterator[LogEvent]) -> LogBatch:
    async for event in events:
        if isinstance(event, LogBatch):
            return event
    raise AssertionError("the job ended before its first line")


async def read_all(events: AsyncIterator[LogEvent], checker: "SequenceChecker") -> Job | None:
    """Checks every line to the end of `events`; the last job update."""
    last = None
    async for event in events:
        if isinstance(event, LogBatch):
            checker.check(event.lines)
        elif isinstance(event, PartialUpdate):
            checker.check_partial(event.lines)
        elif isinstance(event, JobUpdate):
            last = event.job
    return last


async def wait_for_job(
    engine: LocalEngine, job: Job, check: Callable[[Job], bool], what: str
) -> tuple[Job, float]:
    """Follows the job's status until `check` holds; returns that job and the wall-clock time
    (`time.time()`, comparable with times replicas print) at which its update arrived."""

    async def watch() -> tuple[Job, float]:
        async with aclosing(engine.follow(job.id, "alice")) as events:
            async for event in events:
                if isinstance(event, JobUpdate) and check(event.job):
                    return event.job, time.time()
        raise AssertionError(f"the job ended without {what}")

    return await asyncio.wait_for(watch(), WAIT)


@contextmanager
def gc_disabled() -> Iterator[None]:
    """Only reference counting frees objects meanwhile: what is freed had no cycle holding it."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def wait_until(
    check: Callable[[], Any], what: str | Callable[[], str], timeout: float = WAIT
) -> Any:
    """`check()` once it is true; else fails naming `what` (a callable: as it is at the end)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting until {what() if callable(what) else what}")


class SequenceChecker:
    """Checks lines of `numbered_lines` replicas as they arrive: each replica's seqs gap-free
    from 0 and never repeated, each text exactly the line the replica wrote; and unfinished
    lines (partial updates): each for a line not received yet, showing a state the line went
    through as a terminal shows it."""

    def __init__(self, replicas: Iterable[str]) -> None:
        self.next_seq = {replica: 0 for replica in replicas}
        self.received = 0
        self.partials = 0  # unfinished-line updates that showed text

    def check(self, lines: list[LogLine]) -> None:
        for line in lines:
            expected = self.next_seq[line.replica]
            assert line.seq == expected, (
                f"{line.replica}: got seq {line.seq}, expected {expected} (lost or repeated)"
            )
            if line.text != line_text(line.replica, line.seq):
                raise AssertionError(
                    f"{line.replica} line {line.seq} reads {line.text[:200]!r}, expected "
                    f"{line_text(line.replica, line.seq)[:200]!r}"
                )
            self.next_seq[line.replica] = expected + 1
        self.received += len(lines)

    def check_partial(self, lines: list[LogLine]) -> None:
        for line in lines:
            expected = self.next_seq[line.replica]
            assert line.seq >= expected, (
                f"{line.replica}: an unfinished line has seq {line.seq}, but {expected - 1} "
                "was already received finished"
            )
            if line.text:
                assert shown_while_written(line.replica, line.seq, line.text), (
                    f"{line.replica} unfinished line {line.seq} shows {line.text[:200]!r}, "
                    "which the line never showed"
                )
                self.partials += 1

    def cursor(self) -> dict[str, int]:
        return dict(self.next_seq)


def shown_while_written(replica: str, seq: int, shown: str) -> bool:
    """Whether a terminal showed `shown` of line `seq` at some point while it was written."""
    raw = line_bytes(replica, seq)
    if b"\r" not in raw:  # written left to right: every state is a beginning of the line
        return visible_line(line_text(replica, seq)).startswith(shown)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    text = ""
    for byte in raw:
        text += decoder.decode(bytes([byte]))
        if visible_line(text) == shown:
            return True
    return False


def processes_of_job(job_id: str) -> list[int]:
    """Every live process on this machine whose environment carries DISTRUN_JOB_ID=job_id."""
    marker = f"DISTRUN_JOB_ID={job_id}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if state != "Z" and marker in environ.split(b"\0"):
            found.append(int(entry.name))
    return found


def open_fds() -> set[str]:
    """What this process's file descriptors point at, as `fd -> target` strings."""
    result = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            result.add(f"{fd} -> {os.readlink(f'/proc/self/fd/{fd}')}")
        except OSError:  # the directory listing's own fd, already closed
            continue
    return result


EngineFactory = Callable[..., LocalEngine]  # the make_local_engine fixture of tests/conftest.py


# --- a real server process (tests/server_process.py) ---------------------------------------


def cursor_query(cursor: dict[str, int]) -> str:
    """A cursor as the `since` query value: `worker-0:10,master-0:0`."""
    return quote(",".join(f"{replica}:{seq}" for replica, seq in cursor.items()), safe=",:")


async def submit(server: ServerProcess, spec: dict[str, Any]) -> dict[str, Any]:
    status, job = await server.request("POST", "distrun/jobs", {"spec": spec})
    assert status == 201, job
    return dict(job)


async def log_stream(
    server: ServerProcess, job_id: str, cursor: dict[str, int]
) -> WebSocketClientConnection:
    """The job's log websocket, resuming at `cursor`."""
    query = {"since": ",".join(f"{r}:{s}" for r, s in cursor.items())} if cursor else None
    return await server.websocket(f"distrun/jobs/{job_id}/logs/stream", query=query)
