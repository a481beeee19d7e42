"""GET /distrun/jobs/{id} of a job restarted whole by the local engine: its attempt, why the
last one ended and its timeline, validated against openapi.yaml; bad restart settings are a 400
that says what to write."""

import asyncio
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

FAILS_ONCE = """
import os, sys, time
if os.environ["DISTRUN_RESTART"] == "0":
    if os.environ["DISTRUN_REPLICA"] == "worker-0":
        sys.exit(3)
    time.sleep(600)
print("run", os.environ["DISTRUN_RESTART"], flush=True)
"""


@pytest.fixture
def jp_server_config(tmp_path: Path) -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"distrun": True}},
        "DistrunApp": {"state_dir": str(tmp_path / "state")},
    }


async def test_a_restarted_job_reports_its_attempt_last_failure_and_timeline(checked) -> None:
    spec = {"framework": "pytorch", "code": FAILS_ONCE, "max_restarts": 2}
    status, job = await checked("POST", "/distrun/jobs", {"spec": spec})
    assert status == 201, job
    async with asyncio.timeout(90):
        while job["state"] not in ("succeeded", "failed", "cancelled"):
            await asyncio.sleep(0.2)
            status, job = await checked("GET", f"/distrun/jobs/{job['id']}")
    assert job["state"] == "succeeded", job["reason"]
    assert (job["attempt"], job["max_restarts"], job["restart_scope"]) == (2, 2, "job")
    failure = job["last_failure"]
    assert (failure["replica"], failure["exit_code"], failure["kind"]) == ("worker-0", 3, "failed")
    assert [(e["kind"], e["attempt"]) for e in job["timeline"]] == [
        ("submitted", 1),
        ("started", 1),
        ("failed", 1),
        ("restarting", 1),
        ("started", 2),
        ("ended", 2),
    ]


async def test_a_bad_restart_setting_is_a_400_that_says_what_to_write(checked) -> None:
    spec = {"framework": "pytorch", "code": "", "restart": "everything"}
    status, body = await checked("POST", "/distrun/jobs", {"spec": spec}, valid_request=False)
    assert status == 400
    assert "restart 'everything' is not valid; write one of job, replica" in str(body)
