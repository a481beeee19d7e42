"""What every benchmark shares: the repo's package on the path, statistics, skipping."""

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

REPO = Path(__file__).resolve().parents[1]
SERVER_START_TIMEOUT = 90.0


def use_repo_package() -> None:
    """Import distrun from this checkout, here and in every process the benchmark starts
    (the local engine's supervisor runs as `python -m distrun.supervisor`)."""
    source = str(REPO / "server_ext")
    sys.path.insert(0, source)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [source, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )


def skip(why: str) -> NoReturn:
    print(f"SKIPPED: {why}")
    sys.exit(0)


def require_local_engine() -> None:
    """Skip, saying why, where the local engine cannot run (it needs Linux 5.3+)."""
    from distrun.engines.local.engine import unsupported_platform_reason

    reason = unsupported_platform_reason()
    if reason is not None:
        skip(reason)


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], fraction: float) -> float:
    """The value below which `fraction` of the values fall (nearest rank)."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def server_command(
    root: Path, port: int, token: str, config: dict[str, Any]
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of a jupyter_server on 127.0.0.1:`port` with its own config,
    data and runtime directories under `root`; `config` is written as its
    jupyter_server_config.json."""
    config_dir = root / "config"
    config_dir.mkdir(parents=True)
    (config_dir / "jupyter_server_config.json").write_text(json.dumps(config))
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(config_dir),
        "JUPYTER_DATA_DIR": str(root / "data"),
        "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
    }
    argv = [
        sys.executable,
        "-m",
        "jupyter_server",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}",
    ]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    return argv, env


class BenchServer:
    """A real jupyter_server with the distrun extension, on a free loopback port, token auth."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.token = os.urandom(16).hex()
        self.log_path = root / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def launch(self, **distrun_config: object) -> None:
        config = {
            "ServerApp": {"jpserver_extensions": {"distrun": True}},
            "DistrunApp": {"state_dir": str(self.root / "state"), **distrun_config},
        }
        argv, env = server_command(self.root, self.port, self.token, config)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)

    async def wait_until_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                skip(f"jupyter_server exited at start:\n{self.log_tail()}")
            try:
                status, _ = await self.request("GET", "/distrun/engines")
            except OSError:
                await asyncio.sleep(0.2)
                continue
            if status == 200:
                return
            skip(f"the distrun server extension is not loaded (GET /distrun/engines: {status})")
        skip(f"jupyter_server did not answer within {SERVER_START_TIMEOUT:.0f} s")

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        from tornado.httpclient import AsyncHTTPClient, HTTPClientError

        payload = None if body is None else json.dumps(body)
        try:
            response = await AsyncHTTPClient().fetch(
                self.url + path, method=method, headers=self.headers(), body=payload
            )
        except HTTPClientError as error:
            return error.code, None
        return response.code, json.loads(response.body or b"null")

    def log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
