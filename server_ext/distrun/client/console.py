"""Rendering a job for a terminal or a notebook cell: prefixed replica lines, status lines and
each replica's unfinished line (a progress bar being drawn).

Shared by the `distrun` CLI and the kernel magic. Nothing here talks to a backend except
`stream_job`, which drives a client's `follow` and hands rendered text to callbacks.

Where a person reads (a terminal, a notebook cell), a line is shown as a terminal would show
it: carriage returns applied, colours kept, every other control sequence of the replica's
output dropped, so it cannot move the reader's cursor, retitle their window or write their
clipboard. Written to a file or a pipe, a line is passed on exactly as the replica wrote it.
"""

import enum
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

from distrun.client.base import Client, FollowEvent, LinesEvent, PartialEvent
from distrun.core.job import JobState
from distrun.core.logs import LogLine
from distrun.core.terminal import plain_text, visible_line
from distrun.core.trial_env import trial_of

# Bright, distinguishable ANSI foreground colours, cycled over replicas in job order.
_PALETTE = (36, 33, 35, 32, 34, 31, 96, 93, 95, 92, 94, 91)
_RESET = "\x1b[0m"

EXIT_SUCCEEDED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
_SGR = re.compile(r"\x1b\[[0-9;:]*m")


class Shown(enum.Enum):
    """How a replica's text is written out."""

    RAW = "raw"  # as the replica wrote it: for files and pipes
    VISIBLE = "visible"  # as a terminal shows it, colours kept
    PLAIN = "plain"  # as a terminal shows it, without colours (NO_COLOR)


def shown_for(stream: TextIO) -> Shown:
    """RAW unless `stream` is a terminal; on one, colours unless NO_COLOR is set."""
    isatty = getattr(stream, "isatty", None)
    if not (isatty and isatty()):
        return Shown.RAW
    return Shown.PLAIN if "NO_COLOR" in os.environ else Shown.VISIBLE


def use_color(stream: TextIO) -> bool:
    """Colour only a real terminal, and never when the user set NO_COLOR (no-color.org)."""
    if "NO_COLOR" in os.environ:
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def exit_code(state: str) -> int:
    """The process exit code for a job that ended in `state`."""
    return EXIT_SUCCEEDED if state == JobState.SUCCEEDED.value else EXIT_FAILED


class Console:
    """Formats one job's output: `worker-0 | text`, prefixes padded to the longest replica name,
    and keeps each replica's unfinished line until its finished line comes."""

    def __init__(
        self,
        replica_names: Iterable[str] = (),
        *,
        color: bool = False,
        shown: Shown = Shown.RAW,
    ) -> None:
        self.color = color
        self.shown = shown
        self._order: dict[str, int] = {}
        self._width = 0
        for name in replica_names:
            self._add(name)
        self._last_status: tuple[str, int, int, int] | None = None
        self._unfinished: dict[str, LogLine] = {}

    def _add(self, replica: str) -> None:
        if replica not in self._order:
            self._order[replica] = len(self._order)
            self._width = max(self._width, len(replica))

    def prefix(self, replica: str) -> str:
        self._add(replica)
        text = f"{replica.ljust(self._width)} | "
        if not self.color:
            return text
        colour = _PALETTE[self._order[replica] % len(_PALETTE)]
        return f"\x1b[{colour}m{text}{_RESET}"

    def text(self, text: str) -> str:
        if self.shown is Shown.VISIBLE:
            return visible_line(text)
        if self.shown is Shown.PLAIN:
            return plain_text(text)
        return text

    def format_line(self, line: LogLine) -> str:
        text = self.text(line.text)
        # A replica's own colour codes may leak past its line; reset them when colouring.
        suffix = _RESET if self.color and "\x1b[" in text else ""
        return f"{self.prefix(line.replica)}{text}{suffix}"

    def format_lines(self, lines: Iterable[LogLine]) -> str:
        return "\n".join(self.format_line(line) for line in lines)

    def finished(self, lines: Iterable[LogLine]) -> bool:
        """Forgets unfinished lines that `lines` finish; whether any was forgotten."""
        before = len(self._unfinished)
        for line in lines:
            unfinished = self._unfinished.get(line.replica)
            if unfinished is not None and unfinished.seq <= line.seq:
                del self._unfinished[line.replica]
        return len(self._unfinished) != before

    def unfinished(self, lines: Iterable[LogLine]) -> None:
        for line in lines:
            if line.text:
                self._unfinished[line.replica] = line
            else:
                self._unfinished.pop(line.replica, None)

    def unfinished_rows(self) -> list[str]:
        """Each replica's unfinished line, formatted, in replica order."""
        lines = sorted(self._unfinished.values(), key=lambda line: self._order.get(line.replica, 0))
        return [self.format_line(line) for line in lines]

    def status_change(self, job: dict[str, Any]) -> str | None:
        """A status line when the job's state or its count of running replicas changed."""
        for replica in job.get("replicas", []):
            self._add(replica["name"])
        total = len(job.get("replicas", []))
        key = (job["state"], int(job.get("replicas_running", 0)), total, int(job.get("attempt", 1)))
        if key == self._last_status:
            return None
        self._last_status = key
        return status_line(job)


