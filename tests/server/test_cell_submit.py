"""Submitting a raw cell: the header parsed by distrun.core.header, `%files=` read inside root_dir."""

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

CELL = "%framework=generic\n%worker=2\nprint('hi')\n"


async def post_cell(jp_fetch: Any, **body: Any) -> dict[str, Any]:
    response = await jp_fetch("distrun", "jobs", method="POST", body=json.dumps(body))
    assert response.code == 201
    job: dict[str, Any] = json.loads(response.body)
    return job


async def cell_error(jp_fetch: Any, status: int, **body: Any) -> dict[str, Any]:
    with pytest.raises(HTTPClientError) as caught:
        await jp_fetch("distrun", "jobs", method="POST", body=json.dumps(body))
    assert caught.value.code == status
    error: dict[str, Any] = json.loads(caught.value.response.body)
    return error


async def test_a_cell_with_a_header_becomes_a_job(jp_fetch):
    job = await post_cell(jp_fetch, cell=CELL)
    assert job["framework"] == "generic"
    assert [replica["name"] for replica in job["replicas"]] == ["worker-0", "worker-1"]
    assert "print('hi')" in job["spec"]["code"]
    assert "%worker" not in job["spec"]["code"]


async def test_overrides_win_over_the_header(jp_fetch):
    job = await post_cell(jp_fetch, cell=CELL, overrides={"roles": {"worker": {"replicas": 3}}})
    assert len(job["replicas"]) == 3


async def test_a_bad_header_is_400_with_its_line(jp_fetch):
    error = await cell_error(jp_fetch, 400, cell="%framework=generic\n%wokers=2\nprint(1)\n")
    assert error["line"] == 2
    assert "wokers" in error["message"]


async def test_files_are_read_relative_to_cwd_inside_the_root(jp_fetch, jp_root_dir: Path):
    (jp_root_dir / "project").mkdir()
    (jp_root_dir / "project" / "helper.py").write_bytes(b"VALUE = 42\n")
    cell = "%framework=generic\n%files=helper.py\nimport helper\n"
    job = await post_cell(jp_fetch, cell=cell, cwd="project")
    assert base64.b64decode(job["spec"]["files"]["helper.py"]) == b"VALUE = 42\n"


async def test_a_file_outside_the_root_is_400_naming_it(jp_fetch, jp_root_dir: Path):
    (jp_root_dir.parent / "secret.txt").write_text("no\n")
    (jp_root_dir / "project").mkdir()
    (jp_root_dir / "project" / "escape.txt").symlink_to(jp_root_dir.parent / "secret.txt")
    cell = "%framework=generic\n%files=escape.txt\nprint(1)\n"
    error = await cell_error(jp_fetch, 400, cell=cell, cwd="project")
    assert "'escape.txt' is outside the server's root" in error["message"]
    error = await cell_error(jp_fetch, 400, cell=cell, cwd="../..")
    assert error["field"] == "cwd"


async def test_files_over_the_payload_limit_are_413(jp_fetch, jp_root_dir: Path, distrun_app):
    big = b"x" * (distrun_app.max_payload_bytes + 1)
    (jp_root_dir / "big.bin").write_bytes(big)
    error = await cell_error(jp_fetch, 413, cell="%framework=generic\n%files=big.bin\nprint(1)\n")
    assert "over the limit" in error["message"]


async def test_a_cell_that_is_not_a_string_is_400(jp_fetch):
    error = await cell_error(jp_fetch, 400, cell=["print(1)"])
    assert error["field"] == "cell"
