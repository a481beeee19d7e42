"""The REST endpoints through a real jupyter_server (base URL /a%40b/) with an in-memory engine."""

import json
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from distrun.core.errors import EngineError
from distrun.core.job import JobState
from distrun.server import handlers
from tests.fake_engine import FakeEngine
from tests.server.conftest import BOB

SPEC = {
    "framework": "pytorch",
    "code": "print('hi')",
    "roles": {"master": {"replicas": 1}, "worker": {"replicas": 2}},
}


async def expect_error(call: Any, status: int, *path: str, **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(HTTPClientError) as caught:
        await call(*path, **kwargs)
    response = caught.value.response
    assert caught.value.code == status, response.body if response else None
    assert response is not None
    body = json.loads(response.body)
    assert "Traceback" not in response.body.decode()
    return body


async def submit(api: Any, spec: dict[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
    job: dict[str, Any] = await api("jobs", method="POST", body={"spec": spec or SPEC}, **kwargs)
    return job


async def test_engines_lists_engine_frameworks_limits_and_policies(api):
    body = await api("engines")
    assert body["default_engine"] == "local"
    assert [engine["name"] for engine in body["engines"]] == ["local"]
    assert body["engines"][0]["available"] is True
    pytorch = next(fw for fw in body["frameworks"] if fw["name"] == "pytorch")
    assert pytorch["kubeflow_kind"] == "PyTorchJob"
    assert pytorch["completion_roles"] == ["master"]
    assert pytorch["roles"][0] == {
        "name": "master",
        "min_replicas": 1,
        "max_replicas": 1,
        "default_replicas": 1,
    }
    assert body["limits"]["max_replicas"] == 64
    assert "OnFailure" in body["restart_policies"]
    assert body["clean_pod_policies"] == ["None", "Running", "All"]


async def test_submit_spec_returns_201_job_and_location_under_base_url(jp_fetch, fake_engine):
    response = await jp_fetch("distrun", "jobs", method="POST", body=json.dumps({"spec": SPEC}))
    job = json.loads(response.body)
    assert response.code == 201
    assert response.headers["Location"] == f"/a%40b/distrun/jobs/{job['id']}"
    assert job["owner"] == "alice"
    assert job["state"] == "pending"
    assert [r["name"] for r in job["replicas"]] == ["master-0", "worker-0", "worker-1"]
    assert fake_engine.job(job["id"]).spec.roles["worker"].replicas == 2


async def test_invalid_spec_is_400_naming_the_field(api):
    body = await expect_error(
        api, 400, "jobs", method="POST", body={"spec": {**SPEC, "framework": "pytorchh"}}
    )
    assert "unknown framework 'pytorchh'" in body["message"]
    without = {key: value for key, value in SPEC.items() if key != "framework"}
    body = await expect_error(api, 400, "jobs", method="POST", body={"spec": without})
    assert body["message"].startswith("framework is required: one of pytorch, ")
    assert body["field"] == "framework"
    assert body["field"] == "framework"


async def test_a_submit_says_where_its_time_went_in_server_timing(jp_fetch, fake_engine):
    cell = "%framework=generic\n%worker=2\nprint(1)"
    response = await jp_fetch("distrun", "jobs", method="POST", body=json.dumps({"cell": cell}))
    assert response.code == 201
    timing = dict(part.split(";dur=") for part in response.headers["Server-Timing"].split(", "))
    assert set(timing) == {"spec", "submit"}
    assert all(float(ms) >= 0 for ms in timing.values()), timing


@pytest.mark.parametrize(
    ("request_body", "expected"),
    [
        ("not json", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"spec": {}, "cell": "x"}', "either"),
        ("{}", "either"),
        ('{"spec": {"framework": "generic", "code": ""}, "extra": 1}', "unknown field(s) extra"),
    ],
)
async def test_malformed_submit_body_is_400_with_a_message(jp_fetch, request_body, expected):
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("distrun", "jobs", method="POST", body=request_body)
    assert caught.value.code == 400
    assert expected in json.loads(caught.value.response.body)["message"]


async def test_body_over_the_size_limit_is_413_before_parsing(jp_fetch, distrun_app):
    limit = distrun_app.max_body_bytes
    body = b"{" + b" " * limit + b"}"  # valid JSON, but too large
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("distrun", "jobs", method="POST", body=body)
    assert caught.value.code == 413
    assert "over the limit" in json.loads(caught.value.response.body)["message"]


async def test_too_many_replicas_is_413(api):
    spec = {**SPEC, "roles": {"master": {"replicas": 1}, "worker": {"replicas": 64}}}
    body = await expect_error(api, 413, "jobs", method="POST", body={"spec": spec})
    assert body["message"] == "the job asks for 65 replicas, over the limit of 64"


async def test_unknown_engine_is_400(api):
    body = await expect_error(
        api, 400, "jobs", method="POST", body={"spec": {**SPEC, "engine": "volcano"}}
    )
    assert body == {"message": "unknown engine 'volcano'; write one of local", "field": "engine"}


async def test_engine_failure_is_502_with_its_message(api, fake_engine: FakeEngine):
    fake_engine.fail_with = EngineError("the cluster is unreachable")
    body = await expect_error(api, 502, "jobs", method="POST", body={"spec": SPEC})
    assert body == {"message": "the cluster is unreachable"}


async def test_listing_every_engine_reports_a_failing_engine_beside_the_others_jobs(
    api, fake_engine: FakeEngine
):
    fake_engine.fail_with = EngineError("the cluster is unreachable")
    assert await api("jobs") == {
        "jobs": [],
        "engine_errors": {"local": "the cluster is unreachable"},
    }
    fake_engine.fail_with = EngineError("the cluster is unreachable")
    body = await expect_error(api, 502, "jobs", params={"engine": "local"})
    assert body == {"message": "the cluster is unreachable"}


async def test_list_returns_only_the_callers_jobs_newest_first(api):
    first = await submit(api)
    second = await submit(api)
    bobs = await submit(api, headers=BOB)
    alice_jobs = (await api("jobs"))["jobs"]
    assert [job["id"] for job in alice_jobs] == [second["id"], first["id"]]
    assert [job["id"] for job in (await api("jobs", headers=BOB))["jobs"]] == [bobs["id"]]
    assert (await api("jobs", params={"engine": "local"}))["jobs"] == alice_jobs


async def test_get_cancel_and_delete_a_job(api, fake_engine: FakeEngine):
    job = await submit(api)
    assert (await api("jobs", job["id"]))["id"] == job["id"]
    fake_engine.set_state(job["id"], JobState.RUNNING)
    cancelled = await api("jobs", job["id"], "cancel", method="POST", body={})
    assert cancelled["state"] == "cancelled"
    assert fake_engine.job(job["id"]).state is JobState.CANCELLED
    assert await api("jobs", job["id"], method="DELETE") is None
    await expect_error(api, 404, "jobs", job["id"])


async def test_delete_answers_204(jp_fetch, api):
    job = await submit(api)
    response = await jp_fetch("distrun", "jobs", job["id"], method="DELETE")
    assert response.code == 204


@pytest.mark.parametrize("job_id", ["nope-12345", "UPPER", "a" * 41, "bad_id", "-x"])
async def test_unknown_or_malformed_job_id_is_404(api, job_id):
    body = await expect_error(api, 404, "jobs", job_id)
    assert body["message"].startswith("no job")


async def test_another_users_job_is_404_for_every_job_endpoint(api):
    job = await submit(api)
    for path, method in [
        ((job["id"],), "GET"),
        ((job["id"], "cancel"), "POST"),
        ((job["id"], "logs"), "GET"),
        ((job["id"],), "DELETE"),
    ]:
        body = {} if method == "POST" else None
        await expect_error(api, 404, "jobs", *path, method=method, body=body, headers=BOB)
    assert (await api("jobs", job["id"]))["state"] == "pending"


async def test_logs_text_orders_lines_by_capture_time_with_prefix(jp_fetch, api, fake_engine):
    job = await submit(api)
    fake_engine.emit(job["id"], "worker-0", "w0 first")
    fake_engine.emit(job["id"], "master-0", "m0 first")
    fake_engine.emit(job["id"], "worker-0", "w0 second")
    response = await jp_fetch("distrun", "jobs", job["id"], "logs")
    assert response.headers["Content-Type"] == "text/plain; charset=utf-8"
    assert response.body.decode() == (
        "worker-0 | w0 first\nmaster-0 | m0 first\nworker-0 | w0 second\n"
    )
    bare = await jp_fetch("distrun", "jobs", job["id"], "logs", params={"prefix": "0"})
    assert bare.body.decode() == "w0 first\nm0 first\nw0 second\n"


async def test_logs_json_pages_with_next_cursor(api, fake_engine):
    job = await submit(api)
    fake_engine.emit(job["id"], "worker-0", *[f"line {i}" for i in range(5)])
    fake_engine.emit(job["id"], "worker-1", "other")
    page = await api("jobs", job["id"], "logs", params={"format": "json", "limit": "3"})
    assert [line[3] for line in page["lines"]] == ["line 0", "line 1", "line 2"]
    assert page["lines"][0][:2] == ["worker-0", 0]
    assert page["next"] == {"master-0": 0, "worker-0": 3, "worker-1": 0}
    since = ",".join(f"{replica}:{seq}" for replica, seq in page["next"].items())
    rest = await api("jobs", job["id"], "logs", params={"format": "json", "since": since})
    assert [line[3] for line in rest["lines"]] == ["line 3", "line 4", "other"]
    assert rest["next"] == {"master-0": 0, "worker-0": 5, "worker-1": 1}


async def test_logs_tail_gives_last_lines_of_each_selected_replica(
    jp_fetch, api, fake_engine, http_server_client, jp_auth_header
):
    job = await submit(api)
    fake_engine.emit(job["id"], "worker-0", *[f"w0 {i}" for i in range(10)])
    fake_engine.emit(job["id"], "worker-1", *[f"w1 {i}" for i in range(10)])
    fake_engine.emit(job["id"], "master-0", "m0 0")
    query = "replica=worker-0&replica=worker-1&tail=2&format=json"
    url = f"/a%40b/distrun/jobs/{job['id']}/logs?{query}"
    response = await http_server_client.fetch(url, headers=jp_auth_header)
    body = json.loads(response.body)
    assert [line[3] for line in body["lines"]] == ["w0 8", "w0 9", "w1 8", "w1 9"]
    assert body["next"] == {"worker-0": 10, "worker-1": 10}
    text = await jp_fetch("distrun", "jobs", job["id"], "logs", params={"tail": "1"})
    assert text.body.decode() == "worker-0 | w0 9\nworker-1 | w1 9\nmaster-0 | m0 0\n"


async def test_logs_tail_is_bounded_in_bytes_keeping_the_newest_lines(
    api, fake_engine, monkeypatch
):
    monkeypatch.setattr(handlers, "MAX_TAIL_BYTES", 10_000)
    job = await submit(api)
    fake_engine.emit(job["id"], "worker-0", *[f"{i:04d}" + "x" * 996 for i in range(30)])
    body = await api("jobs", job["id"], "logs", params={"format": "json", "tail": "25"})
    kept = [line[3][:4] for line in body["lines"]]
    assert kept == [f"{i:04d}" for i in range(20, 30)]  # 10 lines of 1000 bytes, the newest
    assert body["next"]["worker-0"] == 30


async def test_logs_text_streams_logs_longer_than_one_engine_page(jp_fetch, api, fake_engine):
    job = await submit(api)
    fake_engine.emit(job["id"], "worker-0", *[str(i) for i in range(25_000)])
    response = await jp_fetch("distrun", "jobs", job["id"], "logs", params={"prefix": "0"})
    assert response.body.decode().splitlines() == [str(i) for i in range(25_000)]


async def test_logs_give_each_unfinished_line_apart_from_the_lines(jp_fetch, api, fake_engine):
    job = await submit(api)
    fake_engine.emit(job["id"], "worker-0", "done")
    fake_engine.set_partial(job["id"], "worker-0", "loading  40%|####")
    page = await api("jobs", job["id"], "logs", params={"format": "json"})
    assert [line[3] for line in page["lines"]] == ["done"]
    assert page["next"]["worker-0"] == 1  # the unfinished line does not count
    assert [line[:2] + line[3:] for line in page["partial"]] == [
        ["worker-0", 1, "loading  40%|####"]
    ]
    without = await api("jobs", job["id"], "logs", params={"format": "json", "partial": "0"})
    assert without["partial"] == []
    text = await jp_fetch("distrun", "jobs", job["id"], "logs")
    assert text.body.decode() == "worker-0 | done\n"  # as a download: lines only
    both = await jp_fetch("distrun", "jobs", job["id"], "logs", params={"partial": "1"})
    assert both.body.decode() == "worker-0 | done\nworker-0 | loading  40%|####\n"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"since": "worker-0"}, "since"),
        ({"since": "worker-0:x"}, "since"),
        ({"since": "worker-0:-1"}, "since"),
        ({"since": "worker-0:1,worker-0:2"}, "since"),
        ({"tail": "-3"}, "tail"),
        ({"tail": "many"}, "tail"),
        ({"tail": "9" * 5000}, "tail"),  # int() of it would raise past 4300 digits
        ({"limit": "1" + "0" * 4400}, "limit"),
        ({"since": "worker-0:" + "7" * 4400}, "since"),
        ({"tail": "٣"}, "tail"),  # a digit to str.isdigit, not to the API
        ({"format": "xml"}, "format"),
        ({"replica": "worker-7"}, "replica"),
        ({"replica": "../etc"}, "replica"),
        ({"limit": "0"}, "limit"),
        ({"partial": "yes"}, "partial"),
    ],
)
async def test_malformed_log_query_is_400_naming_the_parameter(api, params, field):
    job = await submit(api)
    body = await expect_error(api, 400, "jobs", job["id"], "logs", params=params)
    assert body["field"] == field
