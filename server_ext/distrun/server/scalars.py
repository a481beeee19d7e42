"""`GET /distrun/jobs/{id}/scalars`: the TensorBoard scalars a job's replicas wrote
(engines/scalars.py), for the log viewer's Metrics tab."""

from jupyter_server.auth.decorator import authorized
from tornado import web

from distrun.core.jobids import check_job_id
from distrun.engines.scalars import scalars_report
from distrun.server.handlers import DistrunHandler


class ScalarsHandler(DistrunHandler):
    @web.authenticated
    @authorized
    async def get(self, job_id: str) -> None:
        engine, job = await self.app.registry.find_job(check_job_id(job_id), self.owner)
        self.finish((await scalars_report(engine, job.id, self.owner)).to_json())
