"""`GET /distrun/jobs/{id}/usage`: what each replica of a job used, as the engine holding the
job sampled it (the log websocket's version 3 sends the same live: log_stream.py)."""

from jupyter_server.auth.decorator import authorized
from tornado import web

from distrun.core.jobids import check_job_id
from distrun.engines.usage import usage_report
from distrun.server.handlers import DistrunHandler
from distrun.server.params import parse_int

MAX_SEQ = 2**53  # a JSON number a browser reads exactly


def parse_usage_since(value: str | None, name: str) -> int:
    return parse_int(value, name, 0, 0, MAX_SEQ) or 0


class UsageHandler(DistrunHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        since = parse_usage_since(self.get_argument("since", None), "since")
        engine, job = await self.app.registry.find_job(check_job_id(job_id), self.owner)
        self.finish((await usage_report(engine, job.id, self.owner, since)).to_json())
