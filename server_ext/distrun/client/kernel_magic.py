"""IPython extension: run a cell as a distributed job and stream every replica's lines into it.

    %load_ext distrun.kernel_magic

registers the `%%distrun --framework pytorch --workers 2` cell magic and an input transformer
for ciao-style cells (a first line like `%framework=tensorflow`), so ciao users' cells work
unchanged. The job goes to the server in DISTRUN_URL/DISTRUN_TOKEN when set (the server
extension sets them for its local kernels), else to the local engine in-process.

ipykernel already runs an asyncio loop in the main thread, so the client runs on a private
loop in a daemon thread; the main thread prints what it hands over, which keeps output in the
cell that asked for it and lets an interrupt (KeyboardInterrupt) land where we can cancel.
"""

import asyncio
import concurrent.futures
import os
import queue
import re
import sys
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from distrun.client.base import Client, spec_from_text
from distrun.client.connect import client_from_env
from distrun.client.console import Console, Shown, replica_names, status_line, stream_job
from distrun.core.errors import DistrunError

T = TypeVar("T")

# `%key=value` or `%key.sub = value`: never valid IPython when `=` follows the name directly.
_CIAO_LINE = re.compile(r"^%([A-Za-z_][\w.]*)(\s*)=")


@dataclass(frozen=True)
class JobResult:
    """A distrun cell's value: which job ran and how it ended."""

    job_id: str
    state: str


@dataclass(frozen=True)
class SweepResult:
    """A sweep cell's value: the sweep, its best trial's job, and every trial's job and state."""

    sweep_id: str
    best_job_id: str | None
    trials: list[JobResult]


def is_ciao_cell(cell: str, is_line_magic: Callable[[str], bool] = lambda name: False) -> bool:
    """True when the cell's first meaningful line is a ciao header line like `%framework=...`.

    `%worker = 2` (space before `=`) is ciao only if no line magic `%worker` exists, because
    IPython would otherwise run that magic with the argument `= 2`.
    """
    for line in cell.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _CIAO_LINE.match(stripped)
        if match is None:
            return False
        name, space = match.groups()
        return not (space and is_line_magic(name))
    return False


class CiaoTransformer:
    """An `input_transformers_cleanup` entry turning a ciao cell into a call of `run_cell`."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell

    def _is_line_magic(self, name: str) -> bool:
        return self.shell.find_line_magic(name) is not None

    def __call__(self, lines: list[str]) -> list[str]:
        cell = "".join(lines)
        if not is_ciao_cell(cell, self._is_line_magic):
            return lines
        return [f"__import__('distrun.kernel_magic').kernel_magic.run_cell({cell!r})\n"]


class _LoopThread:
    """A private asyncio loop in a daemon thread, shared by every distrun cell of the kernel."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        thread = threading.Thread(target=self.loop.run_forever, name="distrun-client", daemon=True)
        thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)


_loop_thread: _LoopThread | None = None
_loop_lock = threading.Lock()


def _runner() -> _LoopThread:
    global _loop_thread
    with _loop_lock:
        if _loop_thread is None:
            _loop_thread = _LoopThread()
        return _loop_thread


def _say(text: str) -> None:
    print(text, flush=True)


def _error(exc: BaseException) -> None:
    print(f"distrun: error: {exc}", file=sys.stderr, flush=True)


async def _submit(client: Client, cell: str) -> dict[str, Any]:
    spec = spec_from_text(cell, None, os.getcwd(), await client.limits())
    return await client.submit(spec)


Output = str | list[str]  # lines to print, or the rows of unfinished lines to show now


class _UnfinishedRows:
    """The replicas' unfinished lines (progress bars) in one output of the cell, updated in
    place: a display made when the first one comes, then replaced at each change."""

    def __init__(self) -> None:
        self._handle: Any = None

    def show(self, rows: list[str]) -> None:
        from IPython.display import display  # the kernel has IPython; the CLI needs none

        data = {"text/plain": "\n".join(rows)}
        if self._handle is not None:
            self._handle.update(data, raw=True)
        elif rows:
            self._handle = display(data, raw=True, display_id=True)  # type: ignore[no-untyped-call]


def _print_until_done(
    future: concurrent.futures.Future[Any], outputs: "queue.Queue[Output]"
) -> None:
    """Print what the loop thread hands over until `future` is done (interruptible)."""
    rows = _UnfinishedRows()

    def put_out(item: Output) -> None:
        if isinstance(item, str):
            _say(item)
        else:
            rows.show(item)

    while True:
        try:
            put_out(outputs.get(timeout=0.1))
        except queue.Empty:
            if future.done():
                break
    while not outputs.empty():  # everything queued before the future finished
        put_out(outputs.get_nowait())