def status_line(job: dict[str, Any]) -> str:
    """One line saying where the job is: `[distrun] job foo-ab12c running (3/3 replicas)`."""
    state = job["state"]
    head = f"[distrun] job {job['id']}"
    total = len(job.get("replicas", []))
    reason = job.get("reason")
    if state == JobState.PENDING.value:
        return f"{head} pending" + (f": {reason}" if reason else f" ({total} replicas)")
    if state == JobState.RUNNING.value:
        running = f"{head} running ({job.get('replicas_running', 0)}/{total} replicas)"
        return running + _attempt(job)
    if state == JobState.SUCCEEDED.value:
        return f"{head} succeeded" + _took(job)
    if state == JobState.FAILED.value:
        return f"{head} failed: {reason or 'no reason given'}"
    return f"{head} {state}" + (f": {reason}" if reason else "")


def _attempt(job: dict[str, Any]) -> str:
    """`: attempt 2 of 4, after worker-1 failed: ...`, once the job was restarted."""
    attempt = int(job.get("attempt", 1))
    if attempt <= 1:
        return ""
    of = int(job.get("max_restarts", 0)) + 1
    failure = job.get("last_failure") or {}
    after = f", after {failure['text']}" if failure.get("text") else ""
    return f": attempt {attempt} of {of}{after}"


def timeline_rows(job: dict[str, Any]) -> list[str]:
    """The job's timeline (`distrun status`): each event's time, attempt and what happened."""
    rows = []
    for event in job.get("timeline") or []:
        at = time.strftime("%H:%M:%S", time.localtime(event["time"]))
        fraction = f"{event['time'] % 1:.3f}"[1:]
        rows.append(f"  {at}{fraction}  attempt {event['attempt']}  {event['text']}")
    return rows


def _took(job: dict[str, Any]) -> str:
    started, finished = job.get("started_at"), job.get("finished_at")
    if started is None or finished is None:
        return ""
    return f" in {format_duration(finished - started)}"


def format_duration(seconds: float) -> str:
    """Short and human: 0.4s, 12s, 3m05s, 2h07m, 3d04h."""
    if seconds < 10:
        return f"{max(seconds, 0):.1f}s"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def jobs_table(jobs: list[dict[str, Any]], now: float | None = None) -> str:
    """`distrun ls`: id, state, framework, replicas (running/total), age, duration, and, when
    some are sweep trials, each one's sweep and number (a sweep's trials listed together)."""
    now = time.time() if now is None else now
    rows: list[tuple[str, ...]] = [
        ("ID", "STATE", "FRAMEWORK", "REPLICAS", "AGE", "DURATION", "SWEEP")
    ]
    any_trial = any(_trial(job) for job in jobs)
    for job in grouped_by_sweep(jobs):
        started, finished = job.get("started_at"), job.get("finished_at")
        if started is None:
            duration = "-"
        else:
            duration = format_duration((finished if finished is not None else now) - started)
        replicas = f"{job.get('replicas_running', 0)}/{len(job.get('replicas', []))}"
        age = format_duration(now - job["created_at"])
        trial = _trial(job)
        sweep = f"{trial[0]}/{trial[1]}" if trial else ""
        rows.append((job["id"], job["state"], job["framework"], replicas, age, duration, sweep))
    if not any_trial:
        rows = [row[:-1] for row in rows]
    return table(rows)


def table(rows: list[tuple[str, ...]]) -> str:
    """Rows as left-aligned columns two spaces apart (the first row: the headings)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _trial(job: dict[str, Any]) -> tuple[str, int] | None:
    return trial_of((job.get("spec") or {}).get("env") or {})


def grouped_by_sweep(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`jobs` in their order, but each sweep's trials together where its first one is listed,
    by trial number."""
    trials: dict[str, list[dict[str, Any]]] = {}
    for job in jobs:
        trial = _trial(job)
        if trial is not None:
            trials.setdefault(trial[0], []).append(job)
    ordered: list[dict[str, Any]] = []
    for job in jobs:
        trial = _trial(job)
        if trial is None:
            ordered.append(job)
        elif trial[0] in trials:
            ordered += sorted(trials.pop(trial[0]), key=lambda j: _trial(j) or ("", 0))
    return ordered


