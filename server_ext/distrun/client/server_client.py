"""The REST + websocket backend: a jupyter_server running the distrun extension, with token
authentication."""

import json
from collections.abc import AsyncIterator
from dataclasses import fields
from typing import Any
from urllib.parse import urlencode, urlsplit, urlunsplit

from distrun.client.base import ClientError, FollowEvent, LogPage
from distrun.client.log_resume import (
    MessageStream,
    RetryPolicy,
    StreamDisconnected,
    after_cursor,
    format_cursor,
    fresh_lines,
    resumable_stream,
)
from distrun.core.api_versions import API_VERSION_HEADER, REST_V1
from distrun.core.errors import (
    Conflict,
    DistrunError,
    EngineError,
    Forbidden,
    LimitExceeded,
    NotFound,
    SpecError,
)
from distrun.core.logs import Cursor, LogLine
from distrun.core.spec import JobSpec, Limits
from distrun.core.stream_versions import STREAM_PROTOCOLS

_ERRORS_BY_STATUS: dict[int, type[DistrunError]] = {
    400: SpecError,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: LimitExceeded,
    502: EngineError,
}


def error_from_response(status: int, body: bytes, what: str) -> DistrunError:
    """The domain error a response stands for, with the server's message."""
    try:
        payload = json.loads(body or b"{}")
    except ValueError:
        payload = {}
    if not isinstance(payload, dict):
        payload = {}
    message = str(payload.get("message") or payload.get("reason") or f"HTTP {status} for {what}")
    if status == 401 or (status == 403 and message == "Forbidden"):
        # jupyter_server's own refusal of a missing or wrong token, not a distrun Forbidden
        return ClientError(
            f"the server refused the request (HTTP {status}); check the token (--token-file, DISTRUN_TOKEN or DISTRUN_TOKEN_FILE)"
        )
    if status == 400:
        line = payload.get("line")
        if isinstance(line, int):
            # SpecError puts "line N: " in front itself; the server's message may have it already
            message = message.removeprefix(f"line {line}: ")
        else:
            line = None
        field = payload.get("field") if isinstance(payload.get("field"), str) else None
        return SpecError(message, line=line, field=field)
    error_type = _ERRORS_BY_STATUS.get(status, ClientError)
    return error_type(message)


class _WebSocketStream:
    def __init__(self, connection: Any) -> None:
        self._connection = connection

    async def read(self) -> str | None:
        message = await self._connection.read_message()
        if isinstance(message, bytes):
            return message.decode("utf-8", errors="replace")
        return message  # type: ignore[no-any-return]

    @property
    def close_code(self) -> int | None:
        return self._connection.close_code  # type: ignore[no-any-return]

    def close(self) -> None:
        self._connection.close()


