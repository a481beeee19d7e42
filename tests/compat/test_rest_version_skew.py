"""The REST resources a client parses (engines, jobs, a job, log pages, cancel, delete) across
releases (issue 31), on the local engine with real server processes: the previous release's
own client and CLI (its wheel in a virtualenv of its own, conftest.py) against the current
server; the current client and CLI against the previous release's server (started by that
virtualenv's python); and the current server's answer to each `Distrun-API-Version` a client
may send."""

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from distrun.client.base import ClientError
from distrun.client.server_client import ServerClient
from distrun.core.api_versions import API_VERSION_HEADER, REST_V1, REST_VERSIONS
from distrun.core.errors import NotFound
from tests.cli_process import cli_env, run_distrun
from tests.server_process import ServerProcess

from .conftest import run_previous
from .skew import CODE, EXPECTED, MAX_REPLICAS, SLEEPER, SLEEPER_JSON, SPEC, SPEC_JSON

pytestmark = pytest.mark.integration

TERMINAL = {"succeeded", "failed", "cancelled"}


async def until_ended(client: Any, job_id: str) -> dict[str, Any]:
    for _ in range(1200):
        job: dict[str, Any] = await client.get_job(job_id)
        if job["state"] in TERMINAL:
            return job
        await asyncio.sleep(0.1)
    raise AssertionError(f"{job_id} did not end in 120 s: {job}")


async def use_every_resource(client: Any) -> None:
    """Every REST call the client makes, each answer read by the client's own code."""
    limits = await client.limits()
    assert limits.max_replicas == MAX_REPLICAS
    job = await client.submit(SPEC)
    assert job["state"] in {"pending", "running", "succeeded"}
    assert [r["name"] for r in job["replicas"]] == ["worker-0", "worker-1"]
    ended = await until_ended(client, job["id"])
    assert ended["state"] == "succeeded" and ended["spec"]["code"] == CODE
    assert job["id"] in [listed["id"] for listed in await client.list_jobs()]
    page = await client.logs(job["id"])
    assert sorted((line.replica, line.seq, line.text) for line in page.lines) == EXPECTED
    assert page.next == {"worker-0": 5, "worker-1": 5}
    tail = await client.logs(job["id"], replicas=["worker-1"], tail=2)
    assert [(line.replica, line.text) for line in tail.lines] == [
        ("worker-1", "worker-1 3"),
        ("worker-1", "worker-1 4"),
    ]

    sleeper = await client.submit(SLEEPER)
    cancelled = await client.cancel(sleeper["id"])
    assert cancelled["id"] == sleeper["id"]
    assert (await until_ended(client, sleeper["id"]))["state"] == "cancelled"

    await client.delete(job["id"])
    with pytest.raises(NotFound):
        await client.get_job(job["id"])


async def test_the_previous_releases_client_reads_every_rest_resource_of_the_current_server(
    current_server: ServerProcess, previous_python: Path, tmp_path: Path
) -> None:
    """As use_every_resource, by the previous release's ServerClient in its own process."""
    request = {
        "url": current_server.url,
        "token": current_server.token,
        "spec": SPEC_JSON,
        "sleeper": SLEEPER_JSON,
    }
    seen = await asyncio.to_thread(run_previous, previous_python, "rest", request, tmp_path)
    assert seen["max_replicas"] == MAX_REPLICAS
    assert seen["submitted"]["state"] in {"pending", "running", "succeeded"}
    assert seen["submitted"]["replicas"] == ["worker-0", "worker-1"]
    assert seen["ended"] == {"state": "succeeded", "code": CODE}
    assert seen["listed"]
    assert [tuple(line) for line in seen["page"]["lines"]] == EXPECTED
    assert seen["page"]["next"] == {"worker-0": 5, "worker-1": 5}
    assert seen["tail"] == [["worker-1", "worker-1 3"], ["worker-1", "worker-1 4"]]
    assert seen["cancelled_id"] and seen["sleeper"] == "cancelled"
    assert seen["after_delete"] == "NotFound"


async def test_the_current_client_reads_every_rest_resource_of_the_previous_releases_server(
    previous_server: ServerProcess,
) -> None:
    await use_every_resource(ServerClient(previous_server.url, previous_server.token))


def cli_against(server: ServerProcess, home: Path) -> dict[str, str]:
    env = cli_env(home)
    env.update(DISTRUN_URL=server.url, DISTRUN_TOKEN=server.token or "")
    return env


