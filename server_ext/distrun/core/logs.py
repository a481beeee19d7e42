"""Log lines as engines read them, and the events a follower of a job receives."""

from dataclasses import dataclass

from distrun.core.job import Job


@dataclass(frozen=True)
class LogLine:
    replica: str
    seq: int  # 0-based, per replica, gap-free and never reused
    time: float  # epoch seconds when the line was captured
    text: str  # without the trailing newline; invalid UTF-8 replaced by U+FFFD


@dataclass(frozen=True)
class LogBatch:
    lines: list[LogLine]


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
