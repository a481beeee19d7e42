"""Log lines as engines read them, and the events a follower of a job receives."""

from dataclasses import dataclass
from operator import attrgetter

from distrun.core.job import Job


@dataclass(frozen=True)
class LogLine:
    replica: str
    seq: int  # 0-based, per replica, gap-free and never reused
    time: float  # epoch seconds when the line was captured
    text: str  # without the trailing newline; invalid UTF-8 replaced by U+FFFD


@dataclass(frozen=True)
class LineRun:
    """Consecutive lines of one replica as columns: line `first_seq + i` was captured at
    `times_ms[i]` (epoch milliseconds) and reads `texts[i]`. A reader builds it from a log
    without a Python object per line, and the log websocket sends it as it is: at hundreds of
    thousands of lines a second, objects per line were most of the server's work."""

    replica: str
    first_seq: int
    times_ms: list[int]
    texts: list[str]

    def __len__(self) -> int:
        return len(self.texts)

    def lines(self) -> list[LogLine]:
        seqs = range(self.first_seq, self.first_seq + len(self.texts))
        return [
            LogLine(self.replica, seq, millis / 1000, text)
            for seq, millis, text in zip(seqs, self.times_ms, self.texts, strict=True)
        ]


class LogBatch:
    """New lines of a job, read at once: given as lines in capture order, or as runs (each
    replica's lines as columns, the form the local engine reads); the other form is built on
    first use."""

    def __init__(self, lines: list[LogLine] | None = None, *, runs: list[LineRun] | None = None):
        if (lines is None) == (runs is None):
            raise TypeError("a LogBatch is made of lines or of runs")
        self._lines = lines
        self._runs = runs

    @property
    def lines(self) -> list[LogLine]:
        """In capture order; a replica's lines in seq order."""
        if self._lines is None:
            assert self._runs is not None
            merged = [line for run in self._runs for line in run.lines()]
            merged.sort(key=attrgetter("time"))  # stable
            self._lines = merged
        return self._lines

    @property
    def runs(self) -> list[LineRun]:
        if self._runs is None:
            assert self._lines is not None
            self._runs = _runs_of(self._lines)
        return self._runs

    def __len__(self) -> int:
        return sum(map(len, self._runs)) if self._runs is not None else len(self.lines)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LogBatch) and self.lines == other.lines

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"LogBatch({self.lines!r})"


def _runs_of(lines: list[LogLine]) -> list[LineRun]:
    """Lines as runs, in the same order: a run ends where the replica changes or seqs skip."""
    runs: list[LineRun] = []
    for line in lines:
        last = runs[-1] if runs else None
        millis = round(line.time * 1000)
        if last and last.replica == line.replica and last.first_seq + len(last) == line.seq:
            last.times_ms.append(millis)
            last.texts.append(line.text)
        else:
            runs.append(LineRun(line.replica, line.seq, [millis], [line.text]))
    return runs


# How much of an unfinished line readers are shown (its beginning): a progress bar is short, and
# every follower holds the newest unfinished line of each replica it follows.
PARTIAL_MAX_CHARS = 16 * 1024


@dataclass(frozen=True)
class PartialUpdate:
    """Replicas' unfinished lines (a progress bar being redrawn), as a terminal shows them now.
    Each carries the seq the line will have once finished, and is replaced by that line; an
    empty text means the replica has no unfinished line any more. Not a line: readers do not
    count it, and a resume's `since` is unaffected by it. Its text is at most PARTIAL_MAX_CHARS
    long."""

    lines: list[LogLine]


@dataclass(frozen=True)
class JobUpdate:
    job: Job


LogEvent = LogBatch | JobUpdate | PartialUpdate

# Where a reader resumes: replica name -> the next seq it wants. Missing replicas start at 0.
Cursor = dict[str, int]
