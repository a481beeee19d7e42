"""Python tracebacks in replicas' output: each replica's last one, and the same traceback on
several replicas told once, with the replicas listed (a data-parallel job's replicas often all
fail on the same line)."""

from dataclasses import dataclass, field
from typing import Any

TRACEBACK_START = "Traceback (most recent call last):"
MAX_TRACEBACK_LINES = 200  # a deeper one keeps its start and its exception line


@dataclass
class TracebackTracker:
    """Fed a replica's lines in order, keeps its last complete traceback: from
    `Traceback (most recent call last):` through the frames (indented lines) to the exception
    line, the first one not indented after them."""

    last: list[str] | None = None
    _open: list[str] | None = field(default=None, repr=False)

    @property
    def capturing(self) -> bool:
        """Inside a traceback: every line counts (else only a traceback's start does)."""
        return self._open is not None

    def feed(self, lines: list[str]) -> None:
        for line in lines:
            if line == TRACEBACK_START:
                self._open = [line]
            elif self._open is not None:
                if line.startswith((" ", "\t")):
                    if len(self._open) < MAX_TRACEBACK_LINES - 1:
                        self._open.append(line)
                else:
                    self.last, self._open = [*self._open, line], None


@dataclass(frozen=True)
class TracebackGroup:
    """One traceback and every replica that printed it, in the job's replica order."""

    replicas: list[str]
    lines: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "lines": self.lines}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "TracebackGroup":
        return cls(list(data["replicas"]), list(data["lines"]))


def group_tracebacks(by_replica: dict[str, list[str]]) -> list[TracebackGroup]:
    """Identical tracebacks together, in the order their first replica comes in `by_replica`."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for replica, lines in by_replica.items():
        groups.setdefault(tuple(lines), []).append(replica)
    return [TracebackGroup(replicas, list(lines)) for lines, replicas in groups.items()]
