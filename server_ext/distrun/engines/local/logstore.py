"""Append-only per-replica log files with a sparse index, readable while they are written.

`logs/<replica>.log` holds one record per line, `b"<epoch_ms>\\t<utf-8 text>\\n"`. A record is
complete only once its newline is on disk, so a reader never returns a torn write.
`logs/<replica>.idx` holds the byte offset of every `INDEX_EVERY`-th record as 8 little-endian
bytes, so reading from any seq costs one index read plus at most `INDEX_EVERY - 1` skipped
records. One process writes a replica's log (the job's supervisor); any number may read it.

`logs/<replica>.partial`, while it exists, holds the replica's unfinished line (the text after
its last newline, as a terminal shows it) as one record `b"<epoch_ms>\t<seq>\t<text>"`, where
seq is the one the line will have once finished. It is replaced atomically, a few times a
second at most, and removed once the replica has no unfinished line.
"""

import codecs
import os
import re
import struct
from bisect import bisect_left
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from distrun.core.logs import LineRun, LogLine
from distrun.engines.local.private_files import write_private

INDEX_EVERY = 1024
_INDEX_ENTRY = struct.Struct("<Q")
_READ_CHUNK = 64 * 1024
_MIN_READ = 4 * 1024
DEFAULT_MAX_READ_BYTES = 4 * 1024 * 1024


def log_path(log_dir: Path, replica: str) -> Path:
    return log_dir / f"{replica}.log"


def index_path(log_dir: Path, replica: str) -> Path:
    return log_dir / f"{replica}.idx"


def partial_path(log_dir: Path, replica: str) -> Path:
    return log_dir / f"{replica}.partial"


class LineSplitter:
    """Turns a byte stream into lines: bytes up to `\\n`, a line longer than `max_line_bytes`
    cut into pieces (at a UTF-8 character boundary when there is one). Holds at most one
    partial line, so memory stays bounded whatever the stream."""

    def __init__(self, max_line_bytes: int) -> None:
        if max_line_bytes < 4:
            raise ValueError("max_line_bytes must be at least 4")
        self._max = max_line_bytes
        self._partial = bytearray()
        self._scanned = 0  # bytes of the held partial line known to hold no newline

    def feed(self, data: bytes) -> list[bytes]:
        self._partial += data
        last = self._partial.rfind(b"\n")
        if last >= 0:  # split in C where no finished line is over the limit (the usual case)
            finished = bytes(self._partial[:last]).split(b"\n")
            if max(map(len, finished)) <= self._max:
                del self._partial[: last + 1]
                self._scanned = 0
                return finished + self._scan()
        return self._scan()

    def _scan(self) -> list[bytes]:
        """The held bytes' lines, found one by one, a line over the limit cut into pieces;
        what is left is the partial line."""
        lines: list[bytes] = []
        start = 0
        while True:
            # A line redrawn in place grows by small writes: never scan its start again.
            newline = self._partial.find(b"\n", max(start, self._scanned), start + self._max + 1)
            if newline >= 0:
                lines.append(bytes(self._partial[start:newline]))
                start = newline + 1
            elif len(self._partial) - start > self._max:
                cut = _utf8_boundary(self._partial, start, start + self._max)
                lines.append(bytes(self._partial[start:cut]))
                start = cut
            else:
                break
        del self._partial[:start]
        self._scanned = len(self._partial)
        return lines

    def flush(self) -> list[bytes]:
        """The held partial line, if any (at EOF)."""
        rest, self._partial = bytes(self._partial), bytearray()
        self._scanned = 0
        return [rest] if rest else []

    def unfinished(self) -> str:
        """The held partial line's text so far, without a character cut at its end."""
        return codecs.getincrementaldecoder("utf-8")("replace").decode(bytes(self._partial))


def _utf8_boundary(data: bytearray, start: int, cut: int) -> int:
    """`cut` moved back (at most 3 bytes) so it does not split a UTF-8 character."""
    for candidate in range(cut, max(start, cut - 3), -1):
        if data[candidate] & 0xC0 != 0x80:
            return candidate
    return cut


