"""Sequence numbers that survive the kubelet's log rotation.

The pod-log API serves a container's current log file only (kubernetes#59902). When the kubelet
rotates it (at `containerLogMaxSize`), a live follower reads on into the new file, but a reader
that starts afterwards sees the new file from its first line, and nothing says how many lines
came before. So live followers leave anchors: for a line they have just read, its index in the
instance's log and what identifies that line in anyone's copy of the file (the runtime's
timestamp as the API writes it, how many lines just before it carry the same timestamp, a
checksum of its bytes). A follower anchors the first line it reads of an instance, then a line
every `every_bytes` of log, and, once the file it reads may have been rotated, every
`every_seconds` too. A reader finds where the current file starts by the first anchor in it,
counting the lines before it backwards.

A follower's stream starts at the current file's first line, so it knows how much of that
file it has read; the kubelet rotates a file only once it holds `rotation_bytes`
(containerLogMaxSize). Until the stream has read half that (counting more per line than a
runtime's own prefix), no rotation can have come between its anchors: the file it reads is
the one its first anchor numbers, and anchors by the clock would only cost the API server a
write per job and minute (150 jobs, 150 writes a minute) for files that never rotate.

A file with no anchor in it:
- the instance has no anchor at all: nobody has numbered it, so it is numbered from 0 (the
  first follower anchors that);
- the instance ended and its line count is in the ledger: the file holds its last lines;
- otherwise the file began with a rotation after the newest anchor. A follower waits
  `claim_after` for the live follower's next anchor (there may be one, in another server, which
  places one within `every_seconds` and writes it within `flush_seconds`) and
  then claims the file: its first line is numbered `claim_gap` after the newest anchor, more
  than a follower can have read past its newest anchor. The lines that went with the rotated
  file (which no reader can get) leave a gap in the seqs, never a repeat. A claim is an anchor
  too, so every reader agrees; a live follower's own anchors replace the claims before them.
  A read that does not follow (REST, a download) leaves such a file out until it is anchored.
"""

import json
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

ANCHORS_ANNOTATION = "distrun.io/log-anchors"
ANCHORS_KEPT = 16  # per instance; with the default spacing, more than a 10 MiB log file holds
INSTANCES_KEPT = 2  # per replica: the API serves the current and the previous instance only
MAX_INDEX = 2**36  # more lines than a container writes (logs.MAX_LEDGER_LINES)
MAX_STAMP_CHARS = 64  # an RFC 3339 time with nanoseconds is 30
SHORTEST_LINE = 22  # bytes of a line read with timestamps: "2006-01-02T15:04:05Z " and "\n"

LineKey = tuple[str, int, int]  # timestamp, lines just before with the same one, crc32
# replica -> instance key -> anchors in index order
AnchorBook = dict[str, dict[str, list["Anchor"]]]


# What a runtime's log file holds for a line beyond what the log API sends, counted high: CRI's
# " stdout F " is 9 bytes, Docker's JSON wrapping some 40 plus escapes.
FILE_BYTES_A_LINE = 64


@dataclass(frozen=True)
class AnchorPolicy:
    every_bytes: int = 1 << 20
    every_seconds: float = 30.0  # once the file may have been rotated
    # A job's new anchors are written together, at most this often: one write per job and
    # minute, however many replicas (150 jobs x 8 replicas: 150 writes/min, not 400-700).
    flush_seconds: float = 60.0
    claim_after: float = 120.0  # more than every_seconds and flush_seconds together
    rotation_bytes: int = 10 << 20  # the kubelet's containerLogMaxSize (its default)

    def __post_init__(self) -> None:
        if self.rotation_bytes < 0:
            raise ValueError(
                f"log_rotation_bytes ({self.rotation_bytes}) must be the kubelet's"
                " containerLogMaxSize in bytes, or 0 when files may rotate at any size"
            )
        if self.claim_after <= self.every_seconds + self.flush_seconds:
            raise ValueError(
                f"log_claim_after ({self.claim_after:g} s) must be more than log_anchor_seconds"
                f" and log_anchor_flush_seconds together ({self.every_seconds:g} +"
                f" {self.flush_seconds:g} s): a reader must wait out the live follower's next"
                " anchor before it claims a rotated file"
            )

    @property
    def claim_gap(self) -> int:
        """More lines than a follower reads between two anchors."""
        return self.every_bytes // SHORTEST_LINE + 1

    @property
    def scan_bytes(self) -> int:
        """How far into a file its first anchor can be, when live followers anchored it."""
        return 2 * self.every_bytes


@dataclass(frozen=True)
class Anchor:
    index: int  # the line's index in its instance's log
    key: LineKey
    claimed: bool = False

    def to_json(self) -> list[Any]:
        stamp, run, crc = self.key
        return [self.index, stamp, run, crc, int(self.claimed)]

    @classmethod
    def from_json(cls, raw: Any) -> "Anchor | None":
        """The anchor recorded as `raw`, or None when it is not one this module writes (the
        ConfigMap is the user's to edit: such an entry is left out)."""
        if not (isinstance(raw, list) and len(raw) == 5):
            return None
        index, stamp, run, crc, claimed = raw
        ok = (
            isinstance(stamp, str)
            and len(stamp) <= MAX_STAMP_CHARS
            and _whole(index, MAX_INDEX)
            and _whole(run, MAX_INDEX)
            and _whole(crc, 0xFFFFFFFF)
            and claimed in (0, 1)
            and not isinstance(claimed, float)
        )
        return cls(index, (stamp, run, crc), bool(claimed)) if ok else None