def job_details(job: dict[str, Any]) -> str:
    """`distrun status`: the job and each replica, for people (`--json` is for programs)."""
    lines = [
        f"job:       {job['id']} ({job['name']})",
        f"state:     {job['state']}",
        f"framework: {job['framework']}   engine: {job['engine']}   owner: {job['owner']}",
        f"created:   {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(job['created_at']))}",
    ]
    if job.get("started_at") is not None:
        end = job.get("finished_at") or time.time()
        lines.append(f"duration:  {format_duration(end - job['started_at'])}")
    if job.get("reason"):
        lines.append(f"reason:    {job['reason']}")
    if job.get("restart_scope"):
        scope = "the whole job" if job["restart_scope"] == "job" else "the failed replica"
        lines.append(
            f"attempt:   {job.get('attempt', 1)} of {int(job.get('max_restarts', 0)) + 1} "
            f"(a failure restarts {scope})"
        )
    failure = job.get("last_failure")
    if failure:
        lines.append(f"last failure: {failure['text']}")
    width = max([len(r["name"]) for r in job.get("replicas", [])] + [7])
    lines.append("")
    lines.append(f"{'REPLICA'.ljust(width)}  STATE      EXIT  RESTARTS  REASON")
    for replica in job.get("replicas", []):
        code = "-" if replica.get("exit_code") is None else str(replica["exit_code"])
        lines.append(
            f"{replica['name'].ljust(width)}  {replica['state'].ljust(9)}  {code.ljust(4)}  "
            f"{str(replica.get('restarts', 0)).ljust(8)}  {replica.get('reason') or ''}".rstrip()
        )
    gpus = [(r["name"], r["gpu"]) for r in job.get("replicas", []) if r.get("gpu")]
    if gpus:
        lines.append("")
        lines.extend(f"{name.ljust(width)}  GPU: {gpu}" for name, gpu in gpus)
    timeline = timeline_rows(job)
    if len(timeline) > 2:  # more than submitted and started
        lines.append("")
        lines.append("timeline:")
        lines.extend(timeline)
    tracebacks = job.get("tracebacks") or []
    for group in tracebacks:  # the same one on several replicas: once
        lines.append("")
        lines.append(f"traceback on {', '.join(group['replicas'])}:")
        lines.extend(f"  {text}" for text in group["lines"])
    if job.get("last_lines") and not tracebacks:
        lines.append("")
        lines.append(f"last lines of {job.get('failed_replica') or 'the failed replica'}:")
        lines.extend(f"  {text}" for text in job["last_lines"])
    return "\n".join(lines)


def replica_names(job: dict[str, Any]) -> list[str]:
    return [replica["name"] for replica in job.get("replicas", [])]


Rows = Callable[[list[str]], None]


def render(event: FollowEvent, console: Console, emit: Callable[[str], None], draw: Rows) -> Any:
    """Hands a follow event's finished lines to `emit` and each change of the replicas'
    unfinished lines to `draw` (rows); the job, for a status event (else None)."""
    if isinstance(event, LinesEvent):
        if event.lines:
            emit(console.format_lines(event.lines))
            if console.finished(event.lines):
                draw(console.unfinished_rows())
        return None
    if isinstance(event, PartialEvent):
        console.unfinished(event.lines)
        draw(console.unfinished_rows())
        return None
    return event.job


def draw_nothing(rows: list[str]) -> None:
    """Unfinished lines are for people: a file or a pipe gets the finished lines only."""


async def stream_job(
    client: Client,
    job: dict[str, Any],
    console: Console,
    emit: Callable[[str], None],
    draw: Rows = draw_nothing,
) -> dict[str, Any]:
    """Emit every replica line and each status change until the job ends, and `draw` the
    replicas' unfinished lines as they change (no rows at the end); return the final job."""
    final = job
    async for event in client.follow(job["id"]):
        changed = render(event, console, emit, draw)
        if changed is None:
            continue
        final = changed
        # The outcome is said last, after the lines that may still follow it.
        if not JobState(final["state"]).terminal:
            _emit_change(console, final, emit)
    draw([])
    if not JobState(final["state"]).terminal:
        final = await client.get_job(job["id"])
    _emit_change(console, final, emit)
    return final


def _emit_change(console: Console, job: dict[str, Any], emit: Callable[[str], None]) -> None:
    message = console.status_change(job)
    if message:
        emit(message)


class LiveRows:
    """Rows kept at the bottom of a terminal and redrawn in place (each replica's progress bar),
    with finished lines printed above them. A row is cut to the terminal's width, so it never
    wraps and every redraw knows how many rows to go back up."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self._rows: list[str] = []

    def print(self, text: str) -> None:
        self._erase()
        self.stream.write(text + "\n")
        self._draw()

    def show(self, rows: list[str]) -> None:
        self._erase()
        self._rows = rows
        self._draw()

    def _erase(self) -> None:
        if self._rows:
            # Up to the first row, to its start, and erase to the end of the screen.
            self.stream.write(f"\x1b[{len(self._rows)}A\r\x1b[J")

    def _draw(self) -> None:
        width = shutil.get_terminal_size().columns - 1
        for row in self._rows:
            self.stream.write(fit(row, width) + "\n")
        self.stream.flush()


def fit(text: str, width: int) -> str:
    """`text` cut to `width` visible characters, its colour codes kept and closed."""
    parts: list[str] = []
    visible = 0
    position = 0
    for match in _SGR.finditer(text):
        chunk = text[position : match.start()][: max(0, width - visible)]
        parts.append(chunk)
        visible += len(chunk)
        parts.append(match.group(0))
        position = match.end()
    parts.append(text[position:][: max(0, width - visible)])
    return "".join(parts) + (_RESET if "\x1b[" in text else "")
