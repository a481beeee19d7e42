"""The whole deployment on one machine, as an admin assembles it (README "Deploy on a
cluster", docs/kubernetes.md), every part real and on loopback:

- JupyterHub 6 from PyPI with its proxy (configurable-http-proxy from npm), configured by
  tests/hub/jupyterhub_config.py: users log in, the hub spawns their single-user servers
  (jupyterhub-singleuser, distrun installed, the project's singleuser config), and the
  distrun chart's profile hook, taken from the chart rendered with `profiles.enabled=false`,
  signs each user's gateway token at spawn;
- the identity front and Enterprise Gateway 3.3.0 (its own virtualenv) as one gateway pod runs
  them (tests/gateway/conftest.py), with the project's kernelspec on EG's local process proxy
  instead of the Kubernetes one (no kubelet here).

Only Kubernetes is missing: kernel pods, per-user namespaces and the cluster engines are the
Kubernetes tier's (tests/k8s, tests/helm).
"""

import json
import os
import secrets
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.gateway.conftest import (
    KEY,
    GatewayReplica,
    Process,
    http,
    kill_leftover_kernels,
    wait_until,
    write_local_kernelspec,
)
from tests.helm.test_chart import CHART, KUBE_VERSION
from tests.server_process import free_port

from .proxy import ensure_proxy

REPO = Path(__file__).resolve().parents[2]
HUB_CONFIG = Path(__file__).with_name("jupyterhub_config.py")
SINGLEUSER_CONFIG = REPO / "gateway_config" / "singleuser" / "jupyter_server_config.py"
KERNEL_DISPLAY_NAME = "Python 3 (distrun, remote)"


def chart_profiles_files(helm: Path, into: Path) -> Path:
    """The hub's hook files, as the chart renders its profiles ConfigMap with
    `profiles.enabled=false` (and its other values as they are)."""
    result = subprocess.run(
        [str(helm), "template", "distrun", str(CHART), "--namespace", "jhub", *KUBE_VERSION,
         "--set", "profiles.enabled=false"],
        check=True, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    objects = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    (config_map,) = [
        o for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "distrun-distrun-profiles"
    ]  # fmt: skip
    into.mkdir(parents=True, exist_ok=True)
    for name, text in config_map["data"].items():
        (into / name).write_text(text)
    return into


@dataclass
class HubDeployment:
    root: Path
    gateway: GatewayReplica
    users: tuple[str, ...]
    legacy_users: tuple[str, ...] = ()
    password: str = field(default_factory=lambda: secrets.token_hex(8))
    service_token: str = field(default_factory=lambda: secrets.token_hex(16))
    port: int = field(default_factory=free_port)
    hub: Process | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, helm: Path) -> "HubDeployment":
        profiles = chart_profiles_files(helm, self.root / "profiles")
        singleuser = self.root / "singleuser-config"
        singleuser.mkdir(parents=True, exist_ok=True)
        (singleuser / SINGLEUSER_CONFIG.name).write_bytes(SINGLEUSER_CONFIG.read_bytes())
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTRUN_", "JUPYTER"))}
        env.update(
            DISTRUN_HUB_ROOT=str(self.root),
            DISTRUN_HUB_PORT=str(self.port),
            DISTRUN_HUB_API_PORT=str(free_port()),
            DISTRUN_HUB_PROXY_API_PORT=str(free_port()),
            DISTRUN_HUB_PROXY=str(ensure_proxy()),
            DISTRUN_HUB_PASSWORD=self.password,
            DISTRUN_HUB_USERS=",".join(self.users),
            DISTRUN_HUB_LEGACY_USERS=",".join(self.legacy_users),
            DISTRUN_HUB_SERVICE_TOKEN=self.service_token,
            DISTRUN_HUB_GATEWAY_URL=self.gateway.url,
            DISTRUN_HUB_SINGLEUSER_CONFIG_DIR=str(singleuser),
            DISTRUN_HUB_PROFILES_DIR=str(profiles),
            # What helm/jupyterhub-values.yaml gives the hub: the key it signs tokens with.
            DISTRUN_PROFILE_SETTINGS=str(profiles / "settings.json"),
            DISTRUN_GATEWAY_USER_KEY=KEY,
            DISTRUN_GATEWAY_TOKEN_SECONDS="86400",
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            PYTHONUNBUFFERED="1",
        )
        self.root.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "jupyterhub", "-f", str(HUB_CONFIG)]
        self.hub = Process(argv, env, self.root / "hub.log")
        wait_until(lambda: self.api("GET", "/hub/api/")[0] == 200, "the hub's API", 180)
        return self

    def stop(self) -> None:
        if self.hub is not None:
            for user in self.users:  # servers are the hub's children: stop them through it
                self.api("DELETE", f"/hub/api/users/{user}/server")
            self.hub.terminate()

    # --- the hub's REST API, as the tier's admin service ---

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return http(self.url + path, method, body, self.service_token)

    def spawn(self, user: str) -> str:
        """Starts `user`'s server (if it is not running) and returns its URL once it answers."""
        status, reply = self.api("POST", f"/hub/api/users/{user}/server")
        assert status in (201, 202, 400), (status, reply)  # 400: already running
        wait_until(lambda: self._ready(user), f"{user}'s server", 240)
        return f"{self.url}/user/{user}/"

    def _ready(self, user: str) -> bool:
        status, model = self.api("GET", f"/hub/api/users/{user}")
        server = model.get("servers", {}).get("", {}) if status == 200 else {}
        return bool(server.get("ready"))

    def token(self, user: str) -> str:
        """An API token of `user`'s own, as the hub's token page hands one out."""
        status, reply = self.api("POST", f"/hub/api/users/{user}/tokens", {"note": "tier"})
        assert status == 201, reply
        return str(reply["token"])

    # --- what the deployment printed ---

    def logs(self) -> dict[str, str]:
        """Every component's log: the hub's holds its proxy's and the single-user servers'
        (their processes write to the hub's output), the gateway pod's the front's and EG's."""
        assert self.hub is not None and self.gateway.front and self.gateway.eg
        return {
            "hub": self.hub.output(),
            "front": self.gateway.front.output(),
            "eg": self.gateway.eg.output(),
        }

    def secrets_in_use(self) -> dict[str, str]:
        """Every token the running deployment holds, read from its processes' environments:
        each user's hub API token and gateway token, and the tier's own."""
        found = {"service": self.service_token, "front-key": KEY}
        for environ_file in Path("/proc").glob("[0-9]*/environ"):
            try:
                raw = environ_file.read_bytes()
            except OSError:
                continue
            environ = dict(
                item.split("=", 1)
                for item in raw.decode(errors="replace").split("\0")
                if "=" in item
            )
            user = environ.get("JUPYTERHUB_USER")
            if user not in self.users:
                continue
            for name in ("JUPYTERHUB_API_TOKEN", "DISTRUN_GATEWAY_TOKEN", "DISTRUN_TOKEN"):
                if environ.get(name):
                    found[f"{user}:{name}"] = environ[name]
        return found


def start_gateway(root: Path, eg_python: Path) -> GatewayReplica:
    write_local_kernelspec(root / "share", eg_python, root / "ipython")
    gateway = GatewayReplica("gateway", root / "gateway", root / "state", eg_python)
    return gateway.start()


def stop_gateway(gateway: GatewayReplica, root: Path) -> None:
    gateway.stop()
    kill_leftover_kernels(root)


def describe(logs: dict[str, str]) -> str:
    return json.dumps({name: text[-3000:] for name, text in logs.items()}, indent=1)
