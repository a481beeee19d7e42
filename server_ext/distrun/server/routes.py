"""The extension's routes."""

from tornado import web

from distrun.server.handlers import (
    CancelHandler,
    EnginesHandler,
    JobHandler,
    JobsHandler,
    LogsHandler,
)
from distrun.server.log_stream import LogStreamHandler
from distrun.server.scalars import ScalarsHandler
from distrun.server.stream_tickets import TICKET_PATTERN
from distrun.server.sweeps import (
    MetricsHandler,
    SweepCancelHandler,
    SweepHandler,
    SweepsHandler,
)
from distrun.server.tensorboard import TensorBoardHandler
from distrun.server.usage import UsageHandler


def routes() -> list[tuple[str, type[web.RequestHandler]]]:
    """The extension's routes, relative to the server's base URL."""
    job = r"distrun/jobs/(?P<job_id>[^/]+)"
    sweep = r"distrun/sweeps/(?P<sweep_id>[^/]+)"
    return [
        (r"distrun/engines", EnginesHandler),
        (r"distrun/jobs", JobsHandler),
        (job, JobHandler),
        (job + r"/cancel", CancelHandler),
        (job + r"/logs", LogsHandler),
        (job + r"/logs/stream", LogStreamHandler),
        (rf"distrun/streams/(?P<ticket>{TICKET_PATTERN})", LogStreamHandler),
        (job + r"/usage", UsageHandler),
        (job + r"/scalars", ScalarsHandler),
        (job + r"/tensorboard", TensorBoardHandler),
        (r"distrun/metrics", MetricsHandler),
        (r"distrun/sweeps", SweepsHandler),
        (sweep, SweepHandler),
        (sweep + r"/cancel", SweepCancelHandler),
    ]
