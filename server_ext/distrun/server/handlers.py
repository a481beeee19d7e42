"""The REST handlers of the API contract (openapi.yaml beside this file documents each one).

Every method is authenticated (`@web.authenticated`, outermost) and then authorized on the
"distrun" resource. The owner passed to the engines comes from `DistrunApp.owner_of`, so one
user never sees another's jobs. Domain errors become HTTP in http_errors.py.
"""

import asyncio
import json
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from jupyter_server.auth.decorator import authorized
from jupyter_server.extension.handler import ExtensionHandlerMixin
from jupyter_server.utils import url_path_join
from tornado import web
from tornado.http1connection import HTTP1Connection
from tornado.httputil import HTTPServerRequest

from distrun.core.api_versions import API_VERSION_HEADER, served_version
from distrun.core.errors import DistrunError, EngineError, Forbidden, LimitExceeded, SpecError
from distrun.core.frameworks import FRAMEWORKS, Framework
from distrun.core.header import header_line, parse_cell, spec_from_cell
from distrun.core.job import Job
from distrun.core.jobids import check_job_id
from distrun.core.logs import Cursor, LogLine
from distrun.core.spec import CLEAN_POD_POLICIES, RESTART_POLICIES, JobSpec
from distrun.engines.protocol import Engine, EngineInfo
from distrun.server.cellfiles import read_cell_files
from distrun.server.http_errors import DomainErrorHandler
from distrun.server.params import (
    MAX_TAIL,
    MAX_TAIL_BYTES,
    check_replicas,
    parse_flag,
    parse_int,
    parse_replicas,
    parse_since,
)
from distrun.server.stream_tickets import STREAM_TICKET_HEADER, parse_ticket

if TYPE_CHECKING:
    from distrun.server.app import DistrunApp

PAGE_LINES = 10_000  # lines asked of an engine per read
SMALL_BODY_BYTES = 64 * 1024  # the most a request that carries no job may send
TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"


def framework_json(framework: Framework) -> dict[str, Any]:
    return {
        "name": framework.name,
        "kubeflow_kind": framework.kubeflow_kind,
        "default_image": framework.default_image,
        "roles": [
            {
                "name": role.name,
                "min_replicas": role.min_replicas,
                "max_replicas": role.max_replicas,
                "default_replicas": role.default_replicas,
            }
            for role in framework.roles
        ],
        "completion_roles": list(framework.completion_roles),
    }


def next_cursor(since: Cursor, replicas: list[str], lines: list[LogLine]) -> Cursor:
    cursor = {name: since.get(name, 0) for name in replicas}
    for line in lines:
        cursor[line.replica] = max(cursor.get(line.replica, 0), line.seq + 1)
    return cursor


def limit_body_size(request: HTTPServerRequest, limit: int) -> None:
    """Make tornado stop reading a streamed body past `limit` (for a chunked body, which has no
    length up front, it answers 400 and closes the connection)."""
    if isinstance(request.connection, HTTP1Connection):
        request.connection.set_max_body_size(limit)


def line_json(line: LogLine) -> list[Any]:
    return [line.replica, line.seq, line.time, line.text]


