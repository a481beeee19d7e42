"""GPU requests through the REST API: what an engine's GPU mode cannot give is a 400 naming the
header line that asked for it, and GET /distrun/engines says what each engine offers."""

import json
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from distrun.core.errors import SpecError
from distrun.core.gpus import GpuRequest
from distrun.engines.kube.gpu_modes import GpuMode, gpu_resources

from ..fake_engine import FakeEngine

CELL = "%framework=generic\n%worker=2\n%worker.gpu=0.5\nprint('hi')\n"


async def post_error(jp_fetch: Any, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("distrun", "jobs", method="POST", body=json.dumps(body))
    return caught.value.code, json.loads(caught.value.response.body)


def whole_mode_refusal() -> SpecError:
    """What a Kubernetes engine in "whole" mode raises for a share."""
    with pytest.raises(SpecError) as raised:
        gpu_resources(GpuRequest(share=0.5), GpuMode("whole"), "roles.worker.resources.gpu")
    return raised.value


async def test_a_share_a_whole_gpu_engine_refuses_is_400_naming_the_header_line(
    jp_fetch: Any, fake_engine: FakeEngine
) -> None:
    fake_engine.fail_with = whole_mode_refusal()
    status, error = await post_error(jp_fetch, {"cell": CELL})
    assert status == 400
    assert error["line"] == 3
    assert error["field"] == "roles.worker.resources.gpu"
    assert "it cannot share a GPU" in error["message"]
    assert "it offers whole GPUs only (%gpu=1)" in error["message"]


async def test_the_same_refusal_of_a_spec_has_no_line(
    jp_fetch: Any, fake_engine: FakeEngine
) -> None:
    fake_engine.fail_with = whole_mode_refusal()
    spec = {
        "framework": "generic",
        "code": "",
        "roles": {"worker": {"replicas": 1, "resources": {"gpu": 0.5}}},
    }
    status, error = await post_error(jp_fetch, {"spec": spec})
    assert status == 400 and error.get("line") is None


@pytest.mark.parametrize(
    ("gpu", "message"),
    [
        (1.5, "more than one GPU is a whole number"),
        ("mig-huge", "a MIG profile like mig-1g.5gb"),
    ],
)
async def test_bad_gpu_values_are_400_not_500(jp_fetch: Any, gpu: Any, message: str) -> None:
    spec = {
        "framework": "generic",
        "code": "",
        "roles": {"worker": {"replicas": 1, "resources": {"gpu": gpu}}},
    }
    status, error = await post_error(jp_fetch, {"spec": spec})
    assert status == 400 and message in error["message"]
