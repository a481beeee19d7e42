"""Pure functions of gateway_config: user tokens, kernel namespaces, the kernel pod."""

import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import assume, given
from hypothesis import strategies as st

GATEWAY_CONFIG = Path(__file__).resolve().parents[2] / "gateway_config"
sys.path[:0] = [
    str(GATEWAY_CONFIG / "gateway"),
    str(GATEWAY_CONFIG / "kernel_pod"),
    str(GATEWAY_CONFIG / "profiles"),
]
import distrun_profiles
from gateway_tokens import revoke, sign, verify
from identity_front import kernel_namespace
from launch_kernel_pod import label_value, render_pod
from user_namespaces import NAMESPACE_RE, user_namespace

sys.path[:3] = []
PROFILE = distrun_profiles.ProfileSettings(notebook_cluster_role="notebook")
KEY = b"0123456789abcdef0123456789abcdef"


def proves(token: str, **kwargs: Any) -> str | None:
    return verify(KEY, token, **kwargs).username


def test_a_token_proves_its_user_and_nobody_else() -> None:
    assert proves(sign(KEY, "alice")) == "alice"
    assert proves(sign(KEY, "alice").replace("alice", "bob")) is None
    assert proves(sign(KEY, "bob").rsplit(".", 1)[0] + ".alice") is None
    assert verify(b"another key" * 4, sign(KEY, "alice")).username is None
    assert proves("alice") is None
    assert proves("." + "alice") is None
    assert proves(sign(KEY, "alice") + "\n") is None


def test_user_names_with_dots_and_at_signs_round_trip_others_cannot_be_signed() -> None:
    assert proves(sign(KEY, "first.last@example.org")) == "first.last@example.org"
    for name in ["eve\nmallory", "", "ali\u00e9e", "a" * 129]:
        with pytest.raises(ValueError, match="cannot have a gateway token"):
            sign(KEY, name)


@given(st.text(max_size=200))
def test_any_text_is_refused_without_an_exception(text: str) -> None:
    assume(not text.startswith("v2."))
    assert verify(KEY, text).username is None
    assert verify(KEY, "v2.1.0." + "0" * 64 + "." + text).username is None


def test_a_token_expires_after_its_lifetime() -> None:
    token = sign(KEY, "alice", lifetime_seconds=60, now=1000)
    assert proves(token, now=1059.9) == "alice"
    verdict = verify(KEY, token, now=1060)
    assert verdict.username is None and "expired" in verdict.reason
    assert proves(sign(KEY, "alice", now=1000), now=10**10) == "alice"  # 0: until revoked


def test_revoking_a_user_voids_their_tokens_until_then_and_nobody_elses(tmp_path: Path) -> None:
    old, bobs = sign(KEY, "alice", now=1000), sign(KEY, "bob", now=1000)
    revoke(tmp_path, "alice", now=2000)
    verdict = verify(KEY, old, revocations=tmp_path)
    assert verdict.username is None and "revoked" in verdict.reason
    assert proves(bobs, revocations=tmp_path) == "bob"
    assert proves(sign(KEY, "alice", now=2001), revocations=tmp_path) == "alice"


def test_an_unreadable_revocation_record_voids_the_users_tokens(tmp_path: Path) -> None:
    revoke(tmp_path, "alice", now=2000)
    [record] = list(tmp_path.iterdir())
    record.write_text("not a time")
    assert proves(sign(KEY, "alice", now=3000), revocations=tmp_path) is None


@pytest.mark.parametrize("profiles", [True, False])
def test_the_hub_config_in_jupyterhub_values_installs_the_profile_hooks(
    monkeypatch: pytest.MonkeyPatch, profiles: bool
) -> None:
    values = yaml.safe_load((GATEWAY_CONFIG.parent / "helm" / "jupyterhub-values.yaml").read_text())
    snippet = values["hub"]["extraConfig"]["distrun-profiles"]
    mount = values["hub"]["extraVolumeMounts"][0]["mountPath"]
    assert f'sys.path.insert(0, "{mount}")' in snippet
    # The chart's settings.json, as its profiles ConfigMap holds it either way.
    monkeypatch.setattr(
        distrun_profiles, "_settings", distrun_profiles.ProfileSettings("role", enabled=profiles)
    )

    class KubeSpawner:
        pass

    config = type("Config", (), {"KubeSpawner": KubeSpawner})()
    exec(snippet.replace(mount, str(GATEWAY_CONFIG / "profiles")), {"c": config})  # noqa: S102
    assert KubeSpawner.pre_spawn_hook is distrun_profiles.pre_spawn_hook  # type: ignore[attr-defined]
    if profiles:
        assert KubeSpawner.enable_user_namespaces is True  # type: ignore[attr-defined]
        assert KubeSpawner.modify_pod_hook is distrun_profiles.modify_pod_hook  # type: ignore[attr-defined]
    else:  # one namespace for all: the hook only signs each user's gateway token
        assert not hasattr(KubeSpawner, "enable_user_namespaces")
        assert not hasattr(KubeSpawner, "modify_pod_hook")