@web.stream_request_body
class DistrunHandler(ExtensionHandlerMixin, DomainErrorHandler):
    """Bodies are streamed to `data_received`, so `prepare` runs on the headers alone and a body
    over `body_limit()` is refused from its Content-Length before any of it is read (unstreamed,
    tornado would buffer up to ServerApp.max_body_size, 512 MiB, before the handler runs)."""

    auth_resource = "distrun"
    _body: bytearray

    @property
    def app(self) -> "DistrunApp":
        return cast("DistrunApp", self.extensionapp)

    @property
    def owner(self) -> str:
        return self.app.owner_of(self.current_user)

    def job_url(self, job_id: str) -> str:
        return str(url_path_join(self.base_url, "distrun", "jobs", job_id))

    def body_limit(self) -> int:
        """The largest body this handler reads; only a job submission carries a large one."""
        return SMALL_BODY_BYTES

    async def prepare(self) -> None:  # type: ignore[override]  # as APIHandler.prepare
        self._body = bytearray()
        limit = self.body_limit()
        limit_body_size(self.request, limit)
        await super().prepare()
        # Before the body: a client that cannot read the answer should not have it acted on.
        # An anonymous request is refused by @web.authenticated first, whatever it asks for.
        if self.current_user:
            asked = self.request.headers.get(API_VERSION_HEADER)
            self.set_header(API_VERSION_HEADER, served_version(asked))
        declared = self.request.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            raise LimitExceeded(
                f"the request body is {int(declared):,} bytes, over the limit of {limit:,}; "
                "ship large data through a volume or object storage"
            )

    async def owned_jobs(self, engine_name: str | None) -> tuple[list[Job], dict[str, str]]:
        """The user's jobs on one engine or all, newest first, and each engine that could not
        list them with why (an engine named alone raises instead)."""
        registry = self.app.registry
        engines = [registry.get(engine_name)] if engine_name else registry.all()
        jobs: list[Job] = []
        engine_errors: dict[str, str] = {}
        for engine in engines:
            try:
                jobs += await engine.list_jobs(self.owner)
            except EngineError as err:
                if engine_name:
                    raise
                engine_errors[engine.name] = str(err)
        jobs.sort(key=lambda job: job.created_at, reverse=True)
        return jobs, engine_errors

    def data_received(self, chunk: bytes) -> None:
        self._body += chunk

    def json_body(self) -> dict[str, Any]:
        try:
            body = json.loads(self._body or b"null")
        except (ValueError, UnicodeDecodeError):
            raise SpecError("the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise SpecError("the request body must be a JSON object")
        return body


class EnginesHandler(DistrunHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        engines = self.app.registry.all()
        infos = await asyncio.gather(*(self._engine_info(engine) for engine in engines))
        limits = self.app.limits
        self.finish(
            {
                "default_engine": self.app.registry.default_name,
                "engines": [asdict(info) for info in infos],
                "frameworks": [framework_json(fw) for fw in FRAMEWORKS.values()],
                "limits": asdict(limits),
                "restart_policies": list(RESTART_POLICIES),
                "clean_pod_policies": list(CLEAN_POD_POLICIES),
            }
        )

    async def _engine_info(self, engine: Engine) -> EngineInfo:
        refusal = self.app.refusal_of(engine)
        try:
            info = await engine.info()
        except DistrunError as err:
            return EngineInfo(name=engine.name, description="", available=False, reason=str(err))
        return info if refusal is None else replace(info, available=False, reason=refusal)


class CellHandler(DistrunHandler):
    """A handler that makes a job spec of a request's cell."""

    def body_limit(self) -> int:
        return self.app.max_body_bytes

    async def spec_from_cell_body(self, body: dict[str, Any]) -> JobSpec:
        """The spec of `body`'s cell (its header, `overrides` winning), with the files its
        `%files=` names read from `cwd` inside the server's root."""
        cell, overrides, cwd = body["cell"], body.get("overrides"), body.get("cwd") or ""
        if not isinstance(cell, str):
            raise SpecError("cell must be a string", field="cell")
        if overrides is not None and not isinstance(overrides, dict):
            raise SpecError("overrides must be an object of job spec fields", field="overrides")
        if not isinstance(cwd, str):
            raise SpecError("cwd must be a path relative to the server's root", field="cwd")
        limits = self.app.limits
        parsed: tuple[JobSpec, list[str]] = spec_from_cell(cell, overrides, limits)
        spec, file_refs = parsed
        if not file_refs:
            return spec
        files = await asyncio.to_thread(
            read_cell_files,
            self.serverapp.root_dir,
            cwd,
            file_refs,
            limits.max_payload_bytes,
            bool(self.contents_manager.allow_hidden),
        )
        return JobSpec.from_dict({**spec.to_dict(), "files": {**spec.files, **files}}, limits)


class JobsHandler(CellHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        jobs, engine_errors = await self.owned_jobs(self.get_argument("engine", None))
        body: dict[str, Any] = {"jobs": [job.to_json() for job in jobs]}
        if engine_errors:
            body["engine_errors"] = engine_errors
        self.finish(body)

    @web.authenticated
    @authorized
    async def post(self) -> None:
        ticket = parse_ticket(self.request.headers.get(STREAM_TICKET_HEADER))
        try:
            job = await self._submit()
        except BaseException:
            if ticket is not None:  # its socket hears that the submission made no job
                self.app.stream_tickets.settle(self.owner, ticket, None)
            raise
        if ticket is not None:  # its socket follows the job before the answer is written
            self.app.stream_tickets.settle(self.owner, ticket, job.id)
        self.finish(job.to_json())

    async def _submit(self) -> Job:
        started = time.perf_counter()
        body = self.json_body()
        if ("spec" in body) == ("cell" in body):
            raise SpecError('send either {"spec": {...}} or {"cell": "..."}')
        if "spec" in body:
            check_keys(body, {"spec"})
            spec = JobSpec.from_dict(body["spec"], self.app.limits)
        else:
            spec = await self._spec_from_cell(body)
        specified = time.perf_counter()
        engine = self.app.registry.get(spec.engine)
        refusal = self.app.refusal_of(engine)
        if refusal is not None:
            raise Forbidden(refusal)
        try:
            job = await engine.submit(spec, self.owner)
        except SpecError as err:
            raise _on_header_line(err, body) from None
        # Where the answer's time went, for the browser's devtools and benchmarks/browser.
        timing = {"spec": specified - started, "submit": time.perf_counter() - specified}
        self.set_header("Server-Timing", server_timing(timing))
        self.set_status(201)
        self.set_header("Location", self.job_url(job.id))
        return job

    async def _spec_from_cell(self, body: dict[str, Any]) -> JobSpec:
        check_keys(body, {"cell", "overrides", "cwd"})
        if isinstance(body["cell"], str) and parse_cell(body["cell"]).sweep is not None:
            raise SpecError(
                "this cell declares a parameter sweep (%sweep. lines), and this call runs one "
                "job: run the sweep with Run distributed (it runs in the notebook's kernel), "
                "`distrun sweep FILE`, or after `%load_ext distrun.kernel_magic`, or remove "
                "the sweep lines",
                field="cell",
            )
        return await self.spec_from_cell_body(body)


def _on_header_line(err: SpecError, body: dict[str, Any]) -> SpecError:
    """An engine's refusal of a cell's job, naming the header line that asked for it."""
    if err.line is not None or not isinstance(body.get("cell"), str):
        return err
    overrides = body.get("overrides") if isinstance(body.get("overrides"), dict) else None
    line = header_line(body["cell"], overrides, err.field)
    return err if line is None else SpecError(str(err), line=line, field=err.field)


def server_timing(durations: dict[str, float]) -> str:
    """A Server-Timing header value of named durations in seconds."""
    return ", ".join(f"{name};dur={seconds * 1000:.2f}" for name, seconds in durations.items())


def check_keys(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise SpecError(
            f"unknown field(s) {', '.join(unknown)} in the request; known: {', '.join(sorted(allowed))}",
            field=unknown[0],
        )


class JobHandler(DistrunHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        _, job = await self.app.registry.find_job(check_job_id(job_id), self.owner)
        self.finish(job.to_json())

    @web.authenticated
    @authorized
    async def delete(self, job_id: str) -> None:
        engine, job = await self.app.registry.find_job(check_job_id(job_id), self.owner)
        await engine.delete(job.id, self.owner)
        self.set_status(204)
        self.finish()


class CancelHandler(DistrunHandler):
    @web.authenticated
    @authorized
    async def post(self, job_id: str) -> None:
        engine, job = await self.app.registry.find_job(check_job_id(job_id), self.owner)
        self.finish((await engine.cancel(job.id, self.owner)).to_json())


@dataclass(frozen=True)
class _LogQuery:
    """The query of a log read, checked."""

    replicas: list[str]
    since: Cursor
    tail: int | None
    limit: int
    output: str  # "text" or "json"
    prefix: bool
    partial: bool  # whether each replica's unfinished line comes too

    @classmethod
    def parse(cls, handler: "LogsHandler", job: Job) -> "_LogQuery":
        wanted = check_replicas(job, parse_replicas(handler.get_arguments("replica")))
        output = handler.get_argument("format", "text")
        if output not in ("text", "json"):
            raise SpecError(
                f"format {output[:30]!r} is not valid; write text or json", field="format"
            )
        # Unfinished lines: in JSON unless partial=0, in text only with partial=1.
        partial = parse_flag(handler.get_argument("partial", None), "partial")
        return cls(
            replicas=sorted(wanted) if wanted else [replica.name for replica in job.replicas],
            since=parse_since(handler.get_argument("since", None)),
            tail=parse_int(handler.get_argument("tail", None), "tail", None, 0, MAX_TAIL),
            limit=parse_int(handler.get_argument("limit", None), "limit", PAGE_LINES, 1, PAGE_LINES)
            or PAGE_LINES,
            output=output,
            prefix=handler.get_argument("prefix", "1") != "0",
            partial=partial is not False if output == "json" else partial is True,
        )


class LogsHandler(DistrunHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        engine, job = await self.app.registry.find_job(check_job_id(job_id), self.owner)
        query = _LogQuery.parse(self, job)
        reader = LogReader(engine, job.id, self.owner)
        if query.tail is not None:
            lines, cursor = await reader.tail(query.replicas, query.since, query.tail)
        elif query.output == "json":
            lines = await reader.page(set(query.replicas), query.since, query.limit)
            cursor = next_cursor(query.since, query.replicas, lines)
        else:
            await self._stream_text(reader, query)
            return
        partials = await reader.partials(set(query.replicas), cursor) if query.partial else []
        if query.output == "json":
            body = {"lines": [line_json(line) for line in lines], "next": cursor}
            self.finish({**body, "partial": [line_json(line) for line in partials]})
        else:
            text = _text(lines + partials, query.prefix)
            self.finish(text, set_content_type=TEXT_CONTENT_TYPE)

    async def _stream_text(self, reader: "LogReader", query: _LogQuery) -> None:
        """Every line after `since`, page by page, so memory stays bounded however long the log."""
        self.set_header("Content-Type", TEXT_CONTENT_TYPE)
        cursor = dict(query.since)
        async for lines, after in reader.pages(query.replicas, query.since):
            if lines:
                self.write(_text(lines, query.prefix))
                await self.flush()
            cursor = after
        if query.partial:
            self.write(_text(await reader.partials(set(query.replicas), cursor), query.prefix))
        self.finish(set_content_type=TEXT_CONTENT_TYPE)


def _text(lines: list[LogLine], prefix: bool) -> str:
    if prefix:
        return "".join(f"{line.replica} | {line.text}\n" for line in lines)
    return "".join(f"{line.text}\n" for line in lines)


class LogReader:
    def __init__(self, engine: Engine, job_id: str, owner: str) -> None:
        self.engine, self.job_id, self.owner = engine, job_id, owner

    async def partials(self, replicas: set[str], after: Cursor) -> list[LogLine]:
        """The replicas' unfinished lines that come after `after`."""
        found = await self.engine.read_partials(self.job_id, self.owner, replicas=replicas)
        return [line for line in found if line.seq >= after.get(line.replica, 0)]

    async def page(self, replicas: set[str], since: Cursor, limit: int) -> list[LogLine]:
        return await self.engine.read_logs(
            self.job_id, self.owner, since=since, replicas=replicas, limit=limit
        )

    async def pages(
        self, replicas: list[str], since: Cursor
    ) -> AsyncIterator[tuple[list[LogLine], Cursor]]:
        """Every line of `replicas` after `since`, a page at a time (so memory stays bounded
        however long the log), each page with where the next one starts."""
        cursor = dict(since)
        while True:
            lines = await self.page(set(replicas), cursor, PAGE_LINES)
            cursor = next_cursor(cursor, replicas, lines)
            yield lines, cursor
            if len(lines) < PAGE_LINES:
                return

    async def tail(
        self, replicas: list[str], since: Cursor, count: int
    ) -> tuple[list[LogLine], Cursor]:
        """The last `count` lines of each replica, merged by capture time, and where each ends;
        at most MAX_TAIL_BYTES of text in all (the newest lines are kept).

        The engine protocol has no line count, so this reads each replica through once, keeping
        only its last lines in memory."""
        kept: list[LogLine] = []
        cursor: Cursor = {}
        for replica in replicas:
            last = _NewestLines(count, MAX_TAIL_BYTES)
            cursor[replica] = since.get(replica, 0)
            async for lines, after in self.pages([replica], {replica: cursor[replica]}):
                last.extend(lines)
                cursor[replica] = after[replica]
            kept = _newest(kept + list(last.lines), MAX_TAIL_BYTES)
        return kept, cursor


class _NewestLines:
    """The newest lines seen, at most `count` of them and `max_bytes` of text."""

    def __init__(self, count: int, max_bytes: int) -> None:
        self.lines: deque[LogLine] = deque()
        self.count, self.max_bytes, self.size = count, max_bytes, 0

    def extend(self, lines: list[LogLine]) -> None:
        for line in lines:
            self.lines.append(line)
            self.size += len(line.text)
            while self.lines and (len(self.lines) > self.count or self.size > self.max_bytes):
                self.size -= len(self.lines.popleft().text)


def _newest(lines: list[LogLine], max_bytes: int) -> list[LogLine]:
    """`lines` by capture time, without the oldest beyond `max_bytes` of text."""
    lines.sort(key=lambda line: line.time)
    size = 0
    for index in range(len(lines) - 1, -1, -1):
        size += len(lines[index].text)
        if size > max_bytes:
            return lines[index + 1 :]
    return lines