class ServerClient:
    """The REST + websocket API of a jupyter_server running the distrun extension."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        request_timeout: float = 120.0,
        retry: RetryPolicy = RetryPolicy(),
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ClientError(f"server URL {url!r} is not valid; write http://host:port/")
        path = parts.path if parts.path.endswith("/") else parts.path + "/"
        self.base_url = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
        self.token = token
        self.request_timeout = request_timeout
        self.retry = retry

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", API_VERSION_HEADER: REST_V1}
        if self.token:
            headers["Authorization"] = f"token {self.token}"
        return headers

    def _url(self, path: str, query: list[tuple[str, str]] | None = None) -> str:
        url = self.base_url + path
        return f"{url}?{urlencode(query)}" if query else url

    async def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
    ) -> Any:
        from tornado.httpclient import AsyncHTTPClient, HTTPRequest

        headers = self._headers()
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        request = HTTPRequest(
            self._url(path, query),
            method=method,
            headers=headers,
            body=data,
            request_timeout=self.request_timeout,
            allow_nonstandard_methods=True,
        )
        what = f"{method} {path}"
        try:
            response = await AsyncHTTPClient().fetch(request, raise_error=False)
        except OSError as exc:
            raise ClientError(f"cannot reach the server at {self.base_url}: {exc}") from None
        if response.code == 599:
            raise ClientError(f"cannot reach the server at {self.base_url}: {response.error}")
        if response.code >= 400:
            raise error_from_response(response.code, response.body, what)
        if response.code == 204 or not response.body:
            return None
        try:
            return json.loads(response.body)
        except ValueError:
            raise ClientError(f"the server's answer to {what} is not JSON") from None

    @staticmethod
    def _job_path(job_id: str, suffix: str = "") -> str:
        from tornado.escape import url_escape

        return f"distrun/jobs/{url_escape(job_id, plus=False)}{suffix}"

    async def limits(self) -> Limits:
        info = await self._request("GET", "distrun/engines")
        given = info.get("limits", {}) if isinstance(info, dict) else {}
        known = {f.name for f in fields(Limits)}
        return Limits(**{k: v for k, v in given.items() if k in known and isinstance(v, int)})

    async def submit(self, spec: JobSpec) -> dict[str, Any]:
        job: dict[str, Any] = await self._request("POST", "distrun/jobs", {"spec": wire_spec(spec)})
        return job

    async def submit_cell(
        self, cell: str, overrides: dict[str, Any] | None = None, cwd: str | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"cell": cell}
        if overrides:
            body["overrides"] = overrides
        if cwd is not None:
            body["cwd"] = cwd
        job: dict[str, Any] = await self._request("POST", "distrun/jobs", body)
        return job

    async def submit_experiment(self, spec: JobSpec, sweep: dict[str, Any]) -> dict[str, Any]:
        """Hands a sweep (core/sweep.to_dict) of `spec` to the cluster's Katib."""
        body = {"spec": wire_spec(spec), "sweep": sweep, "via": "katib"}
        created: dict[str, Any] = await self._request("POST", "distrun/sweeps", body)
        return created

    async def list_jobs(self) -> list[dict[str, Any]]:
        answer = await self._request("GET", "distrun/jobs")
        jobs: list[dict[str, Any]] = answer["jobs"]
        return jobs

    async def get_job(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = await self._request("GET", self._job_path(job_id))
        return job

    async def cancel(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = await self._request("POST", self._job_path(job_id, "/cancel"), {})
        return job

    async def delete(self, job_id: str) -> None:
        await self._request("DELETE", self._job_path(job_id))

    async def usage(self, job_id: str, since: int = 0) -> dict[str, Any]:
        query = [("since", str(since))] if since else []
        path = self._job_path(job_id, "/usage")
        report: dict[str, Any] = await self._request("GET", path, query=query)
        return report

    async def logs(
        self, job_id: str, replicas: list[str] | None = None, tail: int | None = None
    ) -> LogPage:
        query = [("format", "json")] + [("replica", r) for r in replicas or []]
        if tail is not None:
            query.append(("tail", str(tail)))
        cursor: Cursor = {}
        lines: list[LogLine] = []
        while True:
            page_query = query + ([("since", format_cursor(cursor))] if cursor else [])
            answer = await self._request("GET", self._job_path(job_id, "/logs"), query=page_query)
            fresh = fresh_lines(answer.get("lines", []), cursor)
            lines += fresh
            cursor.update(answer.get("next") or {})
            if not fresh or tail is not None:
                return LogPage(lines, cursor, after_cursor(answer.get("partial", []), cursor))

    async def _open_stream(
        self, job_id: str, cursor: Cursor, replicas: list[str] | None
    ) -> MessageStream:
        from tornado.httpclient import HTTPClientError, HTTPRequest
        from tornado.websocket import websocket_connect

        query = [("replica", r) for r in replicas or []]
        if cursor:
            query.append(("since", format_cursor(cursor)))
        url = self._url(self._job_path(job_id, "/logs/stream"), query)
        scheme, rest = url.split(":", 1)
        request = HTTPRequest(
            ("wss" if scheme == "https" else "ws") + ":" + rest,
            headers=self._headers(),
            connect_timeout=20.0,
        )
        try:
            connection = await websocket_connect(request, subprotocols=list(STREAM_PROTOCOLS))
        except HTTPClientError as exc:
            if exc.code >= 500 or exc.code == 599:
                raise StreamDisconnected(f"HTTP {exc.code}") from None
            body = exc.response.body if exc.response is not None else b""
            raise error_from_response(exc.code, body, f"the log stream of {job_id}") from None
        except OSError as exc:
            raise StreamDisconnected(str(exc) or type(exc).__name__) from None
        return _WebSocketStream(connection)

    def follow(
        self, job_id: str, since: Cursor | None = None, replicas: list[str] | None = None
    ) -> AsyncIterator[FollowEvent]:
        async def open_stream(cursor: Cursor) -> MessageStream:
            return await self._open_stream(job_id, cursor, replicas)

        return resumable_stream(open_stream, job_id, since, self.retry)

    async def close(self) -> None:
        return None


def wire_spec(spec: JobSpec) -> dict[str, Any]:
    """The spec as sent: without the top-level fields left at their defaults, so that a server
    older than a field still takes a spec that does not use it (a kernel's client is often
    newer or older than the server)."""
    full = spec.to_dict()
    required = {name: full[name] for name in ("framework", "code", "roles")}
    try:
        defaults = JobSpec.from_dict(required).to_dict()
    except SpecError:  # valid only with some other field set: send them all
        return full
    return {
        name: value for name, value in full.items() if name in required or value != defaults[name]
    }