def decode_line(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class LogWriter:
    """Appends records to one replica's log. Reopening an existing log continues its seqs
    and drops a torn last record left by a crashed writer."""

    def __init__(self, log_dir: Path, replica: str) -> None:
        log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        self._log_fd = os.open(log_path(log_dir, replica), flags, 0o600)
        self._idx_fd = os.open(index_path(log_dir, replica), flags, 0o600)
        self._offset, self.next_seq = self._recover()

    def append_captured(self, when: float, raw_lines: list[bytes]) -> None:
        """Writes lines a replica printed, as bytes without their newline, all captured at
        `when`: the same records as `append` with each decoded by `decode_line`, built in C
        when the bytes are valid UTF-8 (the supervisor's path, at every line a replica prints)."""
        if not raw_lines:
            return
        joined = b"\n".join(raw_lines)
        if not joined.isascii():
            try:
                joined.decode("utf-8")
            except UnicodeDecodeError:
                self.append([(when, decode_line(raw)) for raw in raw_lines])
                return
        prefix = b"%d\t" % round(when * 1000)
        records = prefix + joined.replace(b"\n", b"\n" + prefix) + b"\n"
        first = -self.next_seq % INDEX_EVERY  # the first line that starts an index entry
        index = b"".join(
            _INDEX_ENTRY.pack(self._offset + k * (len(prefix) + 1) + sum(map(len, raw_lines[:k])))
            for k in range(first, len(raw_lines), INDEX_EVERY)
        )
        _write_all(self._log_fd, records)
        _write_all(self._idx_fd, index)  # after the records, so an entry never points ahead
        self._offset += len(records)
        self.next_seq += len(raw_lines)

    def append(self, lines: list[tuple[float, str]]) -> None:
        """Writes `(epoch_seconds, text)` lines as whole records; `text` has no newline."""
        records = bytearray()
        index = bytearray()
        for when, text in lines:
            if "\n" in text:
                raise ValueError("a log line cannot contain a newline")
            if self.next_seq % INDEX_EVERY == 0:
                index += _INDEX_ENTRY.pack(self._offset + len(records))
            records += b"%d\t%s\n" % (round(when * 1000), text.encode("utf-8", "replace"))
            self.next_seq += 1
        _write_all(self._log_fd, records)
        _write_all(self._idx_fd, index)  # after the records, so an entry never points ahead
        self._offset += len(records)

    def close(self) -> None:
        os.close(self._log_fd)
        os.close(self._idx_fd)

    def _recover(self) -> tuple[int, int]:
        size = os.fstat(self._log_fd).st_size
        entries = [offset for offset in _read_index(self._idx_fd) if offset < size]
        offset = entries[-1] if entries else 0
        seq = (len(entries) - 1) * INDEX_EVERY if entries else 0
        chunk = _READ_CHUNK
        while True:
            data = os.pread(self._log_fd, chunk, offset)
            end = data.rfind(b"\n")
            if end < 0:
                if len(data) < chunk:
                    break
                chunk *= 2
                continue
            chunk = _READ_CHUNK
            for record in data[:end].split(b"\n"):
                if seq % INDEX_EVERY == 0 and seq // INDEX_EVERY == len(entries):
                    entries.append(offset)
                offset += len(record) + 1
                seq += 1
        os.ftruncate(self._log_fd, offset)  # a torn last record is dropped
        entries = [entry for entry in entries if entry < offset]
        os.ftruncate(self._idx_fd, 0)
        _write_all(self._idx_fd, b"".join(_INDEX_ENTRY.pack(entry) for entry in entries))
        return offset, seq


def write_partial(log_dir: Path, replica: str, seq: int, when: float, text: str) -> None:
    """Replaces the replica's unfinished line (`text` has no newline)."""
    path = partial_path(log_dir, replica)
    tmp = path.with_name(f".{path.name}.tmp")
    write_private(tmp, b"%d\t%d\t%s" % (round(when * 1000), seq, text.encode("utf-8", "replace")))
    os.replace(tmp, path)


def clear_partial(log_dir: Path, replica: str) -> None:
    try:
        os.unlink(partial_path(log_dir, replica))
    except FileNotFoundError:
        pass


def read_partial(path: str, replica: str) -> LogLine | None:
    """The unfinished line recorded at `path` (a `partial_path`), or None."""
    try:
        with open(path, "rb") as file:
            record = file.read()
    except FileNotFoundError:
        return None
    millis, _, rest = record.partition(b"\t")
    seq, _, text = rest.partition(b"\t")
    if not (millis.isdigit() and seq.isdigit()):
        return None  # not written by a supervisor: never shown
    return LogLine(replica, int(seq), int(millis) / 1000, decode_line(text))


class LogReader:
    """Reads one replica's log; the file may not exist yet (no lines). Every follower of a job
    holds one per replica for as long as it follows, so it is kept small: slots and plain-string
    paths (a `Path` is two more objects for the garbage collector to scan, each)."""

    __slots__ = ("_fd", "_idx_path", "_log_path", "replica")

    def __init__(self, log_dir: Path, replica: str) -> None:
        self.replica = replica
        self._log_path = str(log_path(log_dir, replica))
        self._idx_path = str(index_path(log_dir, replica))
        self._fd: int | None = None

    def read(self, from_seq: int, max_lines: int) -> list[LogLine]:
        return self.tail(from_seq).read(max_lines)

    def tail(self, from_seq: int) -> "LogTail":
        """A cursor at `from_seq` that remembers its byte offset, so following never rescans."""
        offset, seq = 0, 0
        try:
            with open(self._idx_path, "rb") as idx:
                entries = os.fstat(idx.fileno()).st_size // _INDEX_ENTRY.size
                slot = min(from_seq // INDEX_EVERY, entries - 1)
                if slot >= 0:
                    idx.seek(slot * _INDEX_ENTRY.size)
                    (offset,) = _INDEX_ENTRY.unpack(idx.read(_INDEX_ENTRY.size))
                    seq = slot * INDEX_EVERY
        except FileNotFoundError:
            pass
        return LogTail(self, want=from_seq, offset=offset, seq=seq)

    def tail_at(self, position: "TailPosition") -> "LogTail":
        """A cursor at a position another tail of the same log reached (no index read)."""
        return LogTail(
            self, want=position.next_seq, offset=position.offset, seq=position.record_seq
        )

    def size(self) -> int:
        try:
            return os.stat(self._log_path).st_size
        except FileNotFoundError:
            return 0

    def pread(self, size: int, offset: int) -> bytes:
        if self._fd is None:
            try:
                self._fd = os.open(self._log_path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                return b""
        return os.pread(self._fd, size, offset)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


@dataclass(frozen=True)
class TailPosition:
    """Where a `LogTail` stands: the next seq it returns, and the byte offset of record
    `record_seq` (at or before `next_seq`) from which it scans on."""

    next_seq: int
    offset: int
    record_seq: int


class LogTail:
    """A reading position in one replica's log: `next_seq` is the next line it returns."""

    def __init__(self, reader: LogReader, *, want: int, offset: int, seq: int) -> None:
        self._reader = reader
        self.next_seq = want
        self._offset = offset  # byte offset of record `_seq`
        self._seq = seq

    @property
    def offset(self) -> int:
        return self._offset

    @property
    def position(self) -> TailPosition:
        return TailPosition(self.next_seq, self._offset, self._seq)

    def read(self, max_lines: int, max_bytes: int = DEFAULT_MAX_READ_BYTES) -> list[LogLine]:
        """Up to `max_lines` complete lines (and about `max_bytes`), advancing the cursor."""
        return self.read_run(max_lines, max_bytes).lines()

    def read_run(self, max_lines: int, max_bytes: int = DEFAULT_MAX_READ_BYTES) -> LineRun:
        """`read`'s lines as one run, built without a Python object per line."""
        run = LineRun(self._reader.replica, self.next_seq, [], [])
        read_bytes = 0
        longer = 0  # the size to read for a record longer than the last read
        while len(run) < max_lines and read_bytes < max_bytes:
            size = longer or self._read_size(max_lines - len(run), max_bytes - read_bytes)
            data = self._reader.pread(size, self._offset)
            end = data.rfind(b"\n")
            if end < 0:
                if len(data) < size:
                    break  # nothing more, or only a record still being written
                longer = 2 * size
                continue
            longer = 0
            if self._take_whole(run, data, end + 1, max_lines, max_bytes - read_bytes):
                read_bytes += end + 1
                if len(data) < size:
                    break  # read to the end of what is written
                continue
            records = data[:end].split(b"\n")
            skipped = min(self.next_seq - self._seq, len(records))  # before the wanted seq
            start = sum(map(len, records[:skipped])) + skipped
            wanted = records[skipped:]
            # Bytes taken before each record, its newline counted: whole records are taken
            # while fewer than max_bytes were (the one that reaches it still is).
            before = list(accumulate(map((1).__add__, map(len, wanted)), initial=0))
            taken = min(
                len(wanted), max_lines - len(run), bisect_left(before, max_bytes - read_bytes)
            )
            self._parse_into(run, data[start : start + before[taken]], taken)
            read_bytes += before[taken]
            self._advance(start + before[taken], skipped + taken)
            if taken < len(wanted):
                break
        return run

    def _take_whole(
        self, run: LineRun, data: bytes, size: int, max_lines: int, max_bytes: int
    ) -> bool:
        """Takes the `size` bytes of whole records at the start of `data` if they are all
        wanted and within the limits (the common case while following), without splitting
        them into records to find where to cut."""
        if self.next_seq != self._seq or size > max_bytes:
            return False
        count = data.count(b"\n", 0, size)
        if len(run) + count > max_lines:
            return False
        self._parse_into(run, data[:size], count)
        self._advance(size, count)
        return True

    def _advance(self, size: int, records: int) -> None:
        """Moves the cursor past `records` whole records, `size` bytes."""
        self._offset += size
        self._seq += records
        self.next_seq = max(self.next_seq, self._seq)

    def _read_size(self, lines: int, size: int) -> int:
        """Not much more than `lines` lines and `size` bytes take, by the log's mean record so
        far: whatever is read is parsed (at the live edge a whole chunk would be parsed for a
        few lines)."""
        if self._seq:
            size = min(size, (self._offset // self._seq + 1) * lines)
        return min(_READ_CHUNK, max(size, _MIN_READ))

    def _parse_into(self, run: LineRun, records: bytes, count: int) -> None:
        """Adds `count` whole records (each ending in a newline) to `run`."""
        if not count:
            return
        # Split before each record's time (the first one's too, by the newline put in
        # front): [""] + [millis, text] per record, in C, with no object per match.
        fields = _RECORD_START.split("\n" + decode_line(records[:-1]))
        if len(fields) != 2 * count + 1 or fields[0]:
            lines = records[:-1].split(b"\n")
            bad = next(r for r in lines if not _RECORD.fullmatch(decode_line(r + b"\n")))
            raise ValueError(f"{run.replica}'s log holds a malformed record: {bad!r:.80}")
        run.times_ms.extend(map(int, fields[1::2]))
        run.texts.extend(fields[2::2])


# A record as the supervisor writes it: epoch milliseconds, a tab, the text and a newline.
# Matched whole, record after record (no search for line starts through the texts).
_RECORD = re.compile(r"([0-9]+)\t([^\n]*)\n")
_RECORD_START = re.compile(r"\n([0-9]+)\t")


def _read_index(fd: int) -> list[int]:
    size = os.fstat(fd).st_size
    data = os.pread(fd, size - size % _INDEX_ENTRY.size, 0)
    return [entry for (entry,) in _INDEX_ENTRY.iter_unpack(data)]


def _write_all(fd: int, data: bytes | bytearray) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
