"""Whole-job restart on the local engine, with real supervisor and replica processes: one
replica fails, every replica is stopped at once and the whole job starts again."""

import os
from pathlib import Path

import pytest

from distrun.core.job import JobState
from distrun.engines.local.engine import LocalEngine

from ..reliability import helpers
from ..reliability.helpers import spec

pytestmark = pytest.mark.integration

WAIT = 90.0
ROLES = {"master": {"replicas": 1}, "worker": {"replicas": 2}}

# worker-1 fails in the first run; the others wait as ranks blocked in a collective would.
FAILS_ONCE = """
    import os, sys, time
    restart = int(os.environ["DISTRUN_RESTART"])
    replica = os.environ["DISTRUN_REPLICA"]
    print("run", restart, "checkpoints", os.environ["DISTRUN_CHECKPOINT_DIR"], flush=True)
    if restart == 0:
        if replica == "worker-1":
            time.sleep(0.5)
            sys.exit(3)
        time.sleep(600)
    print("done", replica, "port", os.environ["MASTER_PORT"], flush=True)
"""


async def test_one_failed_replica_restarts_every_replica_and_the_job_succeeds(
    local_engine: LocalEngine,
) -> None:
    job = await local_engine.submit(
        spec(FAILS_ONCE, framework="pytorch", roles=ROLES, max_restarts=2), "alice"
    )
    final, lines = await helpers.follow_to_end(local_engine, job, timeout=WAIT)

    assert final.state == JobState.SUCCEEDED, final.reason
    assert (final.attempt, final.max_restarts, final.restart_scope) == (2, 2, "job")
    assert [(r.name, r.state, r.restarts) for r in final.replicas] == [
        (name, JobState.SUCCEEDED, 1) for name in ("master-0", "worker-0", "worker-1")
    ]
    texts = [(line.replica, line.text) for line in lines]
    for name in ("master-0", "worker-0", "worker-1"):
        runs = [t.split()[1] for r, t in texts if r == name and t.startswith("run ")]
        assert runs == ["0", "1"], (name, texts)
        assert any(r == name and t.startswith(f"done {name}") for r, t in texts), texts
    restart_line = (
        "[distrun] restart 1/2 of the job: worker-1 failed (exit code 3); stopping every "
        "replica and starting them all again"
    )
    assert ("worker-1", restart_line) in texts
    assert ("master-0", "[distrun] stopped: worker-1 failed, the job restarts") in texts
    # Every run of every replica had the same checkpoint directory, under the job's own.
    checkpoints = {t.split()[3] for _, t in texts if t.startswith("run ")}
    assert checkpoints == {str((local_engine._jobs_dir / job.id / "checkpoints").resolve())}
    assert Path(checkpoints.pop()).is_dir()
    # The second run had fresh ports: the first run's may still be closing.
    ports = {t.split()[3] for _, t in texts if t.startswith("done ")}
    assert len(ports) == 1

    kinds = [(e.kind, e.attempt, e.replica) for e in final.timeline]
    assert kinds == [
        ("submitted", 1, None),
        ("started", 1, None),
        ("failed", 1, "worker-1"),
        ("restarting", 1, "worker-1"),
        ("started", 2, None),
        ("ended", 2, None),
    ], kinds
    failure = final.last_failure
    assert failure is not None
    assert (failure.replica, failure.exit_code, failure.signal, failure.oom) == (
        "worker-1",
        3,
        None,
        False,
    )
    assert final.to_json()["last_failure"]["replica"] == "worker-1"


async def test_a_peer_killed_by_a_signal_is_reported_with_the_signal(
    local_engine: LocalEngine,
) -> None:
    killed = FAILS_ONCE.replace("sys.exit(3)", "os.kill(os.getpid(), 9)")
    job = await local_engine.submit(
        spec(killed, framework="pytorch", roles=ROLES, restart_policy="OnFailure", backoff_limit=1),
        "alice",
    )
    final, _ = await helpers.follow_to_end(local_engine, job, timeout=WAIT)
    assert final.state == JobState.SUCCEEDED, final.reason
    failure = final.last_failure
    assert failure is not None
    assert (failure.replica, failure.exit_code, failure.signal) == ("worker-1", -9, "SIGKILL")
    assert failure.text.startswith("worker-1 failed: killed by SIGKILL")


async def test_the_job_fails_once_its_restarts_are_spent(local_engine: LocalEngine) -> None:
    always_fails = """
        import os, sys, time
        if os.environ["DISTRUN_REPLICA"] == "worker-0":
            sys.exit(4)
        time.sleep(600)
    """
    job = await local_engine.submit(
        spec(always_fails, framework="pytorch", roles=ROLES, restart="job", max_restarts=2),
        "alice",
    )
    final, _ = await helpers.follow_to_end(local_engine, job, timeout=WAIT)
    assert final.state == JobState.FAILED
    assert final.reason == "worker-0 failed: exit code 4"
    assert final.attempt == 3
    assert [e.kind for e in final.timeline].count("failed") == 3
    assert final.timeline[-1].kind == "ended"


async def test_restart_replica_restarts_only_the_failed_one(local_engine: LocalEngine) -> None:
    code = """
        import os, sys, time
        replica = os.environ["DISTRUN_REPLICA"]
        print("pid", replica, os.getpid(), flush=True)
        print("run", replica, os.environ["DISTRUN_RESTART"], flush=True)
        if replica == "worker-1":
            if not os.path.exists("failed-once"):
                open("failed-once", "w").close()
                sys.exit(3)
            open("second-run", "w").close()
        while not os.path.exists("second-run"):  # the others run on meanwhile
            time.sleep(0.05)
    """
    job = await local_engine.submit(
        spec(code, framework="pytorch", roles=ROLES, restart="replica", max_restarts=1), "alice"
    )
    final, lines = await helpers.follow_to_end(local_engine, job, timeout=WAIT)
    assert final.state == JobState.SUCCEEDED, final.reason
    assert final.attempt == 1 and final.restart_scope == "replica"
    assert [r.restarts for r in final.replicas] == [0, 0, 1]
    started = [line.text.split()[1] for line in lines if line.text.startswith("pid ")]
    assert sorted(started) == ["master-0", "worker-0", "worker-1", "worker-1"]
    # The job has one run: a replica restarted alone is in it (the Training Operator's 0 too).
    runs = {line.text.split(maxsplit=1)[1] for line in lines if line.text.startswith("run ")}
    assert runs == {"master-0 0", "worker-0 0", "worker-1 0"}


async def test_a_job_that_asks_for_no_restarts_fails_at_the_first_failure(
    local_engine: LocalEngine,
) -> None:
    job = await local_engine.submit(spec(FAILS_ONCE, framework="pytorch", roles=ROLES), "alice")
    final, _ = await helpers.follow_to_end(local_engine, job, timeout=WAIT)
    assert final.state == JobState.FAILED and final.attempt == 1
    assert (final.restart_scope, final.max_restarts) == (None, 0)
    assert os.environ.get("DISTRUN_RESTART") is None  # the server's own environment is untouched
