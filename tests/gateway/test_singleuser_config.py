"""gateway_config/singleuser/jupyter_server_config.py: a required setting missing stops the
server with one line naming it; remote kernels are told a URL they can reach."""

import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from traitlets.config import Config

CONFIG_FILE = (
    Path(__file__).resolve().parents[2] / "gateway_config/singleuser/jupyter_server_config.py"
)


def load(monkeypatch: pytest.MonkeyPatch, **env: str) -> tuple[Config, dict[str, str]]:
    """The config the file builds, and the environment it leaves, from `env` alone."""
    for name in list(os.environ):
        if name.startswith(("DISTRUN_", "JUPYTERHUB_", "KERNEL_")):
            monkeypatch.delenv(name)
    # What the file writes into os.environ must not outlive the test (kernels started later in
    # the session would inherit it): set-then-delete makes monkeypatch restore their absence.
    for name in ("DISTRUN_URL", "DISTRUN_TOKEN", "KERNEL_USERNAME"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    config = Config()
    runpy.run_path(str(CONFIG_FILE), {"get_config": lambda: config})
    return config, dict(os.environ)


@pytest.mark.parametrize("missing", ["DISTRUN_GATEWAY_URL", "DISTRUN_GATEWAY_TOKEN"])
def test_a_server_without_a_required_gateway_setting_stops_with_one_line_naming_it(
    tmp_path: Path, missing: str
) -> None:
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / CONFIG_FILE.name).write_bytes(CONFIG_FILE.read_bytes())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISTRUN_", "JUPYTER"))}
    env.update(
        DISTRUN_GATEWAY_URL="http://127.0.0.1:9", DISTRUN_GATEWAY_TOKEN="t",
        JUPYTER_CONFIG_DIR=str(config_dir), JUPYTER_DATA_DIR=str(tmp_path / "data"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
    )  # fmt: skip
    del env[missing]
    argv = [sys.executable, "-m", "jupyter_server", "--port=0", "--ServerApp.open_browser=False"]
    if os.getuid() == 0:
        argv.append("--allow-root")

    result = subprocess.run(
        argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )

    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if missing in line]
    assert lines == [f"distrun: {missing} is not set: " + lines[0].split(" is not set: ")[1]]
    assert "Traceback" not in result.stderr and "Exception while loading" not in result.stderr


@pytest.mark.parametrize(
    ("service_url", "pod_ip", "expected"),
    [
        ("http://127.0.0.1:51234/user/alice/", "", "http://127.0.0.1:51234/user/alice/"),
        ("http://0.0.0.0:8888/user/alice/", "10.1.2.3", "http://10.1.2.3:8888/user/alice/"),
        ("http://[::]:8888/user/a%40b/", "fd00::7", "http://[fd00::7]:8888/user/a%40b/"),
        ("http://:8888/user/alice/", "10.1.2.3", "http://10.1.2.3:8888/user/alice/"),
    ],
)
def test_remote_kernels_reach_the_server_at_the_url_jupyterhub_gives_it(
    monkeypatch: pytest.MonkeyPatch, service_url: str, pod_ip: str, expected: str
) -> None:
    env: dict[str, Any] = {"JUPYTERHUB_SERVICE_URL": service_url, "JUPYTERHUB_USER": "alice"}
    if pod_ip:
        env["DISTRUN_POD_IP"] = pod_ip
    _, environ = load(
        monkeypatch, DISTRUN_GATEWAY_URL="http://gw:8888", DISTRUN_GATEWAY_TOKEN="t", **env
    )
    assert environ["DISTRUN_URL"] == expected
    assert environ["KERNEL_USERNAME"] == "alice"


def test_kernels_go_through_distrun_session_and_websocket_classes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, _ = load(monkeypatch, DISTRUN_GATEWAY_URL="http://gw:8888", DISTRUN_GATEWAY_TOKEN="t")
    server = config.ServerApp
    assert server.session_manager_class.endswith("gateway_kernels.GatewayKernelSessions")
    assert server.kernel_websocket_connection_class.endswith(
        "gateway_kernels.GatewayKernelConnection"
    )
    assert config.GatewayClient.auth_token == "t"
