"""A job as its supervisor starts it, before any event loop: every replica's environment built
and the replicas started. Kept to what starting them needs, so they start before asyncio and
the rest of the supervisor are imported."""

import os
import socket
import subprocess
import time

from distrun.core.checkpoint_env import checkpoint_env
from distrun.core.elastic_agent import AGENT_ENV
from distrun.core.replica_env import (
    Address,
    Addresses,
    mpi_hostfile,
    operator_env,
    replica_env,
)
from distrun.core.restarts import restart_plan
from distrun.core.scalars import TENSORBOARD_DIR_ENV
from distrun.engines.local.elastic import agent_argv, start_store
from distrun.engines.local.gpu_devices import Grant, grant_env, hide_gpus
from distrun.engines.local.jobdir import JobFiles, Runtime, read_json, stored_spec
from distrun.engines.local.private_files import write_private
from distrun.engines.local.processes import Spawned, lower_priority, spawn_replica
from distrun.engines.local.waiting_interpreters import WaitingInterpreters


class Launch:
    """The job as its supervisor starts it, before any event loop: the job read, every
    replica's environment built, and `start()` starting the replicas (in order, stopping at
    the first that cannot start), or `begin()` and then `spawn()` for each, where the caller
    has other work to do between two (the supervisor's event loop reading the first ones'
    output). Replicas go to `interpreters` started ahead where one fits, `mark` being theirs.
    """

    def __init__(
        self,
        files: JobFiles,
        interpreters: WaitingInterpreters | None = None,
        mark: str | None = None,
    ) -> None:
        self.files = files
        self.interpreters = interpreters
        self.mark = mark
        job = read_json(files.job)
        self.job_id: str = job["id"]
        self.spec = stored_spec(job)
        self.runtime = Runtime(**job["runtime"])
        # None: the machine had no GPU and the job asked for none; else each replica's grant.
        self.gpus: dict[str, Grant] | None = (
            {name: Grant.from_json(grant) for name, grant in job["gpus"].items()}
            if "gpus" in job
            else None
        )
        self.envs = self.attempt_envs(0)
        elastic = self.spec.elastic_range
        # The c10d rendezvous of an elastic job: one port for the job's whole life.
        self.rendezvous_port = _loopback_port() if elastic else None
        self.argv = self._argv()
        self.store: subprocess.Popen[bytes] | None = None  # the rendezvous store, once started
        self.started_at: float | None = None
        self.spawned: dict[str, Spawned] = {}
        self.failed: tuple[str, OSError] | None = None  # the replica that could not start

    def start(self) -> None:
        """Starts every replica now, in order, up to the first that cannot start."""
        self.begin()
        for name in self.envs:
            if not self.spawn(name):
                break
        self.close_interpreters()

    def close_interpreters(self) -> None:
        """Ends the interpreters started ahead that no replica took."""
        if self.interpreters is not None:
            self.interpreters.close()

    def begin(self) -> None:
        """What comes before the first replica starts (`spawn` then starts each)."""
        lower_priority(self.runtime.nice)  # before the replicas: they inherit it
        if self.rendezvous_port is not None:
            first = next(iter(self.envs.values()))
            self.store = start_store(
                self.runtime.python, self.files.code, first, self.rendezvous_port
            )
        self.started_at = time.time()

    def spawn(self, name: str) -> bool:
        """Starts replica `name`; False (recorded in `failed`) when it could not start."""
        argv, env = self.argv, self.envs[name]
        waiting = self.interpreters.take(argv, env) if self.interpreters is not None else None
        spawned = waiting.hand_over(argv, self.files.code, env) if waiting is not None else None
        try:
            self.spawned[name] = spawned or spawn_replica(argv, self.files.code, env)
        except OSError as error:
            self.failed = (name, error)
            return False
        return True

    def _argv(self) -> list[str]:
        """A replica's command line: the script, or torch's elastic agent running it."""
        elastic, port = self.spec.elastic_range, self.rendezvous_port
        if elastic is None or port is None:
            return self.runtime.argv()
        restarts = restart_plan(self.spec).limit
        script = self.runtime.entrypoint
        return agent_argv(self.runtime.python, script, self.job_id, elastic, port, restarts)

    def attempt_envs(self, restart: int) -> dict[str, dict[str, str]]:
        """Every replica's environment for the job's run number `restart` (0: the first), with
        fresh ports: the last run's may still be held by connections closing."""
        names = self.spec.replica_names()
        addresses = _loopback_addresses(names)
        hostfile = self._write_hostfile(addresses)
        return {name: self._replica_env(name, addresses, hostfile, restart) for name in names}

    def ahead_envs(self, restart: int) -> dict[str, dict[str, str]]:
        """Every replica's environment for run number `restart` as far as it is known ahead:
        `attempt_envs` (which writes the hostfile) gives that run its ports when it starts."""
        names = self.spec.replica_names()
        addresses = {name: Address("127.0.0.1", 0) for name in names}
        hostfile = str(self.files.dir / "hostfile") if self.spec.framework == "mpi" else None
        return {name: self._replica_env(name, addresses, hostfile, restart) for name in names}

    def address_names(self, name: str) -> frozenset[str]:
        """The variables of replica `name` that carry the replicas' addresses (which change
        with every run's ports)."""
        addresses = {other: Address("127.0.0.1", 0) for other in self.spec.replica_names()}
        return frozenset(operator_env(self.spec, self.job_id, name, addresses))

    def _replica_env(
        self, name: str, addresses: Addresses, hostfile: str | None, restart: int
    ) -> dict[str, str]:
        injected = replica_env(self.spec, self.job_id, name, addresses, hostfile_path=hostfile)
        checkpoints = checkpoint_env(str(self.files.checkpoints.resolve()), restart)
        tensorboard = {TENSORBOARD_DIR_ENV: str((self.files.tensorboard / name).resolve())}
        elastic = AGENT_ENV if self.spec.elastic is not None else {}
        own = {**injected, **checkpoints, **tensorboard, **self._gpu_env(name)}
        return {**elastic, **os.environ, **own}

    def _gpu_env(self, name: str) -> dict[str, str]:
        if self.gpus is None:
            return {}
        grant = self.gpus.get(name)
        return grant_env(grant) if grant is not None else hide_gpus()

    def _write_hostfile(self, addresses: Addresses) -> str | None:
        """The MPI launcher's hostfile, listing the workers' loopback addresses."""
        if self.spec.framework != "mpi":
            return None
        path = self.files.dir / "hostfile"
        write_private(path, mpi_hostfile(self.spec, addresses).encode())
        return str(path)


def _loopback_port() -> int:
    return _loopback_addresses(["rendezvous"])["rendezvous"].port


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
