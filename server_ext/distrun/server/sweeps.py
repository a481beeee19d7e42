"""The sweep resource and metrics of jobs side by side (openapi.yaml documents each one).

A sweep is its trials: jobs whose environment names the sweep (core/sweep_summary.py), found
by listing the user's jobs, so any server process answers for any sweep. Whoever started the
sweep (`distrun sweep`, the kernel magic) starts its trials; here it is read, cancelled (every
trial still running: the runner then starts no more) and deleted (every trial).
"""

import asyncio
import re
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from distrun.core.errors import NotFound, SpecError
from distrun.core.header import parse_cell
from distrun.core.job import Job
from distrun.core.jobids import check_job_id
from distrun.core.metric_series import MetricSeries
from distrun.core.spec import JobSpec
from distrun.core.sweep import SweepSpec, from_dict
from distrun.core.sweep_summary import TrialJob, summary, sweeps_of
from distrun.engines.protocol import ExperimentEngine
from distrun.server.handlers import CellHandler, DistrunHandler, LogReader, check_keys

SWEEP_ID_RE = re.compile(r"[a-z][-a-z0-9]{0,39}\Z")
MAX_COMPARED = 20  # jobs in one metrics request
MAX_READ_AT_ONCE = 4  # logs read at the same time for one request


class SweepsHandler(CellHandler):
    @web.authenticated
    @authorized
    async def post(self) -> None:
        """Hands a sweep cell to the cluster's Katib (`"via": "katib"`): one Experiment whose
        trials Katib runs. distrun's own runner is the command or kernel that starts it."""
        body = self.json_body()
        if body.get("via") != "katib":
            raise SpecError(
                "distrun's sweeps are run by whoever starts them: Run distributed (in the "
                "notebook's kernel), `distrun sweep FILE` or the kernel magic; the server only "
                'hands a sweep to Katib: send {"cell": "...", "via": "katib"}',
                field="via",
            )
        spec, sweep = await self._spec_and_sweep(body)
        engine = self.app.registry.get(spec.engine)
        if not isinstance(engine, ExperimentEngine):
            raise SpecError(
                f"engine {engine.name!r} cannot hand a sweep to Katib: only a Kubeflow engine "
                "(Training Operator kinds) can; name one with %engine=",
                field="engine",
            )
        experiment = await engine.submit_experiment(spec, sweep, self.owner)
        metadata = experiment.get("metadata") or {}
        self.set_status(201)
        self.finish(
            {
                "via": "katib",
                "engine": engine.name,
                "namespace": metadata.get("namespace"),
                "experiment": metadata.get("name"),
            }
        )

    async def _spec_and_sweep(self, body: dict[str, Any]) -> tuple[JobSpec, SweepSpec]:
        """From a cell with a sweep header, or from a spec and a sweep (core/sweep.to_dict)."""
        if "spec" in body:
            check_keys(body, {"spec", "sweep", "via"})
            return JobSpec.from_dict(body["spec"], self.app.limits), from_dict(body.get("sweep"))
        check_keys(body, {"cell", "overrides", "cwd", "via"})
        cell = body["cell"] if isinstance(body.get("cell"), str) else ""
        sweep = parse_cell(cell).sweep
        if sweep is None:
            raise SpecError(
                "the cell declares no sweep: add a line like %sweep.lr=0.1,0.01 to its header",
                field="cell",
            )
        return await self.spec_from_cell_body(body), sweep

    @web.authenticated
    @authorized
    async def get(self) -> None:
        jobs, engine_errors = await self.owned_jobs(self.get_argument("engine", None))
        sweeps = [summary(sweep_id, trials) for sweep_id, trials in sweeps_of(jobs).items()]
        sweeps.sort(key=lambda sweep: sweep["created_at"] or 0, reverse=True)
        body: dict[str, Any] = {"sweeps": sweeps}
        if engine_errors:
            body["engine_errors"] = engine_errors
        self.finish(body)


class _SweepReader(DistrunHandler):
    """Finds a sweep's trials and reads what jobs reported."""

    async def trials(self, sweep_id: str) -> list[TrialJob]:
        if not SWEEP_ID_RE.match(sweep_id):
            raise NotFound(f"no sweep {sweep_id[:80]!r}")
        jobs, _ = await self.owned_jobs(None)
        trials = sweeps_of(jobs).get(sweep_id)
        if not trials:
            raise NotFound(f"no sweep {sweep_id!r}: none of your jobs is one of its trials")
        return trials

    async def read_metrics(self, jobs: list[Job]) -> list[MetricSeries]:
        """What each job's first replica (the chief, master or rank 0) reported."""
        gate = asyncio.Semaphore(MAX_READ_AT_ONCE)

        async def read(job: Job) -> MetricSeries:
            async with gate:
                return await self._read_first_replica(job)

        return list(await asyncio.gather(*(read(job) for job in jobs)))

    async def _read_first_replica(self, job: Job) -> MetricSeries:
        reader = LogReader(self.app.registry.get(job.engine), job.id, self.owner)
        return await self.app.metric_reads.series(reader, job)


class SweepHandler(_SweepReader):
    @web.authenticated
    @authorized
    async def get(self, sweep_id: str) -> None:
        trials = await self.trials(sweep_id)
        readings = await self.read_metrics([trial.job for trial in trials])
        read = [
            TrialJob(t.number, t.job, series) for t, series in zip(trials, readings, strict=True)
        ]
        self.finish(summary(sweep_id, read))

    @web.authenticated
    @authorized
    async def delete(self, sweep_id: str) -> None:
        for trial in await self.trials(sweep_id):
            await self.app.registry.get(trial.job.engine).delete(trial.job.id, self.owner)
        self.set_status(204)
        self.finish()


class SweepCancelHandler(_SweepReader):
    @web.authenticated
    @authorized
    async def post(self, sweep_id: str) -> None:
        trials = await self.trials(sweep_id)
        cancelled = []
        for trial in trials:
            job = trial.job
            if not job.state.terminal:
                job = await self.app.registry.get(job.engine).cancel(job.id, self.owner)
            cancelled.append(TrialJob(trial.number, job))
        self.finish(summary(sweep_id, cancelled))


class MetricsHandler(_SweepReader):
    """GET /distrun/metrics?job=a&job=b: jobs' metrics side by side (comparing runs)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        ids = [check_job_id(job_id) for job_id in self.get_arguments("job")]
        if not ids or len(ids) > MAX_COMPARED:
            raise SpecError(f"name 1 to {MAX_COMPARED} jobs, each as ?job=<id>", field="job")
        found = [await self.app.registry.find_job(job_id, self.owner) for job_id in ids]
        jobs = [job for _, job in found]
        readings = await self.read_metrics(jobs)
        self.finish(
            {
                "jobs": [
                    {
                        "id": job.id,
                        "metrics": dict(series.last),
                        "series": {name: series.points(name) for name in series.names()},
                    }
                    for job, series in zip(jobs, readings, strict=True)
                ]
            }
        )
