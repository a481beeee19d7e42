"""The per-job supervisor of the local engine: a detached process that owns a job's replicas.

`python -m distrun.supervisor <job_dir>` starts every replica as its own process group, writes
each replica's merged stdout/stderr into the log store, applies the restart policy, the
success policy and the deadline, and records everything in `status.json`. The server only
reads these files (and signals this process to cancel), so it can restart while jobs run.

The job directory (`JobFiles`) is the contract between this process and the engine.

This module starts the replicas; `supervisor_loop` then runs them on an asyncio event loop.
The replicas start before that module (and asyncio) is imported, so their own start-up
overlaps the supervisor's: keep this module's imports to what starting them needs.
"""

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .engines.base import JobState, ReplicaStatus
from .entrypoint import argv as entrypoint_argv
from .replica_env import Address, Addresses, mpi_hostfile, replica_env
from .spec import JobSpec, Limits

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
    nice: int = 0  # the least niceness of the supervisor and replicas (older jobs: none)

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


@dataclass
class Spawned:
    """A replica process just started, its stdout and stderr going into `pipe`."""

    process: "subprocess.Popen[bytes]"
    pipe: int  # the read end, blocking until the event loop takes it over


def spawn_replica(argv: list[str], cwd: Path, env: dict[str, str]) -> Spawned:
    """Starts one replica in its own process group; raises OSError if it cannot start."""
    read_end, write_end = os.pipe()
    try:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=write_end,
            stderr=write_end,
            # The supervisor runs no threads, so a preexec_fn is safe here.
            preexec_fn=_own_group_dying_with(os.getpid()),  # noqa: PLW1509
        )
    except OSError:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    return Spawned(process, read_end)


class Launch:
    """The job as its supervisor starts it, before any event loop: the job read, every
    replica's environment built, and `start()` starting the replicas (in order, stopping at
    the first that cannot start)."""

    def __init__(self, files: JobFiles) -> None:
        self.files = files
        job = read_json(files.job)
        self.job_id: str = job["id"]
        self.spec = stored_spec(job)
        self.runtime = Runtime(**job["runtime"])
        names = self.spec.replica_names()
        addresses = _loopback_addresses(names)
        hostfile = self._write_hostfile(addresses)
        self.envs = {name: self._replica_env(name, addresses, hostfile) for name in names}
        self.started_at: float | None = None
        self.spawned: dict[str, Spawned] = {}
        self.failed: tuple[str, OSError] | None = None  # the replica that could not start

    def start(self) -> None:
        lower_priority(self.runtime.nice)  # before the replicas: they inherit it
        self.started_at = time.time()
        for name, env in self.envs.items():
            try:
                self.spawned[name] = spawn_replica(self.runtime.argv(), self.files.code, env)
            except OSError as error:
                self.failed = (name, error)
                return

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


def _own_group_dying_with(parent: int) -> Callable[[], None]:
    """A preexec_fn: the replica leads its own process group (so a cancel signals all it
    started) in the supervisor's session, and gets SIGKILL when the supervisor dies, so none
    outlives it. Not a session of its own: that would be a scheduling group of its own too."""
    libc = ctypes.CDLL(None, use_errno=True)

    def set_group_and_parent_death_signal() -> None:
        os.setpgid(0, 0)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return set_group_and_parent_death_signal


def lower_priority(nice: int) -> None:
    """Runs this process, and the replicas it starts, at niceness `nice` or more, so jobs on
    the server's own machine never starve the server of CPU. The supervisor leads a session,
    which Linux's autogroup scheduler weighs as a group against every other session, the
    server's included: a process's niceness alone only counts inside its group, so the
    group's niceness is set too."""
    if nice <= 0:
        return
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, 0, max(nice, os.getpriority(os.PRIO_PROCESS, 0)))
    with contextlib.suppress(OSError), open("/proc/self/autogroup", "w") as autogroup:
        autogroup.write(str(nice))  # absent without autogroup (or outside Linux): nothing to do


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
    try:
        launch = Launch(files)
        launch.start()
    except Exception as error:
        _record_launch_failure(files, error)
        raise
    from .supervisor_loop import run  # asyncio and the rest load while the replicas start

    return run(launch)


def _record_launch_failure(files: JobFiles, error: Exception) -> None:
    """Starting the job failed: stop whatever started and say so in status.json."""
    import traceback  # only on this path

    traceback.print_exc()
    try:
        kill_job_processes(files.dir.name)
        status = JobStatus.from_json(read_json(files.status))
        status.state = JobState.FAILED
        status.reason = f"the supervisor failed: {error!r}"
        status.finished_at = time.time()
        status.finalized = True
        write_json_atomic(files.status, status.to_json())
    except (OSError, ValueError, TypeError, KeyError):
        traceback.print_exc()  # the engine will report the job as lost


if __name__ == "__main__":
    sys.exit(main())