def _whole(value: Any, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high


class LineKeys:
    """The keys of consecutive lines of one log file, read from its start."""

    def __init__(self) -> None:
        self._stamp = ""
        self._run = 0

    def next(self, raw: bytes) -> LineKey:
        stamp_bytes, _, _ = raw.partition(b" ")
        stamp = stamp_bytes.decode("ascii", "replace")
        self._run = self._run + 1 if stamp == self._stamp else 0
        self._stamp = stamp
        return stamp, self._run, zlib.crc32(raw)


class FileScan:
    """Where a log file starts in its instance's log, found from its lines in order."""

    def __init__(self, anchors: Iterable[Anchor]) -> None:
        self._index = {anchor.key: anchor.index for anchor in anchors}
        self._keys = LineKeys()
        self.lines = 0  # seen so far
        self.bytes = 0
        self.first_key: LineKey | None = None
        self.start: int | None = None if self._index else 0

    def see(self, raw: bytes) -> bool:
        """Takes the next line; True once the start is known."""
        if self.start is not None:
            return True
        key = self._keys.next(raw)
        if self.first_key is None:
            self.first_key = key
        index = self._index.get(key)
        if index is not None and index >= self.lines:  # a lower one is no anchor of this file
            self.start = index - self.lines
        self.lines += 1
        self.bytes += len(raw) + 1
        return self.start is not None


class AnchorPlacer:
    """When a live follower reading a file from its start leaves its next anchor."""

    def __init__(self, policy: AnchorPolicy, start: int) -> None:
        self.policy = policy
        self._keys = LineKeys()
        self._index = start
        self._bytes = 0
        self._file_bytes = 0  # of the file, as much as it can hold for the lines read
        self._at: float | None = None  # when the last anchor was left; None: none yet

    def read(self, raw: bytes, now: float) -> Anchor | None:
        """Takes the next line; an anchor on it when one is due."""
        key = self._keys.next(raw)
        index = self._index
        self._index += 1
        self._bytes += len(raw) + 1
        self._file_bytes += len(raw) + FILE_BYTES_A_LINE
        due = (
            self._at is None
            or self._bytes >= self.policy.every_bytes
            or (now - self._at >= self.policy.every_seconds and self.may_have_rotated)
        )
        if not due:
            return None
        self._at, self._bytes = now, 0
        return Anchor(index, key)

    @property
    def may_have_rotated(self) -> bool:
        """Whether the kubelet may have rotated the file since this stream's first line."""
        return self._file_bytes >= self.policy.rotation_bytes // 2


def newest_index(anchors: list[Anchor]) -> int:
    return max((anchor.index for anchor in anchors), default=-1)


def sortable(stamp: str) -> str:
    """An RFC 3339 time with nanoseconds (trailing zeros trimmed, as the API writes them) in a
    form that sorts as the times do."""
    whole, _, fraction = stamp.removesuffix("Z").partition(".")
    return f"{whole}.{fraction.ljust(9, '0')}"


def merge(old: list[Anchor], new: list[Anchor]) -> list[Anchor]:
    """An instance's anchors with `new` added: one per index, the claims on lines no later than
    a live follower's newest own anchor dropped (its count is the true one), the newest
    ANCHORS_KEPT kept."""
    by_index = {anchor.index: anchor for anchor in old}
    by_index.update((anchor.index, anchor) for anchor in new)
    anchors = sorted(by_index.values(), key=lambda anchor: anchor.index)
    own = [sortable(a.key[0]) for a in anchors if not a.claimed]
    if own:
        newest_own = max(own)
        anchors = [a for a in anchors if not (a.claimed and sortable(a.key[0]) <= newest_own)]
    return anchors[-ANCHORS_KEPT:]


def read_book(raw: str | None) -> AnchorBook:
    try:
        data = json.loads(raw or "{}")
    except (ValueError, RecursionError):  # the user's to edit: also too deep a nesting
        return {}
    book: AnchorBook = {}
    if not isinstance(data, dict):
        return book
    for replica, instances in data.items():
        if not isinstance(instances, dict):
            continue
        for key, entries in instances.items():
            if not isinstance(entries, list):
                continue
            anchors = [Anchor.from_json(entry) for entry in entries]
            book.setdefault(replica, {})[key] = [a for a in anchors if a is not None]
    return book


def add_to_book(book: AnchorBook, replica: str, key: str, anchors: list[Anchor]) -> None:
    instances = book.setdefault(replica, {})
    instances[key] = merge(instances.get(key, []), anchors)
    for old in list(instances)[:-INSTANCES_KEPT]:
        del instances[old]


def write_book(book: AnchorBook) -> str:
    data = {
        replica: {key: [a.to_json() for a in anchors] for key, anchors in instances.items()}
        for replica, instances in book.items()
    }
    return json.dumps(data, separators=(",", ":"))
