"""The per-job supervisor of the local engine: a detached process that owns a job's replicas.

`python -m distrun.supervisor <job_dir>` starts every replica as its own process group, writes
each replica's merged stdout/stderr into the log store, applies the restart policy, the
success policy and the deadline, and records everything in `status.json`. The server only
reads these files (and signals this process to cancel), so it can restart while jobs run.

The job directory (`JobFiles`) is the contract between this process and the engine.
"""

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .engines.base import JobState, ReplicaStatus
from .entrypoint import argv as entrypoint_argv
from .frameworks import FRAMEWORKS
from .logstore import LineSplitter, LogWriter, decode_line
from .replica_env import Address, Addresses, mpi_hostfile, replica_env
from .spec import JobSpec, Limits

LAST_LINES = 20
_READ_SIZE = 64 * 1024
_PR_SET_PDEATHSIG = 1
# Parse a stored spec without the operator's size limits: they were enforced at submit time.
_STORED_SPEC_LIMITS = Limits(
    max_replicas=1_000_000, max_gpus_per_replica=1_000_000, max_payload_bytes=1 << 60
)


class JobFiles:
    """Where a job's files live: `<state_dir>/jobs/<job_id>/`."""

    def __init__(self, job_dir: Path) -> None:
        self.dir = job_dir
        self.job = job_dir / "job.json"  # id, owner, created_at, spec, runtime; written once
        self.status = job_dir / "status.json"  # replaced atomically on every change
        self.supervisor = job_dir / "supervisor.json"  # pid and start time of the supervisor
        self.supervisor_log = job_dir / "supervisor.log"
        self.code = job_dir / "code"
        self.logs = job_dir / "logs"


@dataclass
class Runtime:
    """How the supervisor runs replicas; chosen by the engine at submit time."""

    python: str
    entrypoint: str  # "main.py" or "main.ipy"
    grace_seconds: float
    max_log_line_bytes: int

    def argv(self) -> list[str]:
        return entrypoint_argv(self.python, self.entrypoint)


@dataclass
class JobStatus:
    """The content of status.json."""

    state: JobState
    replicas: list[ReplicaStatus]
    pids: dict[str, int] = field(default_factory=dict)  # replica -> pid = its process group
    started_at: float | None = None
    finished_at: float | None = None
    reason: str | None = None
    failed_replica: str | None = None
    last_lines: list[str] = field(default_factory=list)
    # True once every replica is reaped and every log line written: nothing will change.
    finalized: bool = False

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        for replica in data["replicas"]:
            replica["state"] = replica["state"].value
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "JobStatus":
        replicas = [
            ReplicaStatus(**{**replica, "state": JobState(replica["state"])})
            for replica in data["replicas"]
        ]
        return cls(**{**data, "state": JobState(data["state"]), "replicas": replicas})

    @classmethod
    def pending(cls, spec: JobSpec) -> "JobStatus":
        replicas = []
        for name in spec.replica_names():
            role, _, index = name.rpartition("-")
            replicas.append(ReplicaStatus(name=name, role=role, index=int(index)))
        return cls(state=JobState.PENDING, replicas=replicas)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise TypeError(f"{path} does not hold a JSON object")
    return data


def stored_spec(job: dict[str, Any]) -> JobSpec:
    return JobSpec.from_dict(job["spec"], _STORED_SPEC_LIMITS)


def process_start_time(pid: int) -> int | None:
    """The start time (clock ticks after boot) of a live, non-zombie `pid`; None otherwise.
    With the pid, it names a process uniquely: a reused pid has another start time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def kill_job_processes(job_id: str) -> int:
    """SIGKILLs every process of the job that outlived its replica's process group (one
    started with `setsid`, say): every process that carries DISTRUN_JOB_ID=job_id in its
    environment, as a pod's end would stop everything in its container. Scans again until none
    is left, since one may fork meanwhile; returns how many were killed."""
    marker = f"DISTRUN_JOB_ID={job_id}".encode()
    killed = 0
    for _ in range(10):
        found = 0
        for pid in _pids():
            found += _kill_if_marked(pid, marker)
        killed += found
        if not found:
            break
    return killed


def _pids() -> list[int]:
    me = os.getpid()
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and int(name) != me]


def _kill_if_marked(pid: int, marker: bytes) -> bool:
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:  # gone
        return False
    try:
        # Read after the pidfd pins the process: a reused pid cannot be killed by mistake.
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        if marker not in environ.split(b"\0"):
            return False
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        return True
    except OSError:  # gone meanwhile, a zombie, or not ours to read
        return False
    finally:
        os.close(pidfd)


def describe_exit(code: int) -> str:
    if code >= 0:
        return f"exit code {code}"
    name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
    hint = " (out of memory?)" if -code == signal.SIGKILL else ""
    return f"killed by {name}{hint}"


def is_retryable_exit(code: int) -> bool:
    """The Training Operator's ExitCode policy: 1-127 are permanent, 128-255 (signals) retry."""
    return code < 0 or code >= 128


