"""The hub's profile hook gives each user a namespace of their own or refuses: it never adopts
a namespace someone else made, never hands out the hub's, the gateway's or a kube-* one, and
refuses user names no namespace can be made for. The API server here is a fake that answers
as a real one does (201 / 409 Conflict, GET of what exists); tests/k8s/test_multi_user.py
provisions real namespaces."""

import asyncio
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

GATEWAY_CONFIG = Path(__file__).resolve().parents[2] / "gateway_config"
sys.path[:0] = [str(GATEWAY_CONFIG / "gateway"), str(GATEWAY_CONFIG / "profiles")]
import distrun_profiles
from distrun_profiles import ProfileRefused, ProfileSettings

sys.path[:2] = []
SETTINGS = ProfileSettings(notebook_cluster_role="notebook", gateway_namespace="jhub")


class FakeApi:
    """Namespaces by name; every other object is recorded as applied."""

    def __init__(self, namespaces: dict[str, dict[str, Any]] | None = None) -> None:
        self.namespaces = dict(namespaces or {})
        self.applied: list[str] = []

    async def call_api(self, path: str, method: str, **kwargs: Any) -> Any:
        if method == "POST" and path == "/api/v1/namespaces":
            name = kwargs["body"]["metadata"]["name"]
            if name in self.namespaces:
                raise ApiException(status=409, reason="AlreadyExists")
            self.namespaces[name] = kwargs["body"]
            return kwargs["body"]
        if method == "GET":
            return self.namespaces[path.rsplit("/", 1)[1]]
        assert method == "PATCH"
        self.applied.append(path)
        return None


def provision(api: FakeApi, user: str, settings: ProfileSettings = SETTINGS) -> str:
    return asyncio.run(distrun_profiles.ensure_profile(api, settings, user, {"t": "x"}))


def test_a_new_user_gets_a_namespace_created_and_labelled_as_theirs_and_keeps_it() -> None:
    api = FakeApi()
    assert provision(api, "ops") == "distrun-ops"
    made = api.namespaces["distrun-ops"]["metadata"]
    assert made["annotations"] == {"distrun.io/owner": "ops"}
    assert made["labels"]["distrun.io/profile"] == "true"
    assert api.applied and all("distrun-ops" in path for path in api.applied)
    assert provision(api, "ops") == "distrun-ops"  # the next spawn: already theirs


@pytest.mark.parametrize(
    "metadata",
    [
        {"name": "distrun-ops"},  # made by someone else, unlabelled
        {"name": "distrun-ops", "labels": {"distrun.io/profile": "true"},
         "annotations": {"distrun.io/owner": "ops"}},  # labelled by hand, not by the hook
        {"name": "distrun-ops", "labels": {"distrun.io/profile": "true",
         "app.kubernetes.io/managed-by": "distrun-profiles"},
         "annotations": {"distrun.io/owner": "Ops"}},  # another user's
    ],
)  # fmt: skip
def test_an_existing_namespace_not_made_for_that_user_is_never_adopted(
    metadata: dict[str, Any],
) -> None:
    api = FakeApi({"distrun-ops": {"metadata": metadata}})
    with pytest.raises(ProfileRefused, match="'distrun-ops' already exists and is not 'ops'"):
        provision(api, "ops")
    assert api.applied == [], "nothing written into a namespace that is not theirs"


@pytest.mark.parametrize(
    ("template", "user", "why"),
    [
        ("{username}", "kube-system", "the cluster's or the hub's own"),
        ("{username}", "kube-public", "the cluster's or the hub's own"),
        ("{username}", "jhub", "the cluster's or the hub's own"),
        ("{username}", "default", "the cluster's or the hub's own"),
        ("kube-{username}", "alice", "the cluster's or the hub's own"),
        ("team", "alice", "must hold {username} once"),
        ("distrun-{username}", "", "not valid"),
        ("distrun-{username}", "a\nb", "not valid"),
        ("distrun-{username}", "x" * 300, "not valid"),
    ],
)
def test_no_template_or_user_name_yields_the_hubs_the_gateways_or_a_kube_namespace(
    template: str, user: str, why: str
) -> None:
    settings = replace(SETTINGS, namespace_template=template)
    api = FakeApi()
    with pytest.raises(ProfileRefused, match=why):
        provision(api, user, settings)
    assert api.namespaces == {} and api.applied == []


def test_names_that_differ_only_in_case_or_punctuation_get_different_namespaces() -> None:
    api = FakeApi()
    names = {provision(api, user) for user in ("alice", "Alice", "a.lice", "a-lice")}
    assert len(names) == 4
