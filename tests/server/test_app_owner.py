"""With jupyter_server's own identity provider (a single-user server), jobs belong to the OS
user, whatever anonymous name the provider invents per browser or token request."""

import getpass
import json
from typing import Any

import pytest


@pytest.fixture
def jp_server_config(fake_engine: Any) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"distrun": True}},
        "DistrunApp": {"engine_factories": {"local": lambda app: fake_engine}},
    }


async def test_jobs_belong_to_the_os_user_and_every_token_request_sees_them(jp_fetch):
    body = json.dumps({"spec": {"framework": "generic", "code": ""}})
    job = json.loads((await jp_fetch("distrun", "jobs", method="POST", body=body)).body)
    assert job["owner"] == getpass.getuser()
    listed = json.loads((await jp_fetch("distrun", "jobs")).body)["jobs"]
    assert [j["id"] for j in listed] == [job["id"]]


async def test_on_a_hub_singleuser_server_the_authenticated_user_owns_jobs_whatever_the_provider(
    jp_fetch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # JupyterHub's legacy single-user mode keeps jupyter_server's own identity provider, but
    # every request is a hub user's: the OS account (jovyan for every KubeSpawner pod) is not.
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "hub-token")
    body = json.dumps({"spec": {"framework": "generic", "code": ""}})
    job = json.loads((await jp_fetch("distrun", "jobs", method="POST", body=body)).body)
    # The test server's provider names each token request anew; tests/hub runs a real hub.
    assert job["owner"] and job["owner"] != getpass.getuser()


async def test_an_engine_running_jobs_as_the_servers_user_is_on_for_a_hub_singleuser_server(
    jp_fetch: Any, fake_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One hub user's server is not shared: the local engine takes her jobs
    (tests/security/test_shared_server.py: a shared one refuses them)."""
    fake_engine.runs_as_server_user = True
    monkeypatch.setenv("JUPYTERHUB_USER", "alice")
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "hub-token")
    body = json.dumps({"spec": {"framework": "generic", "code": ""}})
    assert (await jp_fetch("distrun", "jobs", method="POST", body=body)).code == 201
    engines = json.loads((await jp_fetch("distrun", "engines")).body)["engines"]
    assert [e["available"] for e in engines if e["name"] == "local"] == [True]