class _Replica:
    def __init__(self, status: ReplicaStatus, env: dict[str, str], files: JobFiles, max_line: int):
        self.status = status
        self.env = env
        self.writer = LogWriter(files.logs, status.name)
        self.recent: deque[str] = deque(maxlen=LAST_LINES)
        self.splitter = LineSplitter(max_line)
        self.process: subprocess.Popen[bytes] | None = None
        self.pidfd: int | None = None
        self.pipe: int | None = None
        self.exited = asyncio.Event()
        self.startup_timer: asyncio.TimerHandle | None = None
        self.hung_reason: str | None = None  # set when it was killed as hung at start-up

    @property
    def running(self) -> bool:
        return self.process is not None and not self.exited.is_set()

    def log(self, raw_lines: list[bytes]) -> None:
        now = time.time()
        texts = [decode_line(raw) for raw in raw_lines]
        self.writer.append([(now, text) for text in texts])
        self.recent.extend(texts)

    def note(self, text: str) -> None:
        self.writer.append([(time.time(), text)])
        self.recent.append(text)


class Supervisor:
    def __init__(self, files: JobFiles) -> None:
        self.files = files
        job = read_json(files.job)
        self.job_id: str = job["id"]
        self.spec = stored_spec(job)
        self.runtime = Runtime(**job["runtime"])
        self.status = JobStatus.pending(self.spec)
        self.replicas: dict[str, _Replica] = {}
        self.restarts = 0
        self._outcome: asyncio.Future[None] | None = None
        self._stop_state = JobState.CANCELLED
        self._stop_reason = ""

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        self._outcome = loop.create_future()
        loop.add_signal_handler(signal.SIGTERM, self._on_cancel_signal)
        addresses = _loopback_addresses(self.spec.replica_names())
        hostfile = self._write_hostfile(addresses)
        for status in self.status.replicas:
            env = self._replica_env(status.name, addresses, hostfile)
            self.replicas[status.name] = _Replica(
                status, env, self.files, self.runtime.max_log_line_bytes
            )
        self.status.state = JobState.RUNNING
        self.status.started_at = time.time()
        for replica in self.replicas.values():
            if not self._outcome.done():
                self._start(replica)
        if self.spec.active_deadline_seconds is not None:
            loop.call_later(self.spec.active_deadline_seconds, self._on_deadline)
        self._write_status()
        await self._outcome
        await self._stop_all()
        kill_job_processes(self.job_id)
        self.status.finalized = True
        self._write_status()
        for replica in self.replicas.values():
            replica.writer.close()

    def _replica_env(self, name: str, addresses: Addresses, hostfile: str | None) -> dict[str, str]:
        injected = replica_env(self.spec, self.job_id, name, addresses, hostfile_path=hostfile)
        return {**os.environ, **injected}

    def _write_hostfile(self, addresses: Addresses) -> str | None:
        """The MPI launcher's hostfile, listing the workers' loopback addresses."""
        if self.spec.framework != "mpi":
            return None
        path = self.files.dir / "hostfile"
        path.write_text(mpi_hostfile(self.spec, addresses))
        return str(path)

    def _start(self, replica: _Replica) -> None:
        read_end, write_end = os.pipe()
        try:
            replica.process = subprocess.Popen(
                self.runtime.argv(),
                cwd=self.files.code,
                env=replica.env,
                stdin=subprocess.DEVNULL,
                stdout=write_end,
                stderr=write_end,
                start_new_session=True,
                # The supervisor runs no threads, so a preexec_fn is safe here.
                preexec_fn=_die_with_parent(os.getpid()),  # noqa: PLW1509
            )
        except OSError as error:
            os.close(read_end)
            replica.note(f"[distrun] could not start {replica.status.name}: {error}")
            replica.status.state = JobState.FAILED
            replica.status.reason = f"could not start: {error}"
            self._fail(replica, f"{replica.status.name} could not start: {error}")
            return
        finally:
            os.close(write_end)
        loop = asyncio.get_running_loop()
        os.set_blocking(read_end, False)
        replica.pipe = read_end
        replica.pidfd = os.pidfd_open(replica.process.pid)
        replica.exited = asyncio.Event()
        loop.add_reader(read_end, self._on_output, replica)
        loop.add_reader(replica.pidfd, self._on_exit, replica)
        replica.hung_reason = None
        if self.spec.startup_timeout_seconds is not None:
            replica.startup_timer = loop.call_later(
                self.spec.startup_timeout_seconds, self._on_startup_timeout, replica
            )
        replica.status.state = JobState.RUNNING
        replica.status.started_at = time.time()
        replica.status.finished_at = None
        replica.status.exit_code = None
        replica.status.reason = None
        self.status.pids[replica.status.name] = replica.process.pid

    def _on_output(self, replica: _Replica) -> None:
        assert replica.pipe is not None
        try:
            data = os.read(replica.pipe, _READ_SIZE)
        except BlockingIOError:
            return
        if data:
            self._cancel_startup_timer(replica)
            replica.log(replica.splitter.feed(data))
        else:
            self._close_pipe(replica)

    def _on_startup_timeout(self, replica: _Replica) -> None:
        """The replica has written nothing since it started: kill it as hung; its exit then
        goes through the restart policy like any other failure."""
        replica.startup_timer = None
        if not replica.running or (self._outcome is not None and self._outcome.done()):
            return
        seconds = self.spec.startup_timeout_seconds
        replica.hung_reason = (
            f"hung at start-up: no output within {seconds} s (startup_timeout_seconds)"
        )
        replica.note(
            f"[distrun] {replica.status.name} wrote nothing within {seconds} s of starting: "
            "killing it as hung at start-up"
        )
        _signal_group(replica, signal.SIGKILL)

    def _cancel_startup_timer(self, replica: _Replica) -> None:
        if replica.startup_timer is not None:
            replica.startup_timer.cancel()
            replica.startup_timer = None

    def _close_pipe(self, replica: _Replica) -> None:
        if replica.pipe is None:
            return
        asyncio.get_running_loop().remove_reader(replica.pipe)
        os.close(replica.pipe)
        replica.pipe = None
        replica.log(replica.splitter.flush())

    def _drain(self, replica: _Replica) -> None:
        """Everything the exited process wrote is already in its pipe: read it to the end."""
        while replica.pipe is not None:
            try:
                data = os.read(replica.pipe, _READ_SIZE)
            except BlockingIOError:  # a surviving grandchild still holds the pipe open
                data = b""
            if not data:
                self._close_pipe(replica)
                return
            replica.log(replica.splitter.feed(data))

    def _on_exit(self, replica: _Replica) -> None:
        assert replica.process is not None and replica.pidfd is not None
        exited = replica.exited  # a restart gives the replica a new one
        loop = asyncio.get_running_loop()
        loop.remove_reader(replica.pidfd)
        os.close(replica.pidfd)
        replica.pidfd = None
        self._cancel_startup_timer(replica)
        pid = replica.process.pid
        # Still a zombie, so its pid cannot be reused yet: clear out anything it left behind
        # in its process group, as a container's end would.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        code = replica.process.wait()
        self._drain(replica)
        status = replica.status
        status.exit_code = code
        cause = replica.hung_reason if code != 0 and replica.hung_reason else describe_exit(code)
        status.finished_at = time.time()
        if self._outcome is not None and self._outcome.done():
            status.state = self._stop_state
            status.reason = self._stop_reason
        elif code == 0:
            status.state = JobState.SUCCEEDED
            self._check_success()
        elif self._may_restart(code):
            self._restart(replica, cause)
        else:
            status.state = JobState.FAILED
            status.reason = cause
            self._fail(replica, f"{status.name} failed: {cause}")
        exited.set()
        self._write_status()

    def _may_restart(self, code: int) -> bool:
        policy = self.spec.restart_policy
        if policy == "Never" or (policy == "ExitCode" and not is_retryable_exit(code)):
            return False
        # backoff_limit counts restarts across the whole job, as the operator's RunPolicy does.
        return self.restarts < self.spec.backoff_limit

    def _restart(self, replica: _Replica, cause: str) -> None:
        self.restarts += 1
        replica.status.restarts += 1
        replica.note(
            f"[distrun] restarting {replica.status.name} (restart {self.restarts}/"
            f"{self.spec.backoff_limit} of the job) after {cause}"
        )
        self._start(replica)

    def _check_success(self) -> None:
        completion = [
            r for r in FRAMEWORKS[self.spec.framework].completion_roles if r in self.spec.roles
        ]
        roles = completion or (["worker"] if "worker" in self.spec.roles else list(self.spec.roles))
        deciding = [r for r in self.replicas.values() if r.status.role in roles]
        if all(r.status.state == JobState.SUCCEEDED for r in deciding):
            self._finish(JobState.SUCCEEDED, None, JobState.SUCCEEDED, "stopped: the job succeeded")

    def _fail(self, replica: _Replica, reason: str) -> None:
        self.status.failed_replica = replica.status.name
        self.status.last_lines = list(replica.recent)
        stopped = f"stopped because {replica.status.name} failed"
        self._finish(JobState.FAILED, reason, JobState.CANCELLED, stopped)

    def _on_deadline(self) -> None:
        reason = (
            f"DeadlineExceeded: the job ran longer than active_deadline_seconds="
            f"{self.spec.active_deadline_seconds}"
        )
        self._finish(JobState.FAILED, reason, JobState.CANCELLED, "stopped: deadline exceeded")

    def _on_cancel_signal(self) -> None:
        self._finish(JobState.CANCELLED, "cancelled by the user", JobState.CANCELLED, "cancelled")

    def _finish(
        self, state: JobState, reason: str | None, stop_state: JobState, stop_reason: str
    ) -> None:
        """Decides the job's outcome (the first decision wins) and records it at once; the
        remaining replicas are stopped afterwards."""
        if self._outcome is None or self._outcome.done():
            return
        self.status.state = state
        self.status.reason = reason
        self.status.finished_at = time.time()
        self._stop_state, self._stop_reason = stop_state, stop_reason
        self._outcome.set_result(None)
        self._write_status()

    async def _stop_all(self) -> None:
        running = [r for r in self.replicas.values() if r.running]
        for replica in running:
            _signal_group(replica, signal.SIGTERM)
        waits = [asyncio.create_task(r.exited.wait()) for r in running]
        if not waits:
            return
        _, pending = await asyncio.wait(waits, timeout=self.runtime.grace_seconds)
        if pending:
            for replica in running:
                if replica.running:
                    replica.note(
                        f"[distrun] {replica.status.name} ignored SIGTERM for "
                        f"{self.runtime.grace_seconds:g} s: sending SIGKILL"
                    )
                    _signal_group(replica, signal.SIGKILL)
            await asyncio.wait(pending)

    def _write_status(self) -> None:
        write_json_atomic(self.files.status, self.status.to_json())