def use_the_cli(env: dict[str, str], workdir: Path, python: Path | str = sys.executable) -> None:
    """run (REST submit, the log websocket), ls, status, logs and rm, each checked by what it
    printed; `python` runs the CLI (this tree's, or a release's virtualenv's)."""
    cell = workdir / "cell.py"
    cell.write_text("%framework=generic\n%worker=2\n" + CODE)
    run = run_distrun(env, "run", str(cell), cwd=workdir, python=python)
    assert run.returncode == 0, run.stderr
    assert all(f"worker-{r} {i}" in run.stdout for r in range(2) for i in range(5)), run.stdout
    listing = run_distrun(env, "ls", "--json", cwd=workdir, python=python)
    assert listing.returncode == 0, listing.stderr
    [job] = json.loads(listing.stdout)
    assert job["state"] == "succeeded"
    status = run_distrun(env, "status", job["id"], cwd=workdir, python=python)
    assert status.returncode == 0 and "succeeded" in status.stdout, status.stdout + status.stderr
    logs = run_distrun(env, "logs", job["id"], "--replica", "worker-1", cwd=workdir, python=python)
    assert logs.returncode == 0, logs.stderr
    assert [line.split()[-2:] for line in logs.stdout.splitlines()] == [
        ["worker-1", str(i)] for i in range(5)
    ]
    removed = run_distrun(env, "rm", job["id"], cwd=workdir, python=python)
    assert removed.returncode == 0, removed.stderr
    gone = run_distrun(env, "status", job["id"], cwd=workdir, python=python)
    assert gone.returncode != 0 and job["id"] in gone.stderr


async def test_the_previous_releases_cli_works_against_the_current_server(
    current_server: ServerProcess, previous_python: Path, tmp_path: Path
) -> None:
    env = cli_against(current_server, tmp_path / "home")
    del env["PYTHONPATH"]  # the release's own package, nothing of this tree
    await asyncio.to_thread(use_the_cli, env, tmp_path, previous_python)


async def test_the_current_cli_works_against_the_previous_releases_server(
    previous_server: ServerProcess, tmp_path: Path
) -> None:
    env = cli_against(previous_server, tmp_path / "home")
    await asyncio.to_thread(use_the_cli, env, tmp_path)


RESOURCES = [
    ("GET", "distrun/engines", None),
    ("GET", "distrun/jobs", None),
    ("GET", "distrun/jobs/{id}", None),
    ("GET", "distrun/jobs/{id}/logs?format=json", None),
    ("GET", "distrun/jobs/{id}/usage", None),
    ("GET", "distrun/jobs/{id}/scalars", None),
    ("GET", "distrun/metrics?job={id}", None),
    ("POST", "distrun/jobs/{id}/cancel", {}),
    ("POST", "distrun/jobs", {"spec": SPEC.to_dict()}),
]


@pytest.fixture
async def finished_job(current_server: ServerProcess) -> str:
    client = ServerClient(current_server.url, current_server.token)
    job = await client.submit(SPEC)
    await until_ended(client, job["id"])
    return str(job["id"])


@pytest.mark.parametrize(("method", "path", "body"), RESOURCES)
async def test_every_resource_answers_each_version_it_serves_and_refuses_others_in_words(
    current_server: ServerProcess,
    finished_job: str,
    method: str,
    path: str,
    body: Any,
) -> None:
    path = path.format(id=finished_job)
    asked: list[str | None] = [None, *REST_VERSIONS]
    for version in asked:
        headers = {} if version is None else {API_VERSION_HEADER: version}
        status, answer, served = await request(current_server, method, path, body, headers)
        assert status < 300, answer
        assert served == (version or REST_V1)
    for unserved in ["2", "0", "v1", ""]:
        headers = {API_VERSION_HEADER: unserved}
        status, answer, _ = await request(current_server, method, path, body, headers)
        assert status == 406, answer
        message = answer["message"]
        assert f"serves version {REST_V1}" in message and API_VERSION_HEADER in message
        assert repr(unserved) in message
    # Refused before anything was done: the job is still there, and only the one submitted.
    jobs = (await request(current_server, "GET", "distrun/jobs", None, {}))[1]["jobs"]
    assert [job["id"] for job in jobs][-1] == finished_job
    assert len(jobs) == (1 + len(asked) if method == "POST" and path == "distrun/jobs" else 1)


async def test_an_anonymous_request_is_refused_as_such_whatever_version_it_asks_for(
    current_server: ServerProcess,
) -> None:
    from tornado.httpclient import AsyncHTTPClient

    for version in ["2", REST_V1]:
        response = await AsyncHTTPClient().fetch(
            current_server.url_of("distrun/jobs"),
            headers={API_VERSION_HEADER: version},
            raise_error=False,
        )
        assert response.code == 403, response.body
        assert API_VERSION_HEADER not in response.headers


async def request(
    server: ServerProcess, method: str, path: str, body: Any, headers: dict[str, str]
) -> tuple[int, Any, str | None]:
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest

    response = await AsyncHTTPClient().fetch(
        HTTPRequest(
            server.url_of("") + path,
            method=method,
            headers={**server.headers, **headers},
            body=None if body is None else json.dumps(body),
        ),
        raise_error=False,
    )
    answer = json.loads(response.body) if response.body else None
    return response.code, answer, response.headers.get(API_VERSION_HEADER)


async def test_a_client_of_a_version_the_server_does_not_serve_says_why(
    current_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("distrun.client.server_client.REST_V1", "2")
    client = ServerClient(current_server.url, current_server.token)
    with pytest.raises(ClientError, match="serves version 1 of the distrun REST API"):
        await client.list_jobs()
