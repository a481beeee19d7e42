"""An engine that cannot be built keeps the extension out, and the server still stops cleanly."""

from typing import Any

import pytest
from tornado.httpclient import HTTPClientError


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"distrun": True}},
        "DistrunApp": {"engines": {"local": {"class": "no_such_module.Engine"}}},
    }


async def test_a_broken_engine_config_leaves_the_routes_out_and_stop_still_works(
    jp_fetch, jp_serverapp
):
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("distrun", "engines")
    assert caught.value.code == 404
    await jp_serverapp.cleanup_extensions()  # must not raise on the half-initialized app
