"""The one place where domain errors (errors.py) become HTTP responses and websocket closes.

A handler raises `SpecError`, `NotFound`, ...; the client gets the status errors.py gives that
error and `{"message", "field"?, "line"?}`. Anything else is a bug: it is logged with its
traceback and the client sees a bare 500 (jupyter_server's APIHandler never sends a traceback).
"""

import json
from types import TracebackType
from typing import Any

from jupyter_server.base.handlers import APIHandler

from distrun.core.errors import DistrunError, SpecError

# Websocket close codes 4000-4999 are ours to define: 4000 + the HTTP status (4404, 4400, ...).
WS_CLOSE_OFFSET = 4000
WS_CLOSE_INTERNAL_ERROR = 1011


def error_body(err: DistrunError) -> dict[str, Any]:
    body: dict[str, Any] = {"message": str(err)}
    if isinstance(err, SpecError):
        if err.field is not None:
            body["field"] = err.field
        if err.line is not None:
            body["line"] = err.line
    return body


def ws_close_code(err: DistrunError) -> int:
    return WS_CLOSE_OFFSET + err.status


class DomainErrorHandler(APIHandler):
    """An APIHandler whose methods may raise domain errors."""

    def log_exception(
        self,
        typ: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(value, DistrunError):
            # The client's mistake, or a known engine failure: one line, no traceback.
            request = self.request
            self.log.info("%s %s %s: %s", value.status, request.method, request.path, value)
            return
        super().log_exception(typ, value, tb)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        err = exc_info[1] if exc_info else None
        if isinstance(err, DistrunError):
            self.set_status(err.status)
            self.finish(json.dumps(error_body(err)))
            return
        super().write_error(status_code, **kwargs)
