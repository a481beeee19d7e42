"""A server several users share (an identity provider with a name per token, not a JupyterHub
single-user server): the local engine would run every user's job as the server's own OS user,
beside everyone else's code in one state directory and with the server's credentials in reach,
so by default it takes no job there and says why; a single-user server is unaffected."""

from pathlib import Path
from typing import Any

import pytest

from tests.security.conftest import BOB, Api, local_engine_config

CODE = "print('hello')\n"


@pytest.fixture
def jp_server_config(jp_server_config: dict[str, Any], state_dir: Path) -> dict[str, Any]:
    distrun = {**local_engine_config(state_dir)}
    del distrun["local_engine_on_shared_server"]  # the default
    return {**jp_server_config, "DistrunApp": distrun}


async def test_the_local_engine_refuses_jobs_on_a_shared_server_and_says_why(api: Api) -> None:
    for headers in (None, BOB):
        reply = await api.call(
            "POST", "jobs", {"spec": {"framework": "generic", "code": CODE}}, headers
        )
        assert reply.code == 403, reply.body
        message = reply.json["message"]
        assert "several users share it" in message
        assert "local_engine_on_shared_server" in message
        cell = await api.call(
            "POST", "jobs", {"cell": "%framework=pytorch\n%worker=1\n" + CODE}, headers
        )
        assert (cell.code, cell.json["message"]) == (403, message)

    engines = (await api.call("GET", "engines")).json["engines"]
    [local] = [e for e in engines if e["name"] == "local"]
    assert local["available"] is False and "several users share it" in local["reason"]
    assert (await api.call("GET", "jobs")).json["jobs"] == []
