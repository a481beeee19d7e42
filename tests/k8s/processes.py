"""Long-running child processes of the test cluster: each in its own process group, its output in
a log file, stopped as a group, and killed by the kernel if the test run itself dies."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

PR_SET_PDEATHSIG = 1


class ComponentError(RuntimeError):
    """A cluster component exited or never became ready; the message carries its log's tail."""


def die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the process that started it dies, so a
    test run killed with SIGKILL leaves no control plane behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class Component:
    def __init__(
        self, name: str, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env  # None: this process's environment
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=die_with_parent,  # noqa: PLW1509 (we start these from one thread)
            )

    def wait_ready(self, is_ready: Callable[[], bool], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not is_ready():
            if self.process is None or self.process.poll() is not None:
                raise ComponentError(f"{self.name} exited during startup\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ComponentError(
                    f"{self.name} not ready after {timeout:.0f}s\n{self.log_tail()}"
                )
            time.sleep(0.1)

    def check_alive(self) -> None:
        if self.process is None or self.process.poll() is not None:
            raise ComponentError(f"{self.name} is not running\n{self.log_tail()}")

    def stop(self, grace: float = 10.0) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        signal_group(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            signal_group(process.pid, signal.SIGKILL)
            process.wait()
        # The leader is gone; anything it left in its group goes too.
        signal_group(process.pid, signal.SIGKILL)

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill ends it: no shutdown of any kind."""
        if self.process is not None:
            signal_group(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def watches(self, directory: Path) -> int:
        """How many inotify watchers of this process watch `directory` (0 when it is not
        running)."""
        if self.process is None or self.process.poll() is not None:
            return 0
        return inotify_watchers(self.process.pid, directory)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return f"(no log at {self.log_path})"
        return f"--- last lines of {self.log_path} ---\n" + "\n".join(text.splitlines()[-lines:])


def inotify_watchers(pid: int, path: Path) -> int:
    """How many of process `pid`'s inotify instances watch `path`, read from /proc (the kernel
    lists each watch in the instance's fdinfo as "inotify wd:.. ino:<hex> sdev:<hex> ...")."""
    target = path.stat()
    device = (os.major(target.st_dev) << 20) | os.minor(target.st_dev)  # the kernel's encoding
    wanted = f" ino:{target.st_ino:x} sdev:{device:x} "
    count = 0
    fd_dir = Path(f"/proc/{pid}/fd")
    with contextlib.suppress(FileNotFoundError):
        for fd in fd_dir.iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == "anon_inode:inotify":
                    info = Path(f"/proc/{pid}/fdinfo/{fd.name}").read_text()
                    count += wanted in info
    return count


def signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass


def http_ok(url: str, context: ssl.SSLContext | None = None, token: str | None = None) -> bool:
    """True when `url` answers 200; connection errors and other statuses are "not yet"."""
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
        return False


def unverified_loopback_context() -> ssl.SSLContext:
    """For the health endpoints of the controller-manager and scheduler, which serve an
    in-memory self-signed certificate on 127.0.0.1."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
