"""`POST /distrun/jobs/{id}/tensorboard`: TensorBoard on a job's scalars directory, reached
through jupyter-server-proxy at `{base_url}proxy/{port}/`, so it needs no port of its own
opened to the browser and is behind the server's own authentication.

One TensorBoard per job, started on first ask and reused, stopped with the server. It binds
loopback only, runs without the server's credentials in its environment, and uses its
TensorFlow stub (it only reads event files). Only on one person's server: on a shared one,
the proxy would let every user of the server reach it.
"""

import asyncio
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

from jupyter_server.auth.decorator import authorized
from tornado import web

from distrun.core.errors import Conflict
from distrun.core.jobids import check_job_id
from distrun.engines.local.inherited_env import inherited_env
from distrun.engines.protocol import ScalarsEngine
from distrun.server.handlers import DistrunHandler

START_TIMEOUT_SECONDS = 60.0
PARENT_ENV = "DISTRUN_TENSORBOARD_PARENT"
# argv[1:] are TensorBoard's own arguments; the stub switch comes first (see the module doc).
# It ends with the server even when the server is killed (no shutdown hook runs then): a
# thread watches for its parent, named in the environment (not read at start, when it may
# already be gone), to be another.
_RUN_TENSORBOARD = (
    "import os, sys, threading, time, types\n"
    f"parent = int(os.environ.pop({PARENT_ENV!r}))\n"
    "def watch():\n"
    "    while os.getppid() == parent:\n"
    "        time.sleep(1)\n"
    "    os._exit(0)\n"
    "threading.Thread(target=watch, daemon=True).start()\n"
    "sys.modules['tensorboard.compat.notf'] = types.ModuleType('tensorboard.compat.notf')\n"
    "from tensorboard.main import run_main\n"
    "sys.argv[0] = 'tensorboard'\n"
    "run_main()\n"
)


def tensorboard_command(logdir: Path, port: int) -> tuple[list[str], dict[str, str]]:
    """TensorBoard's command line and environment, started by this process."""
    argv = [sys.executable, "-c", _RUN_TENSORBOARD, "--logdir", str(logdir)]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--reload_interval", "5"]
    return argv, {**inherited_env(os.environ), PARENT_ENV: str(os.getpid())}


@dataclass
class RunningBoard:
    process: asyncio.subprocess.Process
    port: int


class TensorBoards:
    """The server's TensorBoards, one a job."""

    def __init__(self) -> None:
        self._boards: dict[str, RunningBoard] = {}
        self._starting: dict[str, asyncio.Lock] = {}

    async def port_for(self, job_id: str, logdir: Path) -> int:
        async with self._starting.setdefault(job_id, asyncio.Lock()):
            board = self._boards.get(job_id)
            if board is None or board.process.returncode is not None:
                board = await self._start(logdir)
                self._boards[job_id] = board
            return board.port

    async def _start(self, logdir: Path) -> RunningBoard:
        logdir.mkdir(parents=True, exist_ok=True)
        port = _free_loopback_port()
        argv, env = tensorboard_command(logdir, port)
        process = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        if not await _serving(process, port):
            if process.returncode is None:
                process.kill()
            await process.wait()
            raise Conflict(
                "TensorBoard did not start: run `tensorboard --logdir` by hand to see why"
            )
        return RunningBoard(process, port)

    def stop_all(self) -> None:
        for board in self._boards.values():
            if board.process.returncode is None:
                board.process.terminate()
        self._boards.clear()


def _free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _serving(process: asyncio.subprocess.Process, port: int) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_TIMEOUT_SECONDS
    while loop.time() < deadline and process.returncode is None:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.25)
            continue
        writer.close()
        return True
    return False


def missing_packages() -> list[str]:
    return [name for name in ("tensorboard", "jupyter_server_proxy") if find_spec(name) is None]


class TensorBoardHandler(DistrunHandler):
    @web.authenticated
    @authorized
    async def post(self, job_id: str) -> None:
        if not self.app.one_persons_server():
            raise Conflict(
                "TensorBoard is not opened on a server several users share (its proxy would "
                "let all of them reach it): run it where only you can, on the job's "
                "DISTRUN_TENSORBOARD_DIR"
            )
        engine, job = await self.app.registry.find_job(check_job_id(job_id), self.owner)
        if not isinstance(engine, ScalarsEngine):
            raise Conflict(
                f"the {engine.name} engine keeps no TensorBoard directory this server reads"
            )
        missing = missing_packages()
        if missing:
            raise Conflict(
                f"opening TensorBoard here needs {' and '.join(missing)} on the server: "
                f"pip install {' '.join(name.replace('_', '-') for name in missing)}"
            )
        logdir = await engine.tensorboard_dir(job.id, self.owner)
        port = await self.app.tensorboards.port_for(job.id, logdir)
        self.finish({"url": f"{self.base_url.rstrip('/')}/proxy/{port}/", "port": port})
