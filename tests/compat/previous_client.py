"""The previous release's client code, run by that release's own python (its virtualenv,
release_venv.py) against a server: `python -I previous_client.py COMMAND` with a JSON request
on stdin prints one JSON line, what the command saw, for the test to judge.

Imports nothing of this repository: every `distrun` here is the release's installed package.
Commands: `identity`; `follow` (submit, follow the log stream to its end); `resume` (the
release's log-stream resume client, through a dropped connection and from a cursor); `rest`
(every REST call its ServerClient makes); `magic` (a `%%distrun` cell through its IPython
extension, the server's URL and token in DISTRUN_URL / DISTRUN_TOKEN)."""

import asyncio
import contextlib
import io
import json
import os
import sys
from typing import Any

import distrun
from distrun.client.base import ClientError, LinesEvent, StatusEvent
from distrun.client.log_resume import RetryPolicy, StreamDisconnected
from distrun.client.server_client import ServerClient
from distrun.core.errors import NotFound
from distrun.core.spec import JobSpec

TERMINAL = {"succeeded", "failed", "cancelled"}


def client_of(request: dict[str, Any]) -> Any:
    retry = RetryPolicy(first_delay=0.1)
    return ServerClient(request["url"], request["token"], retry=retry)


async def followed(stream: Any) -> dict[str, Any]:
    lines, states = [], []
    async for event in stream:
        if isinstance(event, LinesEvent):
            lines += [[line.replica, line.seq, line.text] for line in event.lines]
        elif isinstance(event, StatusEvent):
            states.append(event.job["state"])
    return {"lines": sorted(lines), "states": states}


async def until_ended(client: Any, job_id: str) -> dict[str, Any]:
    for _ in range(1200):
        job: dict[str, Any] = await client.get_job(job_id)
        if job["state"] in TERMINAL:
            return job
        await asyncio.sleep(0.1)
    raise AssertionError(f"{job_id} did not end in 120 s: {job}")


async def identity(request: dict[str, Any]) -> dict[str, Any]:
    return {"file": distrun.__file__, "version": distrun.__version__, "path": sys.path}


async def follow(request: dict[str, Any]) -> dict[str, Any]:
    client = client_of(request)
    job = await client.submit(JobSpec.from_dict(request["spec"]))
    return await followed(client.follow(job["id"]))


class DroppedAfterLines:
    """A stream that breaks, as a network would, right after its first `lines` message."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.broken = False

    async def read(self) -> str | None:
        if self.broken:
            raise StreamDisconnected("dropped by the test")
        raw: str | None = await self.stream.read()
        if raw is not None and json.loads(raw).get("type") == "lines":
            self.stream.close()
            self.broken = True
        return raw

    @property
    def close_code(self) -> int | None:
        code: int | None = self.stream.close_code
        return code

    def close(self) -> None:
        self.stream.close()


async def resume(request: dict[str, Any]) -> dict[str, Any]:
    client = client_of(request)
    job = await client.submit(JobSpec.from_dict(request["spec"]))
    cursors: list[dict[str, int]] = []
    open_stream = client._open_stream

    async def dropping_once(job_id: str, cursor: dict[str, int], replicas: Any) -> Any:
        cursors.append(dict(cursor))
        stream = await open_stream(job_id, cursor, replicas)
        return DroppedAfterLines(stream) if len(cursors) == 1 else stream

    client._open_stream = dropping_once
    dropped = await followed(client.follow(job["id"]))
    since = await followed(client.follow(job["id"], since=request["since"]))
    return {"dropped": dropped, "cursors": cursors, "since": since}


async def rest(request: dict[str, Any]) -> dict[str, Any]:
    client = client_of(request)
    seen: dict[str, Any] = {"max_replicas": (await client.limits()).max_replicas}
    job = await client.submit(JobSpec.from_dict(request["spec"]))
    seen["submitted"] = {"state": job["state"], "replicas": [r["name"] for r in job["replicas"]]}
    ended = await until_ended(client, job["id"])
    seen["ended"] = {"state": ended["state"], "code": ended["spec"]["code"]}
    seen["listed"] = job["id"] in [listed["id"] for listed in await client.list_jobs()]
    page = await client.logs(job["id"])
    seen["page"] = {
        "lines": sorted([line.replica, line.seq, line.text] for line in page.lines),
        "next": page.next,
    }
    tail = await client.logs(job["id"], replicas=["worker-1"], tail=2)
    seen["tail"] = [[line.replica, line.text] for line in tail.lines]
    sleeper = await client.submit(JobSpec.from_dict(request["sleeper"]))
    seen["cancelled_id"] = (await client.cancel(sleeper["id"]))["id"] == sleeper["id"]
    seen["sleeper"] = (await until_ended(client, sleeper["id"]))["state"]
    await client.delete(job["id"])
    try:
        await client.get_job(job["id"])
        seen["after_delete"] = "found"
    except NotFound:
        seen["after_delete"] = "NotFound"
    except ClientError as error:
        seen["after_delete"] = f"ClientError: {error}"
    return seen


def magic(request: dict[str, Any]) -> dict[str, Any]:
    from IPython.core.interactiveshell import InteractiveShell

    os.environ.update(DISTRUN_URL=request["url"], DISTRUN_TOKEN=request["token"])
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "distrun.kernel_magic")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        outcome = shell.run_cell(request["cell"])
    value = outcome.result
    return {
        "error": repr(outcome.error_in_exec) if outcome.error_in_exec else None,
        "result": None if value is None else {"job_id": value.job_id, "state": value.state},
        "printed": printed.getvalue(),
    }


ASYNC_COMMANDS = {"identity": identity, "follow": follow, "resume": resume, "rest": rest}

if __name__ == "__main__":
    request = json.loads(sys.stdin.read() or "{}")
    name = sys.argv[1]
    seen = magic(request) if name == "magic" else asyncio.run(ASYNC_COMMANDS[name](request))
    print(json.dumps(seen), flush=True)
