"""The limits an operator sets, each enforced end to end through the REST API on the real local
engine, with a 4xx whose message names the limit and the value asked for."""

import base64
from pathlib import Path
from typing import Any

import pytest

from tests.security.conftest import BOB, Api

LIMITS = {
    "max_replicas": 3,
    "max_jobs_per_user": 2,
    "max_payload_bytes": 2_000,
    "max_log_line_bytes": 100,
    "max_gpus_per_replica": 1,
}
RUNNING = "import time\nprint('up', flush=True)\nwhile True:\n    time.sleep(0.1)\n"


@pytest.fixture
def distrun_limits() -> dict[str, int]:
    return LIMITS


def spec(**fields: Any) -> dict[str, Any]:
    return {"framework": "generic", "code": "print(1)", **fields}


async def refused(api: Api, body: Any, status: int = 413, **kwargs: Any) -> str:
    reply = await api.call("POST", "jobs", body, **kwargs)
    assert reply.code == status, reply.body
    assert set(reply.json) <= {"message", "field", "line"}
    return str(reply.json["message"])


async def test_the_server_publishes_its_limits(api: Api):
    assert (await api.call("GET", "engines")).json["limits"] == LIMITS


@pytest.mark.parametrize(
    ("framework", "roles", "status", "expected"),
    [
        # Over the limit in total: LimitExceeded.
        (
            "pytorch",
            {"worker": {"replicas": 3}},
            413,
            "the job asks for 4 replicas, over the limit of 3",
        ),
        # Over the limit in one role: a range error on that role's field (with its cell line).
        (
            "generic",
            {"worker": {"replicas": 4}},
            400,
            "roles.worker.replicas must be between 0 and 3, not 4",
        ),
        ("generic", {"worker": {"replicas": 10**6}}, 400, "must be between 0 and 3, not 1000000"),
    ],
)
async def test_more_replicas_than_the_limit_is_refused_naming_limit_and_count(
    api: Api, framework: str, roles: dict[str, Any], status: int, expected: str
):
    message = await refused(api, {"spec": spec(framework=framework, roles=roles)}, status)
    assert message.endswith(expected)


async def test_a_cell_asking_for_too_many_replicas_is_refused_naming_its_line(api: Api):
    message = await refused(api, {"cell": "%framework=generic\n%worker=5\nprint(1)\n"}, 400)
    assert message == "line 2: roles.worker.replicas must be between 0 and 3, not 5"


async def test_more_gpus_per_replica_than_the_limit_is_refused_naming_it(api: Api):
    roles = {"worker": {"replicas": 1, "resources": {"gpu": 2}}}
    message = await refused(api, {"spec": spec(roles=roles)}, 400)
    assert message == "roles.worker.resources.gpu must be between 0 and 1, not 2"


async def test_jobs_beyond_the_per_user_limit_are_413_and_count_per_user(api: Api):
    first = await api.submit(spec(code=RUNNING))
    await api.submit(spec(code=RUNNING))
    message = await refused(api, {"spec": spec(code=RUNNING)})
    assert message.startswith("you have 2 unfinished jobs, the limit is 2")
    # bob's quota is his own
    bobs = await api.submit(spec(), headers=BOB)
    assert bobs["owner"] == "bob"
    # a finished job frees its place
    assert (await api.call("POST", f"jobs/{first['id']}/cancel", {})).json["state"] == "cancelled"
    third = await api.submit(spec(code=RUNNING))
    for job in (await api.call("GET", "jobs")).json["jobs"]:
        await api.call("POST", f"jobs/{job['id']}/cancel", {})
    assert third["state"] in ("pending", "running")


async def test_code_over_the_payload_limit_is_413_naming_size_and_limit(api: Api):
    code = "#" * 2_001
    message = await refused(api, {"spec": spec(code=code)})
    assert message.startswith("the code and shipped files are 2,001 bytes, over the limit of 2,000")


async def test_shipped_files_count_towards_the_payload_limit(api: Api):
    files = {"data.bin": base64.b64encode(b"x" * 1_995).decode()}
    message = await refused(api, {"spec": spec(files=files)})
    assert "2,003 bytes, over the limit of 2,000" in message


async def test_a_cell_over_the_payload_limit_is_413(api: Api):
    cell = "%framework=generic\n" + "#" * 2_000
    message = await refused(api, {"cell": cell})
    assert "2,019 characters, over the payload limit of 2,000 bytes" in message


async def test_files_named_by_a_cell_over_the_payload_limit_are_413(api: Api, jp_root_dir: Path):
    (jp_root_dir / "big.csv").write_bytes(b"1," * 1_500)
    message = await refused(api, {"cell": "%framework=generic\n%files=big.csv\nprint(1)\n"})
    assert "3,000 bytes at 'big.csv', over the limit of 2,000" in message


async def test_a_body_over_the_request_limit_is_413_naming_size_and_limit(api: Api):
    limit = 2 * LIMITS["max_payload_bytes"] + 64 * 1024
    raw = b'{"spec": ' + b" " * limit + b"}"
    message = await refused(api, None, raw=raw)
    assert message.startswith(
        f"the request body is {len(raw):,} bytes, over the limit of {limit:,}"
    )


async def test_a_log_line_over_the_limit_is_cut_into_pieces_within_it(api: Api):
    code = "print('a' * 99 + 'b' * 100 + 'c' * 50)\nprint('short')\n"
    job = await api.submit(spec(code=code))
    assert (await api.finished(job["id"]))["state"] == "succeeded"
    lines = (await api.logs(job["id"])).splitlines()
    assert lines == ["a" * 99 + "b", "b" * 99 + "c", "c" * 49, "short"]
