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


@dataclass(frozen=True)
class JobUpdate:
    job: Job


LogEvent = LogBatch | JobUpdate

# Where a reader resumes: replica name -> the next seq it wants. Missing replicas start at 0.
Cursor = dict[str, int]
