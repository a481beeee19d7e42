"""Files and directories only their owner can read: a local job's directory holds its code and
its `%env` values, so every job's files are 0600 in 0700 directories, whatever the umask."""

import os
from pathlib import Path


def write_private(path: Path, data: bytes) -> None:
    """Writes `path` readable by its owner only (0600): a job's files hold its code and its
    `%env` values."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with open(fd, "wb") as file:
        file.write(data)


def make_private_dir(path: Path) -> None:
    """Creates `path` (and missing parents) for its owner only (0700), and takes group and
    other rights away from it if it exists and is ours (a state directory made before this
    rule, whose jobs would otherwise stay readable)."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = path.stat()
    if info.st_uid == os.getuid() and info.st_mode & 0o077:
        path.chmod(0o700)
