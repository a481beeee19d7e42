"""Real Enterprise Gateway replicas (EG in its own virtualenv, behind our identity front) and a
real jupyter_server 2 with distrun pointed at them, all on loopback.

Each replica runs exactly what a gateway pod runs: `distrun_gateway.py` with
`enterprise_gateway_config.py`, and `identity_front.py` in front of it. The one difference is
the kernelspec: EG's local process proxy instead of the Kubernetes one (there is no kubelet
here), with `parent_handle=0` so that a kernel outlives its gateway process like a pod does.
"""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tornado import httpclient, websocket

from tests.server_process import ServerProcess, free_port

from .eg_venv import ensure_eg_venv

REPO = Path(__file__).resolve().parents[2]
GATEWAY_CONFIG = REPO / "gateway_config"
SERVER_EXT = REPO / "server_ext"
WAIT = 90.0  # generous: kernels start in ~1 s, but the machine may be loaded
KEY = "k" * 24 + uuid.uuid4().hex  # the HMAC key of user tokens (a Secret in the chart)
EG_TOKEN = uuid.uuid4().hex  # EG's own token: only the fronts know it
SERVER_TOKEN = "server-token-" + uuid.uuid4().hex[:8]
KERNEL_NAME = "python_distrun"


def user_token(username: str, lifetime: int = 0) -> str:
    sys.path.insert(0, str(GATEWAY_CONFIG / "gateway"))
    try:
        from gateway_tokens import sign
    finally:
        sys.path.pop(0)
    return sign(KEY.encode(), username, lifetime)


