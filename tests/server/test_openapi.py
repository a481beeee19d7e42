"""openapi.yaml documents exactly the registered routes, and real responses match it."""

import json
from pathlib import Path

import pytest
import yaml
from jsonschema import ValidationError
from openapi_schema_validator import OAS31Validator
from openapi_spec_validator import validate as validate_document

import distrun
from distrun.core.job import JobState
from tests.server.conftest import distrun_routes, handler_methods

DOCUMENT_PATH = Path(distrun.__file__).parent / "server" / "openapi.yaml"
DOCUMENT = yaml.safe_load(DOCUMENT_PATH.read_text())
SPEC = {"framework": "pytorch", "code": "print(1)", "env": {"A": "1"}}


def test_the_document_is_valid_openapi():
    validate_document(DOCUMENT)


async def test_every_route_is_documented_with_its_methods_and_nothing_else(jp_serverapp):
    routes = distrun_routes(jp_serverapp)
    assert set(routes) == set(DOCUMENT["paths"])
    for path, handler in routes.items():
        documented = set(DOCUMENT["paths"][path]) - {"parameters"}
        assert documented == handler_methods(handler), path


async def test_real_responses_match_the_document(checked, fake_engine):
    assert (await checked("GET", "/distrun/engines"))[0] == 200
    status, job = await checked("POST", "/distrun/jobs", {"spec": SPEC})
    assert status == 201
    job_id = job["id"]
    fake_engine.set_state(job_id, JobState.RUNNING)
    fake_engine.emit(job_id, "worker-0", "hello")
    assert (await checked("GET", "/distrun/jobs"))[0] == 200
    assert (await checked("GET", "/distrun/jobs?engine=local"))[0] == 200
    assert (await checked("GET", f"/distrun/jobs/{job_id}"))[0] == 200
    status, logs = await checked("GET", f"/distrun/jobs/{job_id}/logs?format=json&since=master-0:0")
    assert (status, len(logs["lines"])) == (200, 1)
    assert await checked("GET", f"/distrun/jobs/{job_id}/logs?tail=5") == (
        200,
        "worker-0 | hello\n",
    )
    status, usage = await checked("GET", f"/distrun/jobs/{job_id}/usage?since=3")
    assert status == 200 and usage["available"] is False and "does not sample" in usage["reason"]
    status, scalars = await checked("GET", f"/distrun/jobs/{job_id}/scalars")
    assert status == 200 and scalars["available"] is False and "local engine" in scalars["reason"]
    assert (await checked("POST", f"/distrun/jobs/{job_id}/cancel", {}))[0] == 200
    assert await checked("DELETE", f"/distrun/jobs/{job_id}") == (204, "")


async def test_error_responses_match_the_document(checked):
    assert (await checked("GET", "/distrun/jobs/nope-00000"))[0] == 404
    bad_spec = {"spec": {**SPEC, "roles": {"chief": {"replicas": 1}}}}
    status, body = await checked("POST", "/distrun/jobs", bad_spec)
    assert (status, body["field"]) == (400, "roles.chief")
    status, body = await checked(
        "GET", "/distrun/jobs/nope-00000/usage?since=-1", valid_request=False
    )
    assert (status, body["field"]) == (400, "since")
    assert (await checked("GET", "/distrun/jobs/nope-00000/usage"))[0] == 404
    assert (await checked("GET", "/distrun/jobs/nope-00000/scalars"))[0] == 404
    status, body = await checked(
        "GET", "/distrun/jobs/nope-00000/logs?since=x", valid_request=False
    )
    assert status == 404
    status, _ = await checked("POST", "/distrun/jobs", b"[" * 3_000_000, valid_request=False)
    assert status == 413


def stream_schema(name: str) -> OAS31Validator:
    return OAS31Validator({"$ref": f"#/components/schemas/{name}", **DOCUMENT})


async def test_websocket_messages_match_the_documented_schemas(api, jp_ws_fetch, fake_engine):
    job = await api("jobs", method="POST", body={"spec": SPEC})
    fake_engine.emit(job["id"], "master-0", "one", "two")
    fake_engine.set_partial(job["id"], "master-0", "three, unfinished")
    fake_engine.finish(job["id"], JobState.FAILED)
    ws = await jp_ws_fetch("distrun", "jobs", job["id"], "logs", "stream")
    messages = []
    while (message := await ws.read_message()) is not None:
        messages.append(json.loads(message))
    bad = await jp_ws_fetch("distrun", "jobs", "nope-00000", "logs", "stream")
    messages.append(json.loads(await bad.read_message()))
    schemas = {"status": "StreamStatus", "runs": "StreamRuns", "end": "StreamEnd"}
    schemas |= {"partial": "StreamPartial", "error": "StreamError"}
    assert [m["type"] for m in messages] == [
        "runs",
        "partial",
        "status",
        "end",
        "error",
    ]  # a finished job: its status after its lines
    for message in messages:
        stream_schema(schemas[message["type"]]).validate(message)


def test_the_document_rejects_what_the_api_never_sends():
    with pytest.raises(ValidationError, match="'x' is not of type 'integer'"):
        stream_schema("StreamPartial").validate({"type": "partial", "lines": [["w-0", "x", 0, ""]]})
    run = {"replica": "w-0", "seq": 0, "times_ms": [1.5], "texts": ["x"]}
    with pytest.raises(ValidationError, match="1.5 is not of type 'integer'"):
        stream_schema("StreamRuns").validate({"type": "runs", "runs": [run]})
