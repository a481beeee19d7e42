"""The one launcher of a real jupyter_server process with distrun, for every tier that needs a
server of its own process (reliability, security, Kubernetes, CLI, gateway): on a loopback port,
configured through its own Jupyter directories, startable again on the same port after a kill.

Configuration is traitlets sections (`{"DistrunApp": {...}}`), written as JSON into the server's
own config directory, so nothing of it is Python code. Only the distrun extension is enabled.
"""

import asyncio
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.websocket import WebSocketClientConnection, websocket_connect

from distrun.core.stream_versions import STREAM_PROTOCOLS

REPO = Path(__file__).resolve().parents[1]
START_TIMEOUT = 120.0
REQUEST_TIMEOUT = 120.0
# Other server extensions installed beside distrun only slow the start down.
_ONLY_DISTRUN = {
    "distrun": True,
    "jupyterlab": False,
    "jupyter_lsp": False,
    "jupyter_server_terminals": False,
    "notebook_shim": False,
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `extra`'s sections merged in (one level deep: section -> key -> value)."""
    merged = {section: dict(values) for section, values in base.items()}
    for section, values in extra.items():
        merged.setdefault(section, {}).update(values)
    return merged


class ServerProcess:
    """`python -m jupyter_server` under `workdir` (config, data, runtime, root and state
    directories, and a log per start). `token=None` leaves authentication to the config (an
    identity provider of its own); otherwise requests carry `token`. `config_file` is a Python
    config file loaded too (the deployment's own, say). `python` runs it (another virtualenv's:
    a release's, say)."""

    def __init__(
        self,
        workdir: Path,
        *,
        config: Mapping[str, Any] | None = None,
        token: str | None = "",
        base_url: str = "/",
        env: Mapping[str, str] | None = None,
        config_file: Path | None = None,
        python: Path | str = sys.executable,
    ) -> None:
        self.workdir = workdir
        self.python = str(python)
        self.port = free_port()
        self.token = secrets.token_hex(16) if token == "" else token
        self.base_url = base_url
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.dirs = {
            name: workdir / name for name in ("config", "data", "runtime", "root", "state")
        }
        for path in self.dirs.values():
            path.mkdir(parents=True, exist_ok=True)
        settings = merge(self._base_config(), config or {})
        (self.dirs["config"] / "jupyter_server_config.json").write_text(json.dumps(settings))
        if config_file is not None:
            # Beside the JSON rather than `--config=`, which would replace the config directory's
            # files; where both set a value, the JSON's wins.
            shutil.copyfile(config_file, self.dirs["config"] / "jupyter_server_config.py")
        self.env = self._environment(env or {})

    # --- the process ---

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.base_url}"

    @property
    def state_dir(self) -> Path:
        return self.dirs["state"]

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"} if self.token else {}

    def start(self) -> "ServerProcess":
        """Starts the server and returns once it answers (an AssertionError if it does not)."""
        argv = [self.python, "-m", "jupyter_server"]
        self.starts += 1
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                argv,
                cwd=self.dirs["root"],
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self._wait_until_ready()
        return self

    async def astart(self) -> "ServerProcess":
        return await asyncio.to_thread(self.start)

    def kill(self) -> None:
        """SIGKILL: the harshest stop, no shutdown code runs."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 30 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.kill()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"server-{self.starts}.log"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log().splitlines()[-lines:])

    def memory_kib(self, field: str) -> int:
        """A line of /proc/<pid>/status: VmRSS (now) or VmHWM (the peak so far), in KiB."""
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise KeyError(field)

    # --- clients ---

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, Any] | None = None,
    ) -> tuple[int, Any]:
        """(status, the JSON body, or the text of any other) of a request to `path` (relative to
        the base URL); error statuses are returned, not raised."""
        request = HTTPRequest(
            self.url_of(path, query),
            method=method,
            headers={**self.headers, **(headers or {})},
            body=None if body is None else json.dumps(body),
            allow_nonstandard_methods=True,
            request_timeout=REQUEST_TIMEOUT,
        )
        try:
            response = await AsyncHTTPClient().fetch(request)
        except HTTPClientError as error:
            if error.response is None:
                raise
            response = error.response
        text = response.body.decode() if response.body else ""
        if response.headers.get("Content-Type", "").startswith("application/json"):
            return response.code, json.loads(text)
        return response.code, text

    async def websocket(
        self,
        path: str,
        *,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, Any] | None = None,
        subprotocols: tuple[str, ...] = STREAM_PROTOCOLS,
    ) -> WebSocketClientConnection:
        url = self.url_of(path, query).replace("http://", "ws://", 1)
        request = HTTPRequest(
            url, headers={**self.headers, **(headers or {})}, request_timeout=REQUEST_TIMEOUT
        )
        # The log stream's current version (the server gives version 1 to a client that offers
        # none: core/stream_versions.py).
        return await websocket_connect(
            request, max_message_size=64 * 1024 * 1024, subprotocols=list(subprotocols)
        )

    def url_of(self, path: str, query: Mapping[str, Any] | None = None) -> str:
        """The URL of `path` below the base URL; list values repeat their parameter."""
        pairs = [
            (key, item)
            for key, value in (query or {}).items()
            for item in (value if isinstance(value, list) else [value])
        ]
        url = self.url + path.lstrip("/")
        return f"{url}?{urlencode(pairs)}" if pairs else url

    # --- set-up ---

    def _base_config(self) -> dict[str, Any]:
        server: dict[str, Any] = {
            "ip": "127.0.0.1",
            "port": self.port,
            "port_retries": 0,
            "base_url": self.base_url,
            "open_browser": False,
            "allow_root": True,
            "root_dir": str(self.dirs["root"]),
            "jpserver_extensions": _ONLY_DISTRUN,
        }
        config: dict[str, Any] = {
            "ServerApp": server,
            "DistrunApp": {"state_dir": str(self.state_dir)},
        }
        if self.token is not None:
            config["IdentityProvider"] = {"token": self.token}
        return config

    def _environment(self, extra: Mapping[str, str]) -> dict[str, str]:
        # Nothing of the caller's Jupyter or distrun settings leaks in.
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("JUPYTER", "DISTRUN_"))
        }
        python_path = [str(REPO / "server_ext"), str(REPO), os.environ.get("PYTHONPATH", "")]
        env.update(
            PYTHONPATH=os.pathsep.join(filter(None, python_path)),
            JUPYTER_CONFIG_DIR=str(self.dirs["config"]),
            JUPYTER_DATA_DIR=str(self.dirs["data"]),
            JUPYTER_RUNTIME_DIR=str(self.dirs["runtime"]),
            JUPYTER_PLATFORM_DIRS="1",
            PYTHONIOENCODING="utf-8",
        )
        env.update(extra)
        return env

    def _check_distrun_loaded(self) -> None:
        """The server answers; distrun's routes are there unless the extension failed to load
        (then they are a 404, whatever the credentials)."""
        try:
            urllib.request.urlopen(self.url + "distrun/engines", timeout=5).close()
        except urllib.error.HTTPError as error:
            assert error.code != 404, f"the distrun extension did not load:\n{self.log_tail()}"

    def _wait_until_ready(self) -> None:
        """Until `GET {base_url}api` (which needs no credentials) answers 200."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if not self.alive():
                raise AssertionError(f"jupyter_server exited at start:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "api", timeout=5) as response:
                    if response.status == 200:
                        self._check_distrun_loaded()
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.1)
        self.kill()
        raise AssertionError(
            f"jupyter_server did not answer within {START_TIMEOUT:.0f} s:\n{self.log_tail()}"
        )