def http(
    url: str, method: str = "GET", body: Any = None, token: str | None = None
) -> tuple[int, Any]:
    """(status, decoded JSON body or raw text) of one request; never raises for a status."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"token {token}")
    try:
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    except (urllib.error.URLError, ConnectionError) as err:
        return 0, str(err)  # not listening (yet)
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def wait_until(check: Any, what: str, timeout: float = WAIT) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"


class Process:
    """A logged child process in its own session (a signal to it reaches nothing else)."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for_output(self, needle: str) -> None:
        wait_until(lambda: needle in self.output() or self._dead(), f"{needle!r} in {self.log}")
        assert needle in self.output(), f"{self.log.name} exited:\n{self.output()[-3000:]}"

    def _dead(self) -> bool:
        return self.proc.poll() is not None

    def terminate(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@dataclass
class GatewayReplica:
    """One gateway pod: EG (through our wrapper) on loopback, the identity front before it."""

    name: str
    root: Path
    state: Path
    eg_python: Path
    eg_port: int = field(default_factory=free_port)
    front_port: int = field(default_factory=free_port)
    eg: Process | None = None
    front: Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.front_port}"

    @property
    def eg_url(self) -> str:
        return f"http://127.0.0.1:{self.eg_port}"

    def environ(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTRUN_", "JUPYTER"))}
        env.update(
            EG_AUTH_TOKEN=EG_TOKEN,
            DISTRUN_GATEWAY_STATE=str(self.state),
            DISTRUN_EG_PORT=str(self.eg_port),
            DISTRUN_CULL_IDLE_SECONDS="0",
            JUPYTER_PATH=str(self.root.parent / "share"),  # the test kernelspec
            JUPYTER_RUNTIME_DIR=str(self.root / "runtime"),
            JUPYTER_DATA_DIR=str(self.root / "data"),
            PYTHONPATH=str(GATEWAY_CONFIG / "gateway"),
            PYTHONUNBUFFERED="1",
        )
        return env

    def start(self) -> "GatewayReplica":
        self.root.mkdir(parents=True, exist_ok=True)
        config = GATEWAY_CONFIG / "gateway" / "enterprise_gateway_config.py"
        self.eg = Process(
            [str(self.eg_python), "-m", "distrun_gateway", f"--config={config}"],
            self.environ(),
            self.root / "eg.log",
        )
        self.front = Process(self.front_argv(), self.front_environ(), self.root / "front.log")
        self.eg.wait_for_output("is available at")
        wait_until(lambda: http(self.url + "/healthz")[0] == 200, f"the front of {self.name}")
        return self

    def front_argv(self, *args: str) -> list[str]:
        return [str(self.eg_python), str(GATEWAY_CONFIG / "gateway" / "identity_front.py"), *args]

    def front_environ(self) -> dict[str, str]:
        return {
            **self.environ(),
            "DISTRUN_FRONT_KEY": KEY,
            "DISTRUN_FRONT_UPSTREAM": self.eg_url,
            "DISTRUN_FRONT_IP": "127.0.0.1",
            "DISTRUN_FRONT_PORT": str(self.front_port),
            "DISTRUN_FRONT_KERNEL_NAMESPACE": "kernels-{username}",
        }

    def revoke(self, username: str) -> None:
        """What an administrator runs in the front's container."""
        subprocess.run(
            self.front_argv("revoke", username), env=self.front_environ(), check=True, timeout=WAIT
        )

    def stop(self) -> None:
        for process in (self.front, self.eg):
            if process is not None:
                process.terminate()


def write_local_kernelspec(share: Path, eg_python: Path, ipython_dir: Path) -> None:
    """python_distrun as a local process: same name, env and magics as the pod kernelspec."""
    pod_spec = json.loads(
        (GATEWAY_CONFIG / "kernelspecs" / KERNEL_NAME / "kernel.json").read_text()
    )
    profile = ipython_dir / "profile_default"
    profile.mkdir(parents=True, exist_ok=True)
    config = (GATEWAY_CONFIG / "kernel" / "ipython_kernel_config.py").read_text()
    (profile / "ipython_kernel_config.py").write_text(config)
    spec = {
        "display_name": pod_spec["display_name"],
        "language": "python",
        "metadata": {
            "process_proxy": {"class_name": "distrun_gateway.ReplicaLocalProcessProxy"}
        },
        "env": {
            **pod_spec["env"],
            "PYTHONPATH": str(SERVER_EXT),  # the kernel image has distrun installed
            "IPYTHONDIR": str(ipython_dir),  # the image has the config in /etc/ipython
        },
        "argv": [
            str(eg_python), "-m", "ipykernel_launcher", "-f", "{connection_file}",
            "--IPKernelApp.parent_handle=0",
        ],
    }  # fmt: skip
    directory = share / "kernels" / KERNEL_NAME
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kernel.json").write_text(json.dumps(spec, indent=2))


@pytest.fixture(scope="session")
def eg_python() -> Path:
    return ensure_eg_venv()


@dataclass
class Gateways:
    root: Path
    eg_python: Path
    replicas: list[GatewayReplica] = field(default_factory=list)

    def start(self, name: str) -> GatewayReplica:
        replica = GatewayReplica(name, self.root / name, self.root / "state", self.eg_python)
        self.replicas.append(replica)
        return replica.start()


@pytest.fixture
def gateways(tmp_path: Path, eg_python: Path) -> Iterator[Gateways]:
    """Starts replicas on demand; all share one state directory, as pods share a volume."""
    write_local_kernelspec(tmp_path / "share", eg_python, tmp_path / "ipython")
    running = Gateways(tmp_path, eg_python)
    yield running
    for replica in running.replicas:
        replica.stop()
    kill_leftover_kernels(tmp_path)


def kill_leftover_kernels(root: Path) -> None:
    """Kernels outlive their gateway by design; kill the ones this test started."""
    for session in (root / "state" / "kernel_sessions").glob("*.json"):
        info = next(iter(json.loads(session.read_text()).values()))
        pgid = info.get("process_info", {}).get("pgid", 0)
        if pgid > 0:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def notebook_server(tmp_path: Path) -> Iterator[Any]:
    """Starts jupyter_server 2 with distrun, loaded with gateway_config/singleuser's config, as
    `user` behind `gateway`."""
    servers: list[ServerProcess] = []

    def start(gateway: GatewayReplica, user: str, **env: str) -> ServerProcess:
        server = ServerProcess(
            tmp_path / f"server-{len(servers)}",
            token=SERVER_TOKEN,
            config_file=GATEWAY_CONFIG / "singleuser" / "jupyter_server_config.py",
            env={
                "DISTRUN_GATEWAY_URL": gateway.url,
                "DISTRUN_GATEWAY_TOKEN": user_token(user),
                "DISTRUN_TOKEN": SERVER_TOKEN,
                "PYTHONUNBUFFERED": "1",
                **env,
            },
        )
        server.env.setdefault("DISTRUN_URL", server.url)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


# --- talking to a kernel over its websocket -------------------------------------------------


async def execute(ws_url: str, token: str, code: str) -> tuple[str, list[str]]:
    """Run `code` in the kernel behind `ws_url`: (its stdout, the names of errors raised)."""
    headers = {"Authorization": f"token {token}"}
    request = httpclient.HTTPRequest(ws_url, headers=headers, request_timeout=WAIT)
    connection = await websocket.websocket_connect(request)
    msg_id = uuid.uuid4().hex
    message = {
        "header": {
            "msg_id": msg_id, "msg_type": "execute_request", "username": "test",
            "session": uuid.uuid4().hex, "version": "5.3", "date": "2025-01-01T00:00:00Z",
        },
        "parent_header": {}, "metadata": {}, "buffers": [], "channel": "shell",
        "content": {
            "code": code, "silent": False, "store_history": False, "user_expressions": {},
            "allow_stdin": False, "stop_on_error": True,
        },
    }  # fmt: skip
    await connection.write_message(json.dumps(message))
    stdout: list[str] = []
    errors: list[str] = []
    deadline = time.monotonic() + WAIT
    try:
        while time.monotonic() < deadline:
            raw = await connection.read_message()
            assert raw is not None, "the kernel websocket closed mid-execution"
            reply = json.loads(raw)
            if reply.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = reply["msg_type"], reply["content"]
            if kind == "stream" and content["name"] == "stdout":
                stdout.append(content["text"])
            elif kind == "error":
                errors.append(content["ename"])
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(stdout), errors
    finally:
        connection.close()
    raise AssertionError(f"no reply to {code!r} within {WAIT} s; got {stdout} {errors}")
