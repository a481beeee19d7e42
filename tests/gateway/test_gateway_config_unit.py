"""Pure functions of gateway_config: user tokens, kernel namespaces, the kernel pod."""

import hashlib
import hmac
import sys
from pathlib import Path
from typing import ClassVar

import pytest
import yaml

GATEWAY_CONFIG = Path(__file__).resolve().parents[2] / "gateway_config"
sys.path[:0] = [str(GATEWAY_CONFIG / "gateway"), str(GATEWAY_CONFIG / "kernel_pod")]
from identity_front import kernel_namespace, user_token, verify_token
from launch_kernel_pod import label_value, render_pod

sys.path[:2] = []
KEY = b"0123456789abcdef0123456789abcdef"


def test_a_token_proves_its_user_and_nobody_else() -> None:
    assert verify_token(KEY, user_token(KEY, "alice")) == "alice"
    assert verify_token(KEY, user_token(KEY, "alice").replace("alice", "bob")) is None
    assert verify_token(b"another key" * 4, user_token(KEY, "alice")) is None
    assert verify_token(KEY, "alice") is None
    assert verify_token(KEY, "." + "alice") is None


def test_user_names_with_dots_and_at_signs_round_trip_but_control_characters_do_not() -> None:
    assert verify_token(KEY, user_token(KEY, "first.last@example.org")) == "first.last@example.org"
    assert verify_token(KEY, user_token(KEY, "eve\nmallory")) is None
    assert verify_token(KEY, user_token(KEY, "")) is None


def test_the_hub_snippet_in_jupyterhub_values_signs_tokens_the_front_accepts() -> None:
    values = yaml.safe_load((GATEWAY_CONFIG.parent / "helm" / "jupyterhub-values.yaml").read_text())
    snippet = values["hub"]["extraConfig"]["distrun-gateway-token"]

    class Spawner:
        class user:
            name = "alice"

    class KubeSpawner:
        environment: ClassVar[dict[str, object]] = {}

    class Config:
        pass

    config = Config()
    config.KubeSpawner = KubeSpawner  # type: ignore[attr-defined]
    env = {"DISTRUN_GATEWAY_USER_KEY": KEY.decode()}
    namespace = {"c": config, "os": type("os", (), {"environ": env})}
    exec(snippet.replace("import os\n", ""), namespace)  # noqa: S102  (run it as the hub does)
    token = KubeSpawner.environment["DISTRUN_GATEWAY_TOKEN"](Spawner())  # type: ignore[operator]
    assert verify_token(KEY, token) == "alice"
    expected = hmac.new(KEY, b"distrun-gateway-v1\0alice", hashlib.sha256).hexdigest()
    assert token == f"{expected}.alice"


@pytest.mark.parametrize(
    ("policy", "user", "namespace"),
    [
        ("", "alice", None),
        ("kernels", "alice", "kernels"),
        ("jupyter-{username}", "Alice", "jupyter-alice"),
        ("jupyter-{username}", "first.last", None),  # not a DNS label: refused, not mangled
    ],
)
def test_kernel_namespace_follows_the_policy(policy: str, user: str, namespace: str | None) -> None:
    assert kernel_namespace(policy, user) == namespace


KERNEL_ENV = {
    "KERNEL_USERNAME": "alice@example.org",
    "KERNEL_NAMESPACE": "kernels",
    "KERNEL_POD_NAME": "alice-k1",
    "KERNEL_SERVICE_ACCOUNT_NAME": "default",
    "KERNEL_IMAGE": "ghcr.io/distrun/kernel-py:0.1.0",
    "KERNEL_UID": "1000",
    "KERNEL_GID": "100",
    "KERNEL_NAME": "python_distrun",
    "DISTRUN_URL": "http://10.0.0.7:8888/user/alice/",
    "PATH": "/usr/bin",
    "EG_AUTH_TOKEN": "must-not-leak",
}


def test_the_kernel_pod_is_non_root_labelled_with_its_user_and_carries_only_kernel_variables() -> (
    None
):
    pod = render_pod("k1", KERNEL_ENV, {"RESPONSE_ADDRESS": "10.0.0.2:8877"})
    assert pod["kind"] == "Pod" and pod["metadata"]["namespace"] == "kernels"
    assert pod["metadata"]["labels"]["kernel_id"] == "k1"
    assert pod["metadata"]["labels"]["component"] == "kernel"
    assert pod["metadata"]["labels"]["distrun.io/user"] == "alice-example.org"
    security = pod["spec"]["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] == 1000
    assert pod["spec"]["automountServiceAccountToken"] is False
    container = pod["spec"]["containers"][0]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    env = {item["name"]: item["value"] for item in container["env"]}
    assert env["KERNEL_USERNAME"] == "alice@example.org"
    assert env["RESPONSE_ADDRESS"] == "10.0.0.2:8877"
    assert env["DISTRUN_URL"] == "http://10.0.0.7:8888/user/alice/"
    assert "EG_AUTH_TOKEN" not in env and "PATH" not in env


def test_the_gpu_kernelspec_asks_for_a_gpu_and_tolerates_gpu_nodes() -> None:
    pod = render_pod("k1", {**KERNEL_ENV, "DISTRUN_KERNEL_GPUS": "1"}, {})
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert pod["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"


def test_template_values_cannot_inject_yaml() -> None:
    hostile = {**KERNEL_ENV, "KERNEL_POD_NAME": 'x"\n  hostNetwork: true\n  y: "'}
    pod = render_pod("k1", hostile, {})
    assert "hostNetwork" not in pod["spec"]
    assert pod["metadata"]["name"] == hostile["KERNEL_POD_NAME"]


def test_label_values_are_valid_labels() -> None:
    assert label_value("first.last@example.org") == "first.last-example.org"
    assert label_value("-" * 70) == "unknown"
    assert len(label_value("a" * 100)) == 63