async def test_without_profiles_the_hook_gives_each_server_its_own_gateway_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        distrun_profiles, "_settings", distrun_profiles.ProfileSettings("role", enabled=False)
    )
    monkeypatch.setenv("DISTRUN_GATEWAY_USER_KEY", KEY.decode())
    shared = {"DISTRUN_GATEWAY_URL": "http://front"}  # the configured dict every spawner sees
    spawners = []
    for name in ("alice", "bob"):
        spawner = type("Spawner", (), {})()
        spawner.user = type("User", (), {"name": name})()
        spawner.api_token = f"hub-token-{name}"
        spawner.environment = shared
        await distrun_profiles.pre_spawn_hook(spawner)
        spawners.append(spawner)

    assert shared == {"DISTRUN_GATEWAY_URL": "http://front"}
    for spawner in spawners:
        token = spawner.environment["DISTRUN_GATEWAY_TOKEN"]
        assert verify(KEY, token).username == spawner.user.name


def test_the_gateway_token_the_profile_hook_stores_is_one_the_front_accepts() -> None:
    environ = {"DISTRUN_GATEWAY_USER_KEY": KEY.decode(), "DISTRUN_GATEWAY_TOKEN_SECONDS": "600"}
    tokens = distrun_profiles.user_tokens("alice", "hub-token", environ)
    assert tokens["jupyterhub-api-token"] == "hub-token"
    token = tokens["distrun-gateway-token"]
    assert proves(token) == "alice"
    assert proves(token, now=time.time() + 601) is None  # the lifetime the chart sets
    assert distrun_profiles.user_tokens("alice", "t", {}) == {"jupyterhub-api-token": "t"}


def test_no_token_stays_a_literal_value_of_the_notebook_pod(monkeypatch) -> None:
    from kubernetes_asyncio.client import V1Container, V1EnvVar, V1Pod, V1PodSpec

    monkeypatch.setattr(distrun_profiles, "_settings", PROFILE)
    env = [V1EnvVar(name="JUPYTERHUB_API_TOKEN", value="alices-token"),
           V1EnvVar(name="JPY_API_TOKEN", value="alices-token"),
           V1EnvVar(name="JUPYTERHUB_USER", value="alice")]  # fmt: skip
    pod = V1Pod(spec=V1PodSpec(containers=[V1Container(name="notebook", env=env)]))
    spec = distrun_profiles.modify_pod_hook(None, pod).to_dict()
    assert "alices-token" not in str(spec)
    variables = {v["name"]: v for v in spec["spec"]["containers"][0]["env"]}
    assert variables["JUPYTERHUB_USER"]["value"] == "alice"
    for name, key in distrun_profiles.SECRET_ENV.items():
        reference = variables[name]["value_from"]["secret_key_ref"]
        assert (reference["name"], reference["key"]) == ("distrun-user-tokens", key)


@pytest.mark.parametrize(
    ("policy", "user", "namespace"),
    [
        ("", "alice", None),
        ("kernels", "alice", "kernels"),
        ("jupyter-{username}", "alice", "jupyter-alice"),
        # not a safe name as it is: its own namespace, never another user's
        ("jupyter-{username}", "Alice", "jupyter-alice--3bc51062"),
        ("jupyter-{username}", "first.last", "jupyter-first-last--23e1b5a0"),
        ("{username}" + "x" * 60, "alice", None),  # no room for a name
    ],
)
def test_kernel_namespace_follows_the_policy(policy: str, user: str, namespace: str | None) -> None:
    assert kernel_namespace(policy, user) == namespace


KERNEL_ENV = {
    "KERNEL_USERNAME": "alice@example.org",
    "KERNEL_NAMESPACE": "kernels",
    "KERNEL_POD_NAME": "alice-k1",
    "KERNEL_SERVICE_ACCOUNT_NAME": "default",
    "KERNEL_IMAGE": "ghcr.io/distrun/kernel-py:0.2.0",
    "KERNEL_UID": "1000",
    "KERNEL_GID": "100",
    "KERNEL_NAME": "python_distrun",
    "DISTRUN_URL": "http://10.0.0.7:8888/user/alice/",
    "DISTRUN_TOKEN": "alices-hub-token",
    "DISTRUN_KERNEL_TOKEN_SECRET": "distrun-user-tokens",
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
    env = {item["name"]: item["value"] for item in container["env"] if "value" in item}
    assert env["KERNEL_USERNAME"] == "alice@example.org"
    # The user's token reaches the kernel from their Secret, by reference: no pod spec holds it.
    assert "alices-hub-token" not in str(pod)
    [token] = [item for item in container["env"] if item["name"] == "DISTRUN_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == {
        "name": "distrun-user-tokens",
        "key": "jupyterhub-api-token",
        "optional": True,
    }
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


@given(st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=80))
def test_two_users_never_share_a_namespace(first: str, second: str) -> None:
    assume(first != second)
    assert user_namespace("distrun-{username}", first) != user_namespace(
        "distrun-{username}", second
    )


@given(st.text(min_size=1, max_size=200))
def test_every_username_forms_a_valid_namespace(username: str) -> None:
    assert NAMESPACE_RE.match(user_namespace("distrun-{username}", username))


@given(st.text(min_size=1, max_size=90))
def test_the_engines_name_a_users_namespace_as_the_hub_does(username: str) -> None:
    from distrun.engines.kube.client import namespace_for

    template = "distrun-{username}"
    assert namespace_for(template, username) == user_namespace(template, username)
