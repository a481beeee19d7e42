"""The local engine's supervisor started ahead of its job (warm_supervisor.py), with real
processes: the next job runs in the supervisor that was waiting, at the replicas' niceness; a
waiting supervisor that died costs nothing but the wait; closing the engine ends the waiting
one, never a job; and a job a warm supervisor runs outlives the engine as any job does."""

import json
import os
import signal
from pathlib import Path

import pytest

from distrun.core.job import JobState
from distrun.engines.local.engine import LocalEngine

from ..reliability import helpers
from ..reliability.helpers import spec
from .test_local_engine import EngineFactory, follow_to_end, gone, wait_until

pytestmark = pytest.mark.integration


def waiting_supervisors(engine: LocalEngine) -> list[int]:
    """The pids of the engine's supervisors waiting for a job."""
    warm = engine._warm
    assert warm is not None
    waiting = warm._waiting
    if waiting is None or waiting.process.poll() is not None:
        return []
    return [waiting.process.pid]


def supervisor_pid(engine: LocalEngine, job_id: str) -> int:
    record = json.loads((engine._jobs_dir / job_id / "supervisor.json").read_text())
    return int(record["pid"])


def cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


async def test_the_next_job_runs_in_the_supervisor_that_was_waiting(
    local_engine: LocalEngine,
) -> None:
    await local_engine.prepare()
    (waiting,) = waiting_supervisors(local_engine)
    assert "--wait" in cmdline(waiting)
    await wait_until(
        lambda: os.getpriority(os.PRIO_PROCESS, waiting) >= local_engine.nice,
        "it waits at the replicas' niceness",
    )
    job = await local_engine.submit(spec("print('hello', flush=True)", replicas=2), "alice")
    assert supervisor_pid(local_engine, job.id) == waiting
    done, lines = await follow_to_end(local_engine, job)
    assert done.state == JobState.SUCCEEDED
    assert sorted(line.text for line in lines) == ["hello", "hello"]
    log = (local_engine._jobs_dir / job.id / "supervisor.log").stat()
    assert log.st_mode & 0o777 == 0o600
    # The next one waits again, shortly after.
    (again,) = await wait_until(lambda: waiting_supervisors(local_engine), "a new one waits")
    assert again != waiting


async def test_a_waiting_supervisor_that_died_is_replaced_by_a_cold_start(
    local_engine: LocalEngine,
) -> None:
    await local_engine.prepare()
    (waiting,) = waiting_supervisors(local_engine)
    os.kill(waiting, signal.SIGKILL)
    await wait_until(lambda: gone(waiting), "the waiting supervisor is gone")
    job = await local_engine.submit(spec("print('cold', flush=True)"), "alice")
    assert supervisor_pid(local_engine, job.id) != waiting
    done, lines = await follow_to_end(local_engine, job)
    assert (done.state, [line.text for line in lines]) == (JobState.SUCCEEDED, ["cold"])


async def test_closing_the_engine_ends_the_waiting_supervisor_but_never_a_job(
    make_local_engine: EngineFactory,
) -> None:
    engine = make_local_engine()
    await engine.prepare()
    job = await engine.submit(
        spec("import time\nprint('up', flush=True)\ntime.sleep(2)\nprint('done', flush=True)"),
        "alice",
    )
    running = supervisor_pid(engine, job.id)
    (waiting,) = await wait_until(lambda: waiting_supervisors(engine), "the next one waits")
    await engine.close()
    assert gone(waiting)
    assert not gone(running), "the job's supervisor outlives the engine"
    later = make_local_engine(warm_supervisor=False)
    done, lines = await helpers.follow_to_end(later, job, "alice")
    assert (done.state, [line.text for line in lines]) == (JobState.SUCCEEDED, ["up", "done"])


async def test_a_waiting_supervisor_starts_every_replica_of_a_wide_job(
    local_engine: LocalEngine,
) -> None:
    """It starts the replicas from its event loop, reading the first ones' output meanwhile."""
    await local_engine.prepare()
    (waiting,) = waiting_supervisors(local_engine)
    code = "import os\nprint('rank', os.environ['RANK'], flush=True)"
    job = await local_engine.submit(spec(code, replicas=8), "alice")
    assert supervisor_pid(local_engine, job.id) == waiting
    done, lines = await follow_to_end(local_engine, job)
    assert done.state == JobState.SUCCEEDED
    assert sorted(line.text for line in lines) == sorted(f"rank {rank}" for rank in range(8))
    assert [replica.state for replica in done.replicas] == [JobState.SUCCEEDED] * 8


async def test_a_replica_a_waiting_supervisor_cannot_start_fails_the_job_clearly(
    make_local_engine: EngineFactory,
) -> None:
    engine = make_local_engine(python="/nonexistent/python3")
    await engine.prepare()
    (waiting,) = waiting_supervisors(engine)
    job = await engine.submit(spec("print(1)", replicas=3), "alice")
    assert supervisor_pid(engine, job.id) == waiting
    final, _ = await follow_to_end(engine, job)
    assert final.state == JobState.FAILED
    assert final.failed_replica == "worker-0"
    assert final.reason is not None and "could not start" in final.reason
    assert "/nonexistent/python3" in final.reason
