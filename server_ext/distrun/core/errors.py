"""The domain's exceptions. Handlers map them to HTTP in one place (handlers.errors)."""


class DistrunError(Exception):
    """Base of every error distrun raises on purpose."""

    status = 500


class SpecError(DistrunError):
    """The job spec or the cell header is invalid; the message says what to write instead."""

    status = 400

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None):
        self.line = line
        self.field = field
        where = f"line {line}: " if line is not None else ""
        super().__init__(f"{where}{message}")


class LimitExceeded(DistrunError):
    """An operator-set limit (replicas, jobs per user, payload, ...) would be exceeded."""

    status = 413


class TooManyOpen(DistrunError):
    """A user holds as many of something (log streams) as an operator allows at once."""

    status = 429


class NotFound(DistrunError):
    """No such job for this user. Also raised for other users' jobs, so ids leak nothing."""

    status = 404


class Forbidden(DistrunError):
    status = 403


class VersionNotServed(DistrunError):
    """The client asked for a version of the API (REST or the log websocket) that this server
    does not serve."""

    status = 406


class Conflict(DistrunError):
    """The job is in a state that does not allow the request (e.g. delete while running)."""

    status = 409


class EngineError(DistrunError):
    """The engine (a cluster API, a process launch) failed for reasons outside the request."""

    status = 502
