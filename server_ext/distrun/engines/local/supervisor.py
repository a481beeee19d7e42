"""The per-job supervisor of the local engine: a detached process that owns a job's replicas.

`python -m distrun.engines.local.supervisor <job_dir>` starts every replica as its own process
group, writes each replica's merged stdout/stderr into the log store, applies the restart
policy, the
success policy and the deadline, and records everything in `status.json`. The server only
reads these files (and signals this process to cancel), so it can restart while jobs run.

The job directory (`jobdir.JobFiles`) is the contract between this process and the engine.

This module starts the replicas (`launch`); `supervisor_loop` then runs them on an asyncio event
loop. The replicas start before that module (and asyncio) is imported, so their own start-up
overlaps the supervisor's: keep this module's imports to what starting them needs. A supervisor
started ahead of its job (warm_supervisor) has the loop loaded already: the loop starts the
replicas, reading the first ones' output while it starts the rest (each start blocks until the
replica's program is executing: 0.3 ms through setpriv, some 3 ms through a preexec_fn, more
while the replicas already started take the cores).
"""

import os
import sys
import time
from pathlib import Path

from distrun.core.job import JobState
from distrun.core.replica_env import DEFAULT_ENV
from distrun.engines.local.jobdir import JobFiles, JobStatus, read_json, write_json_atomic
from distrun.engines.local.launch import Launch
from distrun.engines.local.processes import (
    death_signal_launcher,
    kill_job_processes,
    lower_priority,
    start_guard,
)
from distrun.engines.local.waiting_interpreters import WaitingInterpreters
from distrun.engines.local.warm_supervisor import WAIT_ARGS, WAIT_FLAG, wait_for_job


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    waited = args[:1] == [WAIT_FLAG] and len(args) == len(WAIT_ARGS) + 1
    interpreters: WaitingInterpreters | None = None
    mark: str | None = None
    if waited:  # started ahead of its job, at its niceness
        nice, python, count, mark = args[1:]
        lower_priority(int(nice))
        import distrun.engines.local.supervisor_loop  # noqa: F401  (loaded while it waits)

        death_signal_launcher()  # found while it waits, too
        interpreters = WaitingInterpreters.start(python, int(count), _waiting_env(), mark)
        job_dir = wait_for_job(JobFiles(Path(".")).supervisor_log.name)
        if job_dir is None:
            interpreters.close()
            return 0
        args = [job_dir]
    if len(args) != 1:
        print(
            "usage: python -m distrun.engines.local.supervisor JOB_DIR | "
            f"{WAIT_FLAG} {' '.join(WAIT_ARGS)}",
            file=sys.stderr,
        )
        return 2
    files = JobFiles(Path(args[0]))
    try:
        launch = Launch(files, interpreters, mark)
        start_guard(launch.job_id, files.status)
        if waited:  # the event loop is loaded: it starts the replicas, reading as they start
            launch.begin()
        else:
            launch.start()
    except Exception as error:
        _record_launch_failure(files, error, mark)
        raise
    # Not at the top: asyncio and the rest load while the replicas start.
    from distrun.engines.local.supervisor_loop import run

    return run(launch)


def _waiting_env() -> dict[str, str]:
    """What a waiting interpreter starts with: what a replica gets that it reads as it starts
    (this process's environment and distrun's defaults)."""
    return {**os.environ, **DEFAULT_ENV}


def _record_launch_failure(files: JobFiles, error: Exception, mark: str | None) -> None:
    """Starting the job failed: stop whatever started and say so in status.json."""
    import traceback  # only on this path

    traceback.print_exc()
    try:
        kill_job_processes(files.dir.name, mark)
        status = JobStatus.from_json(read_json(files.status))
        status.state = JobState.FAILED
        status.reason = f"the supervisor failed: {error!r}"
        status.finished_at = time.time()
        status.finalized = True
        write_json_atomic(files.status, status.to_json())
    except (OSError, ValueError, TypeError, KeyError):
        traceback.print_exc()  # the engine will report the job as lost


if __name__ == "__main__":
    sys.exit(main())
