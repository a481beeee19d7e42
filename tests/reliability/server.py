"""A real jupyter_server process with the distrun extension and its local engine, which the
reliability tests kill and start again on the same port over the same state directory."""

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

SERVER_SOURCE = str(Path(__file__).resolve().parents[2] / "server_ext")
START_TIMEOUT = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def cursor_query(cursor: dict[str, int]) -> str:
    return quote(",".join(f"{replica}:{seq}" for replica, seq in cursor.items()), safe=",:")


class RealServer:
    """`python -m jupyter_server` on a fixed loopback port with token auth; `kill` and `start`
    again to restart it. Jobs live in `root/state` and outlive it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.token = os.urandom(16).hex()
        self.process: asyncio.subprocess.Process | None = None
        self.starts = 0
        config_dir = root / "config"
        config_dir.mkdir(parents=True)
        config = {
            "ServerApp": {"jpserver_extensions": {"distrun": True}},
            "DistrunApp": {"state_dir": str(root / "state")},
        }
        (config_dir / "jupyter_server_config.json").write_text(json.dumps(config))
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(
                filter(None, [SERVER_SOURCE, os.environ.get("PYTHONPATH")])
            ),
            "JUPYTER_CONFIG_DIR": str(config_dir),
            "JUPYTER_DATA_DIR": str(root / "data"),
            "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
            "PYTHONIOENCODING": "utf-8",
        }

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    async def start(self) -> None:
        argv = [
            sys.executable,
            "-m",
            "jupyter_server",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            f"--ServerApp.root_dir={self.root}",
            f"--IdentityProvider.token={self.token}",
        ]
        if os.geteuid() == 0:
            argv.append("--allow-root")
        self.starts += 1
        with (self.root / f"server-{self.starts}.log").open("wb") as log:
            self.process = await asyncio.create_subprocess_exec(
                *argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.root
            )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.returncode is not None:
                raise AssertionError(f"jupyter_server exited at start:\n{self.log_tail()}")
            try:
                status, _ = await self.request("GET", "/distrun/engines")
            except OSError:
                await asyncio.sleep(0.2)
                continue
            assert status == 200, f"GET /distrun/engines: {status}\n{self.log_tail()}"
            return
        raise AssertionError(f"jupyter_server did not answer within {START_TIMEOUT:.0f} s")

    async def kill(self) -> None:
        """SIGKILL: the harshest restart, no shutdown code runs."""
        assert self.process is not None
        self.process.kill()
        await self.process.wait()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                await self.kill()

    async def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        payload = None if body is None else json.dumps(body)
        try:
            response = await AsyncHTTPClient().fetch(
                self.url + path,
                method=method,
                headers=self.headers,
                body=payload,
                request_timeout=120,
            )
        except HTTPClientError as error:
            body_text = error.response.body if error.response is not None else b""
            return error.code, json.loads(body_text or b"null")
        return response.code, json.loads(response.body or b"null")

    async def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        status, job = await self.request("POST", "/distrun/jobs", {"spec": spec})
        assert status == 201, job
        return dict(job)

    async def websocket(self, job_id: str, cursor: dict[str, int]) -> WebSocketClientConnection:
        url = f"ws://127.0.0.1:{self.port}/distrun/jobs/{job_id}/logs/stream"
        if cursor:
            url += f"?since={cursor_query(cursor)}"
        request = HTTPRequest(url, headers=self.headers, request_timeout=120)
        return await websocket_connect(request, max_message_size=64 * 1024 * 1024)

    def log_tail(self, lines: int = 30) -> str:
        logs = sorted(self.root.glob("server-*.log"))
        if not logs:
            return ""
        return "\n".join(logs[-1].read_text(errors="replace").splitlines()[-lines:])