def _signal_group(replica: _Replica, signum: int) -> None:
    assert replica.process is not None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(replica.process.pid, signum)


def _die_with_parent(parent: int) -> Callable[[], None]:
    """A preexec_fn: the replica gets SIGKILL when the supervisor dies, so none outlives it."""
    libc = ctypes.CDLL(None, use_errno=True)

    def set_parent_death_signal() -> None:
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return set_parent_death_signal


def _loopback_addresses(names: list[str]) -> Addresses:
    """A free loopback port per replica (all sockets held open together, so no duplicates)."""
    sockets = []
    try:
        for _ in names:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return {
            name: Address("127.0.0.1", sock.getsockname()[1])
            for name, sock in zip(names, sockets, strict=True)
        }
    finally:
        for sock in sockets:
            sock.close()


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m distrun.supervisor JOB_DIR", file=sys.stderr)
        return 2
    files = JobFiles(Path(args[0]))
    supervisor = Supervisor(files)
    try:
        asyncio.run(supervisor.run())
    except BaseException as error:
        traceback.print_exc()
        _record_crash(supervisor, error)
        raise
    return 0


def _record_crash(supervisor: Supervisor, error: BaseException) -> None:
    """The supervisor itself failed: stop its replicas and say so in status.json."""
    for replica in supervisor.replicas.values():
        if replica.process is not None and replica.process.poll() is None:
            _signal_group(replica, signal.SIGKILL)
    with contextlib.suppress(OSError):
        kill_job_processes(supervisor.job_id)
    status = supervisor.status
    if not status.state.terminal or not status.finalized:
        status.state = JobState.FAILED if not status.state.terminal else status.state
        status.reason = status.reason or f"the supervisor failed: {error!r}"
        status.finished_at = status.finished_at or time.time()
        status.finalized = True
        with contextlib.suppress(OSError):
            supervisor._write_status()


if __name__ == "__main__":
    sys.exit(main())
