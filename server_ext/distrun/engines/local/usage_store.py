"""A local job's usage series on disk, `<job_dir>/usage/samples.jsonl`: one JSON object per
sample (`UsageSample.to_json`), appended by the job's supervisor, read by any server.

Bounded: once the file holds `2 * keep` samples, the supervisor replaces it (atomically) by its
newest `keep`; a reader that finds another file under the name starts it from the top, skipping
the samples it has. A sample is complete once its newline is written, so a reader never parses
a torn one.
"""

import json
import os
from pathlib import Path

from distrun.core.usage import ReplicaUsage, UsageSample
from distrun.engines.local.private_files import write_private

DEFAULT_KEEP = 3600  # an hour at one sample a second


def usage_path(job_dir: Path) -> Path:
    return job_dir / "usage" / "samples.jsonl"


class UsageWriter:
    """Appends a job's samples (one writer: its supervisor), numbering them from 0."""

    def __init__(self, path: Path, keep: int = DEFAULT_KEEP) -> None:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        self._path = path
        self._keep = keep
        self._kept: list[bytes] = []  # the file's records, newest last (at most 2 * keep)
        self._next_seq = 0
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)

    def append(self, at: float, replicas: dict[str, ReplicaUsage]) -> UsageSample:
        sample = UsageSample(self._next_seq, at, replicas)
        self._next_seq += 1
        record = json.dumps(sample.to_json(), separators=(",", ":")).encode() + b"\n"
        self._kept.append(record)
        if len(self._kept) >= 2 * self._keep:
            self._compact()
        else:
            os.write(self._fd, record)
        return sample

    def _compact(self) -> None:
        del self._kept[: len(self._kept) - self._keep]
        tmp = self._path.with_name(f".{self._path.name}.tmp")
        write_private(tmp, b"".join(self._kept))
        os.replace(tmp, self._path)
        os.close(self._fd)
        self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)

    def close(self) -> None:
        os.close(self._fd)


class UsageTail:
    """Reads a job's samples as they are appended: each `read` returns the complete ones not
    returned before (from `since` on)."""

    def __init__(self, path: Path, since: int = 0) -> None:
        self._path = path
        self._next_seq = since
        self._inode: int | None = None
        self._offset = 0

    def read_new(self) -> list[UsageSample]:
        """`read`, where the file changed since the last one (a `stat` otherwise): a few new
        samples, read on the caller's thread."""
        try:
            stat = os.stat(self._path)
        except FileNotFoundError:
            return []
        if stat.st_ino == self._inode and stat.st_size == self._offset:
            return []
        return self.read()

    def read(self) -> list[UsageSample]:
        try:
            with open(self._path, "rb") as file:
                inode = os.fstat(file.fileno()).st_ino
                if inode != self._inode:  # new, or replaced by the writer's compaction
                    self._inode, self._offset = inode, 0
                file.seek(self._offset)
                data = file.read()
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        self._offset += end
        samples = []
        for record in data[:end].splitlines():
            try:
                sample = UsageSample.from_json(json.loads(record))
            except (ValueError, TypeError, KeyError, AttributeError):
                continue  # not ours to fail on: a record of some other writer
            if sample.seq >= self._next_seq:
                samples.append(sample)
                self._next_seq = sample.seq + 1
        return samples


def read_usage(job_dir: Path, since: int = 0) -> list[UsageSample]:
    """The job's samples from seq `since` on that the file still keeps."""
    return UsageTail(usage_path(job_dir), since).read()
