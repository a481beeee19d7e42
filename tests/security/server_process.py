"""A real jupyter_server with distrun and the real local engine, as its own process on loopback:
for tests that measure the server's memory or hammer it (the fuzzer) and must not share a
process or an event loop with pytest."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import kill_every_job

REPO = Path(__file__).resolve().parents[2]
TOKEN = "security-tests-token"
START_TIMEOUT = 90


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    state_dir: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {TOKEN}"}

    def memory_kib(self, field: str) -> int:
        """A line of /proc/<pid>/status: VmRSS (now) or VmHWM (the peak so far), in KiB."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise KeyError(field)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _config(root: Path, state_dir: Path, port: int, distrun: dict[str, Any]) -> dict[str, Any]:
    return {
        "ServerApp": {
            "port": port,
            "port_retries": 0,
            "ip": "127.0.0.1",
            "open_browser": False,
            "allow_root": True,
            "root_dir": str(root),
            "jpserver_extensions": {"distrun": True},
        },
        "IdentityProvider": {"token": TOKEN},
        "DistrunApp": {"state_dir": str(state_dir), **distrun},
    }


@contextmanager
def server_process(base: Path, **distrun: Any) -> Iterator[ServerProcess]:
    """Start the server under `base` (config, data, root and state directories), wait until it
    answers, and stop it (and every job it left running) afterwards."""
    dirs = {name: base / name for name in ("config", "data", "runtime", "root", "state")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    config = _config(dirs["root"], dirs["state"], port, distrun)
    (dirs["config"] / "jupyter_server_config.json").write_text(json.dumps(config))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "server_ext"), str(REPO)]),
        "JUPYTER_CONFIG_DIR": str(dirs["config"]),
        "JUPYTER_DATA_DIR": str(dirs["data"]),
        "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
    }
    log_path = base / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server"],
            cwd=dirs["root"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = ServerProcess(process, port, log_path, dirs["state"])
    try:
        _wait_until_ready(server)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        kill_every_job(dirs["state"])


def _wait_until_ready(server: ServerProcess) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    request = urllib.request.Request(f"{server.url}/distrun/engines", headers=server.headers)
    while time.monotonic() < deadline:
        if not server.alive():
            raise RuntimeError(f"the server exited:\n{server.log()[-3000:]}")
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the server did not answer in {START_TIMEOUT} s:\n{server.log()[-3000:]}")