def run_cell(cell: str) -> JobResult | SweepResult | None:
    """Submit `cell` (header + code), stream its lines, return the job id and final state; a
    cell that declares a sweep runs its trials, showing their progress and then the results."""
    runner = _runner()
    try:
        client = client_from_env()
    except DistrunError as exc:
        _error(exc)
        return None
    try:
        from distrun.core.header import parse_cell

        if parse_cell(cell).sweep is not None:
            return _run_sweep(runner, client, cell)
        return _run(runner, client, cell)
    except DistrunError as exc:
        _error(exc)
        return None
    finally:
        runner.submit(client.close()).result()


def _run_sweep(runner: _LoopThread, client: Client, cell: str) -> SweepResult | None:
    from distrun.client.sweep_runner import SweepRun, progress_printer, results_table
    from distrun.core.header import parse_cell

    sweep = parse_cell(cell).sweep
    assert sweep is not None
    template = runner.submit(_template(client, cell)).result()
    outputs: queue.Queue[Output] = queue.Queue()
    run = SweepRun(client, template, sweep, on_change=progress_printer(outputs.put))
    _say(f"[distrun] sweep {run.id}: {len(run.trials)} trials, {sweep.parallel} at a time")
    running = runner.submit(run.run())
    try:
        _print_until_done(running, outputs)
        running.result()
    except KeyboardInterrupt:
        _say(f"[distrun] interrupted: cancelling sweep {run.id}'s running trials")
        runner.submit(run.cancel()).result()
        running.result()
        raise
    _say(results_table(run))
    best = run.best()
    return SweepResult(
        run.id,
        best.job_id if best else None,
        [JobResult(t.job_id, t.state) for t in run.trials if t.job_id is not None],
    )


async def _template(client: Client, cell: str) -> Any:
    return spec_from_text(cell, None, os.getcwd(), await client.limits())


def _run(runner: _LoopThread, client: Client, cell: str) -> JobResult | None:
    submitting = runner.submit(_submit(client, cell))
    try:
        job = submitting.result()
    except DistrunError as exc:
        _error(exc)
        return None
    except KeyboardInterrupt:
        _cancel_once_submitted(runner, client, submitting)
        raise
    names = replica_names(job)
    _say(f"[distrun] submitted job {job['id']} ({len(names)} replicas: {', '.join(names)})")
    outputs: queue.Queue[Output] = queue.Queue()
    # A notebook shows colours, and lines as a terminal would (a bar's last state).
    console = Console(names, shown=Shown.VISIBLE)
    streaming = runner.submit(stream_job(client, job, console, outputs.put, outputs.put))
    try:
        _print_until_done(streaming, outputs)
        final = streaming.result()
    except DistrunError as exc:
        _error(exc)
        return None
    except KeyboardInterrupt:
        streaming.cancel()
        _cancel(runner, client, job["id"])
        raise
    return JobResult(final["id"], final["state"])


def _cancel(runner: _LoopThread, client: Client, job_id: str) -> None:
    _say(f"[distrun] interrupted: cancelling job {job_id}")
    try:
        _say(status_line(runner.submit(client.cancel(job_id)).result()))
    except DistrunError as exc:
        _error(exc)


def _cancel_once_submitted(
    runner: _LoopThread, client: Client, submitting: concurrent.futures.Future[dict[str, Any]]
) -> None:
    try:
        job = submitting.result()
    except DistrunError:
        return  # nothing was submitted
    _cancel(runner, client, job["id"])


def distrun_cell_magic(line: str, cell: str) -> JobResult | SweepResult | None:
    """%%distrun [--framework F --workers N ...]: run the cell as a distributed job."""
    return run_cell(f"%%distrun {line}".rstrip() + "\n" + cell)


def load_ipython_extension(ip: Any) -> None:
    ip.register_magic_function(distrun_cell_magic, magic_kind="cell", magic_name="distrun")
    if not any(isinstance(t, CiaoTransformer) for t in ip.input_transformers_cleanup):
        # First, before IPython drops leading blank lines, so header line numbers match the cell.
        ip.input_transformers_cleanup.insert(0, CiaoTransformer(ip))


def unload_ipython_extension(ip: Any) -> None:
    ip.input_transformers_cleanup[:] = [
        t for t in ip.input_transformers_cleanup if not isinstance(t, CiaoTransformer)
    ]
