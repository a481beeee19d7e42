"""A server restart in the middle of running jobs: every job keeps its history; a running job is
still followed by the new server, or reported lost if it died meanwhile, never forgotten.

"The server" is a `LocalEngine`; a restart is a new engine over the same state directory.
"""

import asyncio
import json
import os
import signal
from contextlib import aclosing
from pathlib import Path

import pytest

from distrun.core.errors import EngineError
from distrun.core.job import Job, JobState
from distrun.core.logs import LogBatch
from distrun.engines.local.engine import LOST_REASON
from distrun.engines.local.processes import process_start_time

from .helpers import (
    NUMBERED_LINES_CODE,
    WAIT,
    EngineFactory,
    SequenceChecker,
    follow_to_end,
    processes_of_job,
    spec,
    wait_for_lines,
    wait_until,
)

pytestmark = pytest.mark.integration

TICKING = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
for i in range(100000):
    print("tick", i, flush=True)
    time.sleep(0.01)
"""


def history(job: Job) -> tuple[object, ...]:
    return (job.id, job.state, job.reason, job.created_at, job.finished_at, job.failed_replica)


HOLD_UNTIL_RELEASED = """
import os, time
while not os.path.exists(os.environ["RELEASE_FILE"]):
    time.sleep(0.05)
"""


async def test_a_restarted_server_keeps_every_jobs_history_and_follows_the_running_one(
    make_local_engine: EngineFactory, tmp_path: Path
) -> None:
    old = make_local_engine()
    done = await old.submit(spec("print('done')"), "alice")
    broken = await old.submit(spec("print('about to fail')\nraise SystemExit(4)"), "alice")
    await follow_to_end(old, done)
    await follow_to_end(old, broken)
    # The replicas hold after their lines until released, so the job is still running when the
    # server goes down, however fast the machine wrote them.
    release = tmp_path / "release"
    env = {"FIDELITY_LINES": "30000", "FIDELITY_SEED": "7", "RELEASE_FILE": str(release)}
    running = await old.submit(
        spec(NUMBERED_LINES_CODE + HOLD_UNTIL_RELEASED, replicas=3, env=env), "alice"
    )
    before = {job.id: job for job in await old.list_jobs("alice")}
    logs_before = {job_id: await old.read_logs(job_id, "alice") for job_id in (done.id, broken.id)}

    # A reader is mid-stream when the server goes down: it is told, and resumes on the new one.
    checker = SequenceChecker(replica.name for replica in running.replicas)

    async def read_until_the_server_stops() -> None:
        async with aclosing(old.follow(running.id, "alice", max_batch=500)) as events:
            async for event in events:
                if isinstance(event, LogBatch):
                    checker.check(event.lines)
                    if checker.received >= 1000:
                        await old.close()  # the server shuts down under the reader

    with pytest.raises(EngineError, match="the server stopped following job"):
        await asyncio.wait_for(read_until_the_server_stops(), WAIT)
    release.touch()

    new = make_local_engine()
    after = {job.id: job for job in await new.list_jobs("alice")}
    assert sorted(after) == sorted(before)
    for job_id in (done.id, broken.id):
        assert history(after[job_id]) == history(before[job_id])
        assert await new.read_logs(job_id, "alice") == logs_before[job_id]
    assert after[broken.id].last_lines == ["about to fail"]
    assert after[running.id].state in (JobState.PENDING, JobState.RUNNING, JobState.SUCCEEDED)

    final, lines = await follow_to_end(new, running, since=checker.cursor())
    checker.check(lines)
    assert final.state == JobState.SUCCEEDED, final.reason
    assert checker.next_seq == dict.fromkeys(checker.next_seq, 30000)


async def test_a_job_whose_supervisor_died_while_the_server_was_down_is_reported_lost(
    make_local_engine: EngineFactory,
) -> None:
    old = make_local_engine()
    job = await old.submit(spec(TICKING, replicas=2), "alice")
    await wait_until(lambda: len(processes_of_job(job.id)) == 4, "replicas and grandchildren run")
    seen = await wait_for_lines(old, job, 10)
    await old.close()

    # While no server runs, the supervisor dies (the OOM killer, a stray kill -9).
    supervisor = json.loads((old._jobs_dir / job.id / "supervisor.json").read_text())
    os.kill(supervisor["pid"], signal.SIGKILL)
    await wait_until(lambda: process_start_time(supervisor["pid"]) is None, "it is dead", 15)

    new = make_local_engine()
    lost = await new.get_job(job.id, "alice")
    assert (lost.state, lost.reason) == (JobState.FAILED, LOST_REASON)
    assert all(replica.state == JobState.FAILED for replica in lost.replicas)
    # Even the grandchildren that left their replica's process group are gone.
    await wait_until(lambda: not processes_of_job(job.id), "no process of the job is left", 15)
    final, lines = await follow_to_end(new, job)
    assert final.state == JobState.FAILED
    kept = {(line.replica, line.seq): line.text for line in lines}
    assert all(kept[(line.replica, line.seq)] == line.text for line in seen)
    assert [j.id for j in await new.list_jobs("alice")] == [job.id]


async def test_a_job_submitted_just_before_the_restart_runs_on_under_the_new_server(
    make_local_engine: EngineFactory,
) -> None:
    old = make_local_engine()
    job = await old.submit(spec("import time\ntime.sleep(1)\nprint('finished')"), "alice")
    await old.close()  # at once: the supervisor may not have started its replicas yet
    new = make_local_engine()
    final, lines = await follow_to_end(new, job)
    assert final.state == JobState.SUCCEEDED, final.reason
    assert [line.text for line in lines] == ["finished"]
