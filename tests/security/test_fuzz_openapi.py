"""Fuzzing the REST API from its OpenAPI document (schemathesis), against a real jupyter_server
process with the real local engine on loopback.

Every operation gets inputs that fit the document and inputs that do not (derandomised, so the
same cases run every time, and bounded by a count per operation). Each response must be no 5xx,
carry no traceback, and conform to the document (status, content type, body schema); the server
must still be up afterwards with no traceback in its log. Operations on a job run both against
generated ids and against a real job with real log lines, so the fuzzer reaches past the 404.
"""

import base64
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
requests = pytest.importorskip("requests")

from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import FailureGroup
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import distrun
from tests.security.conftest import server_process
from tests.server_process import ServerProcess

DOCUMENT = Path(distrun.__file__).parent / "server" / "openapi.yaml"
# Examples per operation and generation mode; the job submission has the richest input.
EXAMPLES = {
    "GET /distrun/engines": 10,
    "POST /distrun/jobs": 300,
    "GET /distrun/jobs/{job_id}/logs": 160,
}
DEFAULT_EXAMPLES = 70
MIN_CASES = 2_000
# Run last: deleting the real job ends the runs against it.
LAST = "DELETE /distrun/jobs/{job_id}"


# Not the bare word: the fuzzer's strings, echoed in 404 messages and the access log, may hold it.
TRACEBACK = "Traceback (most recent call last)"


def no_traceback(ctx: Any, response: Any, case: Any) -> bool:
    assert TRACEBACK.encode() not in response.content, "a traceback in the response body"
    return True


CHECKS: list[Callable[..., Any]] = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    no_traceback,
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """The fuzzer's valid submissions become real jobs whose replicas are real processes, but
    /bin/echo rather than Python: each writes one log line (its code file's name) and exits,
    so hundreds of submissions, restart policies included, cost the machine next to nothing."""
    engine = {"class": "distrun.engines.local.LocalEngine", "kwargs": {"python": "/bin/echo"}}
    with server_process(
        tmp_path_factory.mktemp("fuzz"),
        engines={"local": engine},
        max_replicas=2,
        max_jobs_per_user=3,
    ) as server:
        yield server


def real_job(server: ServerProcess, session: Any) -> str:
    """A finished job with a log line per replica."""
    spec = {"framework": "generic", "code": "", "roles": {"worker": {"replicas": 2}}}
    spec["files"] = {"data.txt": base64.b64encode(b"x").decode()}
    reply = session.post(f"{server.url}distrun/jobs", json={"spec": spec}, timeout=30)
    assert reply.status_code == 201, reply.text
    job_id = str(reply.json()["id"])
    deadline = time.monotonic() + 60
    while session.get(f"{server.url}distrun/jobs/{job_id}").json()["state"] != "succeeded":
        assert time.monotonic() < deadline, "the job did not finish"
        time.sleep(0.1)
    logs = session.get(f"{server.url}distrun/jobs/{job_id}/logs", timeout=30).text
    assert logs.count("main.py") == 2, logs
    return job_id


def fuzz(
    operation: Any,
    mode: GenerationMode,
    count: int,
    send: Callable[[Any], None],
    **fixed: Any,
) -> None:
    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],  # no shrinking: bounded time, first failure
        suppress_health_check=list(HealthCheck),
    )
    @given(operation.as_strategy(generation_mode=mode, **fixed))
    def run(case: Any) -> None:
        send(case)

    run()


# About 90 s on a quiet machine, over 300 s on a busy one: bounded by the counts above.
@pytest.mark.timeout(900)
def test_the_api_survives_thousands_of_generated_requests(server: ServerProcess):
    schema = schemathesis.openapi.from_path(str(DOCUMENT))
    operations = sorted(
        (result.ok() for result in schema.get_all_operations()),
        key=lambda operation: operation.label == LAST,
    )
    assert len(operations) == 18
    session = requests.Session()
    session.headers.update(server.headers)
    job_id = real_job(server, session)
    failures: dict[str, str] = {}
    cases = 0

    def send(case: Any) -> None:
        nonlocal cases
        cases += 1
        response = case.call(base_url=server.url.rstrip("/"), session=session, timeout=60)
        try:
            case.validate_response(response, checks=CHECKS)
        except (AssertionError, FailureGroup) as failure:  # one check's failure, or several
            where = f"{case.operation.label} -> {response.status_code}"
            failures.setdefault(where, f"{str(failure)[:600]}\n{case.as_curl_command()}")

    for operation in operations:
        count = EXAMPLES.get(operation.label, DEFAULT_EXAMPLES)
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            fuzz(operation, mode, count, send)
            if "{job_id}" in operation.path:
                fuzz(operation, mode, count // 2, send, path_parameters={"job_id": job_id})
    print(f"{cases} generated requests")
    assert failures == {}
    assert cases >= MIN_CASES
    assert server.alive()
    log = server.log()
    # At a line's start, as Python and tornado write them (a fuzzed string is logged quoted).
    pattern = rf"^({re.escape(TRACEBACK)}|\[E [^]]*\] Uncaught exception)"
    at = next((found.start() for found in re.finditer(pattern, log, re.MULTILINE)), None)
    assert at is None, log[max(0, at - 1500) : at + 3000]
