"""Engines built from `DistrunApp.engines` (class path + kwargs), several at once."""

import json
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.fake_engine import FakeEngine
from tests.server.conftest import TokenPerUserIdentityProvider

SPEC = {"framework": "generic", "code": ""}


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    engine = "tests.fake_engine.FakeEngine"
    return {
        "ServerApp": {
            "jpserver_extensions": {"distrun": True},
            "identity_provider_class": TokenPerUserIdentityProvider,
        },
        "DistrunApp": {
            "engines": {
                "local": {"class": engine, "kwargs": {"name": "local"}},
                "other": {"class": engine, "kwargs": {"name": "other"}},
            },
            "default_engine": "other",
            "max_replicas": 8,
        },
    }


def engines(distrun_app: Any) -> dict[str, FakeEngine]:
    return {engine.name: engine for engine in distrun_app.registry.all()}


async def test_configured_engines_are_built_with_the_apps_limits(api, distrun_app):
    built = engines(distrun_app)
    assert sorted(built) == ["local", "other"]
    assert all(isinstance(engine, FakeEngine) for engine in built.values())
    assert {engine.limits.max_replicas for engine in built.values()} == {8}
    body = await api("engines")
    assert body["default_engine"] == "other"
    assert [engine["name"] for engine in body["engines"]] == ["other", "local"]
    assert body["limits"]["max_replicas"] == 8


async def test_jobs_go_to_the_named_or_default_engine_and_are_found_on_either(api, distrun_app):
    on_default = await api("jobs", method="POST", body={"spec": SPEC})
    on_local = await api("jobs", method="POST", body={"spec": {**SPEC, "engine": "local"}})
    assert (on_default["engine"], on_local["engine"]) == ("other", "local")
    assert (await api("jobs", on_local["id"]))["engine"] == "local"
    assert (await api("jobs", on_default["id"]))["engine"] == "other"
    listed = (await api("jobs"))["jobs"]
    assert [job["id"] for job in listed] == [on_local["id"], on_default["id"]]
    only_local = (await api("jobs", params={"engine": "local"}))["jobs"]
    assert [job["id"] for job in only_local] == [on_local["id"]]


async def test_listing_an_unknown_engine_is_400(jp_fetch):
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("distrun", "jobs", params={"engine": "volcano"})
    assert caught.value.code == 400
    assert json.loads(caught.value.response.body)["field"] == "engine"


async def test_the_apps_limits_apply_before_any_engine_sees_the_spec(api, jp_fetch):
    spec = {**SPEC, "roles": {"worker": {"replicas": 9}}}
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("distrun", "jobs", method="POST", body=json.dumps({"spec": spec}))
    assert caught.value.code == 400
    assert "between 0 and 8" in json.loads(caught.value.response.body)["message"]
