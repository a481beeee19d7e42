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
