"""The local engine with real supervisor and replica processes (framework "generic")."""

import asyncio
import base64
import contextlib
import contextvars
import gc
import json
import os
import signal
import sys
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from distrun.core.errors import EngineError, LimitExceeded, NotFound, SpecError
from distrun.core.job import Job, JobState
from distrun.core.logs import JobUpdate, LogBatch, LogLine
from distrun.core.spec import Limits
from distrun.engines.local import capabilities
from distrun.engines.local import engine as engine_module
from distrun.engines.local.engine import LOST_REASON, LocalEngine
from distrun.engines.local.processes import process_start_time

from ..reliability import helpers
from ..reliability.helpers import spec

pytestmark = pytest.mark.integration

EngineFactory = Callable[..., LocalEngine]  # the make_local_engine fixture
WAIT = 60.0  # generous: the machine may be loaded


async def follow_to_end(
    engine: LocalEngine, job: Job, owner: str = "alice", **kwargs: Any
) -> tuple[Job, list[LogLine]]:
    return await helpers.follow_to_end(engine, job, owner, timeout=WAIT, **kwargs)


async def wait_for_lines(engine: LocalEngine, job: Job, count: int) -> list[LogLine]:
    return await helpers.wait_for_lines(engine, job, count, timeout=WAIT)


async def wait_until(check: Callable[[], Any], what: str) -> Any:
    return await helpers.wait_until(check, what, timeout=WAIT)


def gone(pid: int) -> bool:
    """True once `pid` no longer exists (or is a zombie nobody has reaped yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return process_start_time(pid) is None


def by_replica(lines: list[LogLine]) -> dict[str, list[LogLine]]:
    result: dict[str, list[LogLine]] = {}
    for line in lines:
        result.setdefault(line.replica, []).append(line)
    return result


def job_status(engine: LocalEngine, job: Job) -> dict[str, Any]:
    path = engine._jobs_dir / job.id / "status.json"
    return dict(json.loads(path.read_text()))


async def test_off_posix_the_engine_says_it_is_unavailable_and_refuses_jobs_in_words(
    local_engine: LocalEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    info = await local_engine.info()
    assert not info.available
    assert info.reason is not None and "POSIX" in info.reason and "win32" in info.reason
    with pytest.raises(EngineError, match="POSIX"):
        await local_engine.submit(spec("print('hi')"), "alice")
    assert await local_engine.list_jobs("alice") == []


async def test_the_engine_says_which_path_each_capability_takes(local_engine: LocalEngine) -> None:
    """Linux's path where the capability works, the portable one where it does not or where
    DISTRUN_LOCAL_PORTABLE forces it (CI runs this tier both ways)."""
    info = await local_engine.info()
    assert info.available
    expected = capabilities.detect().paths()
    assert info.options["process_paths"] == expected
    forced = capabilities.forced_portable(os.environ.get(capabilities.FORCE_VARIABLE))
    assert {name for name, path in expected.items() if path == "portable"} >= forced


async def test_on_linux_it_is_available(local_engine: LocalEngine) -> None:
    assert (await local_engine.info()).available


async def test_multi_replica_job_succeeds_and_every_line_arrives_with_gap_free_seqs(
    local_engine: LocalEngine,
) -> None:
    code = """
        import os
        for i in range(1500):
            print(os.environ["DISTRUN_REPLICA"], i)
    """
    job = await local_engine.submit(spec(code, replicas=3), "alice")
    assert job.state == JobState.PENDING and job.owner == "alice"
    final, lines = await follow_to_end(local_engine, job)
    assert final.state == JobState.SUCCEEDED, final.reason
    assert [(r.name, r.state, r.exit_code) for r in final.replicas] == [
        (f"worker-{i}", JobState.SUCCEEDED, 0) for i in range(3)
    ]
    per_replica = by_replica(lines)
    assert sorted(per_replica) == ["worker-0", "worker-1", "worker-2"]
    for name, replica_lines in per_replica.items():
        assert [line.seq for line in replica_lines] == list(range(1500))
        assert [line.text for line in replica_lines] == [f"{name} {i}" for i in range(1500)]
    assert final.finished_at is not None and final.started_at is not None


async def test_logs_are_readable_from_any_offset_and_per_replica(
    local_engine: LocalEngine,
) -> None:
    code = """
        import os
        for i in range(3000):
            print(os.environ["DISTRUN_REPLICA"], i)
    """
    job = await local_engine.submit(spec(code, replicas=2), "alice")
    await follow_to_end(local_engine, job)
    lines = await local_engine.read_logs(
        job.id, "alice", since={"worker-1": 2047}, replicas={"worker-1"}, limit=3
    )
    assert [(line.replica, line.seq, line.text) for line in lines] == [
        ("worker-1", seq, f"worker-1 {seq}") for seq in (2047, 2048, 2049)
    ]
    both = await local_engine.read_logs(job.id, "alice", since={"worker-0": 2999, "worker-1": 2999})
    assert sorted((line.replica, line.seq) for line in both) == [
        ("worker-0", 2999),
        ("worker-1", 2999),
    ]
    merged = await local_engine.read_logs(job.id, "alice", limit=6000)
    assert len(merged) == 6000
    assert [line.time for line in merged] == sorted(line.time for line in merged)
    with pytest.raises(SpecError, match="no replica worker-7"):
        await local_engine.read_logs(job.id, "alice", replicas={"worker-7"})
    with pytest.raises(SpecError, match="seq >= 0"):
        await local_engine.read_logs(job.id, "alice", since={"worker-0": -1})


async def test_partial_lines_invalid_utf8_long_lines_and_ansi_codes_survive(
    local_engine: LocalEngine,
) -> None:
    code = """
        import sys, time
        out = sys.stdout.buffer
        out.write(b"part"); out.flush(); time.sleep(0.3)
        out.write(b"ial\\n")
        out.write(b"bad \\xff\\xfe bytes\\n")
        out.write(b"x" * (1024 * 1024) + b"\\n")
        out.write(b"\\x1b[32mgreen\\x1b[0m\\r50%\\r100%\\n")
        out.flush()
        sys.stderr.write("to stderr\\n"); sys.stderr.flush()
        out.write(b"no newline at the end")
    """
    job = await local_engine.submit(spec(code), "alice")
    final, lines = await follow_to_end(local_engine, job)
    assert final.state == JobState.SUCCEEDED, final.reason
    assert [line.text for line in lines] == [
        "partial",
        "bad \ufffd\ufffd bytes",
        "x" * (1024 * 1024),
        "\x1b[32mgreen\x1b[0m\r50%\r100%",
        "to stderr",
        "no newline at the end",
    ]
    assert [line.seq for line in lines] == list(range(6))


async def test_a_line_over_max_log_line_bytes_is_split(make_local_engine: EngineFactory) -> None:
    engine = make_local_engine(limits=Limits(max_log_line_bytes=1000))
    job = await engine.submit(spec("print('y' * 2500)"), "alice")
    _, lines = await follow_to_end(engine, job)
    assert [len(line.text) for line in lines] == [1000, 1000, 500]


async def test_a_crashing_replica_fails_the_job_with_its_name_exit_code_and_last_lines(
    local_engine: LocalEngine,
) -> None:
    code = """
        import os, sys, time
        if os.environ["DISTRUN_REPLICA"] == "worker-1":
            for i in range(30):
                print("step", i)
            sys.exit(3)
        print("waiting", flush=True)
        time.sleep(120)
    """
    job = await local_engine.submit(spec(code, replicas=2), "alice")
    final, _ = await follow_to_end(local_engine, job)
    assert final.state == JobState.FAILED
    assert final.failed_replica == "worker-1"
    assert final.reason == "worker-1 failed: exit code 3"
    assert final.last_lines == [f"step {i}" for i in range(10, 30)]
    survivor, crashed = final.replicas
    assert (crashed.state, crashed.exit_code) == (JobState.FAILED, 3)
    assert survivor.state == JobState.CANCELLED
    assert survivor.reason == "stopped because worker-1 failed"
    assert survivor.exit_code == -signal.SIGTERM
    assert all(gone(pid) for pid in job_status(local_engine, job)["pids"].values())


async def test_a_replica_killed_by_sigkill_is_reported_as_such(local_engine: LocalEngine) -> None:
    code = """
        import os, signal
        print("about to be killed", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    """
    job = await local_engine.submit(spec(code), "alice")
    final, _ = await follow_to_end(local_engine, job)
    assert final.state == JobState.FAILED
    assert final.reason == "worker-0 failed: killed by SIGKILL (out of memory?)"
    assert final.replicas[0].exit_code == -signal.SIGKILL
    assert final.last_lines == ["about to be killed"]


async def test_on_failure_restarts_the_replica_and_its_seqs_continue(
    local_engine: LocalEngine,
) -> None:
    code = """
        import pathlib, sys
        attempts = pathlib.Path("attempts")
        attempt = len(attempts.read_text()) if attempts.exists() else 0
        attempts.write_text("x" * (attempt + 1))
        print("attempt", attempt)
        sys.exit(0 if attempt == 2 else 1)
    """
    job = await local_engine.submit(
        spec(code, restart_policy="OnFailure", backoff_limit=3), "alice"
    )
    final, lines = await follow_to_end(local_engine, job)
    assert final.state == JobState.SUCCEEDED, final.reason
    assert final.replicas[0].restarts == 2
    assert [line.seq for line in lines] == list(range(5))
    texts = [line.text for line in lines]
    assert texts[0::2] == ["attempt 0", "attempt 1", "attempt 2"]
    assert texts[1] == "[distrun] restarting worker-0 (restart 1/3 of the job) after exit code 1"
    assert texts[3].startswith("[distrun] restarting worker-0 (restart 2/3")


async def test_the_job_fails_once_its_backoff_limit_is_spent(local_engine: LocalEngine) -> None:
    job = await local_engine.submit(
        spec("raise SystemExit(5)", restart_policy="Always", backoff_limit=1), "alice"
    )
    final, lines = await follow_to_end(local_engine, job)
    assert final.state == JobState.FAILED
    assert final.reason == "worker-0 failed: exit code 5"
    assert final.replicas[0].restarts == 1
    assert sum(line.text.startswith("[distrun] restarting") for line in lines) == 1


async def test_exit_code_policy_restarts_signals_but_not_permanent_codes(
    local_engine: LocalEngine,
) -> None:
    killed_once = """
        import os, pathlib, signal
        marker = pathlib.Path("killed-once")
        if not marker.exists():
            marker.write_text("")
            os.kill(os.getpid(), signal.SIGKILL)
        print("second attempt")
    """
    job = await local_engine.submit(
        spec(killed_once, restart_policy="ExitCode", backoff_limit=2), "alice"
    )
    final, _ = await follow_to_end(local_engine, job)
    assert (final.state, final.replicas[0].restarts) == (JobState.SUCCEEDED, 1)

    permanent = await local_engine.submit(
        spec("raise SystemExit(2)", restart_policy="ExitCode", backoff_limit=2), "alice"
    )
    final, _ = await follow_to_end(local_engine, permanent)
    assert (final.state, final.replicas[0].restarts) == (JobState.FAILED, 0)


# A replica failing every attempt at backoff_limit 2: the attempts each engine must give
# (the cluster engines' tier tests hold them to the same: tests/k8s/test_engines_on_real_*).
ATTEMPTS = {("Never", 1): 1, ("OnFailure", 1): 3, ("ExitCode", 1): 1, ("ExitCode", 137): 3}


@pytest.mark.parametrize(("policy", "code"), list(ATTEMPTS))
async def test_a_replica_failing_every_attempt_gets_as_many_attempts_as_its_policy_allows(
    local_engine: LocalEngine, policy: str, code: int
) -> None:
    failing = f"""
        import pathlib, sys, time
        attempts = pathlib.Path("attempts")
        attempts.write_text((attempts.read_text() if attempts.exists() else "") + "x")
        time.sleep(1)  # each attempt runs a while, for a follower to be told of it
        sys.exit({code})
    """
    job = await local_engine.submit(spec(failing, restart_policy=policy, backoff_limit=2), "alice")
    running: set[int] = set()  # the replica's restarts in the updates of a running job

    def seen(update: Job) -> None:
        if update.state == JobState.RUNNING:
            running.add(update.replicas[0].restarts)

    final, lines = await follow_to_end(local_engine, job, on_update=seen)
    restarts = sum(line.text.startswith("[distrun] restarting") for line in lines)
    assert (final.state, restarts + 1) == (JobState.FAILED, ATTEMPTS[policy, code])
    assert running == set(range(restarts + 1))  # each restart shown while the job ran
    assert final.replicas[0].restarts == restarts
    assert (await local_engine.get_job(job.id, "alice")).replicas[0].restarts == restarts
    assert final.reason == f"worker-0 failed: exit code {code}"


async def test_a_job_past_its_deadline_fails_with_deadline_exceeded(
    local_engine: LocalEngine,
) -> None:
    code = "import time\nprint('started', flush=True)\ntime.sleep(120)\n"
    job = await local_engine.submit(spec(code, replicas=2, active_deadline_seconds=1), "alice")
    final, _ = await follow_to_end(local_engine, job)
    assert final.state == JobState.FAILED
    assert final.reason is not None and final.reason.startswith("DeadlineExceeded")
    assert all(replica.state == JobState.CANCELLED for replica in final.replicas)


async def test_after_success_the_other_replicas_may_finish_before_they_are_stopped(
    make_local_engine: EngineFactory,
) -> None:
    code = """
        import os, time
        replica = os.environ["DISTRUN_REPLICA"]
        if replica == "worker-0":
            time.sleep(0.3)  # the master is done: a worker's last lines come a moment later
            print("final metrics of worker-0", flush=True)
        elif replica == "worker-1":
            print("serving", flush=True)
            time.sleep(120)  # never ends on its own: stopped after the drain
    """
    engine = make_local_engine(grace_seconds=5.0)
    pytorch = spec(
        code, framework="pytorch", roles={"master": {"replicas": 1}, "worker": {"replicas": 2}}
    )
    job = await engine.submit(pytorch, "alice")
    final, lines = await follow_to_end(engine, job)
    assert final.state == JobState.SUCCEEDED, final.reason
    assert "final metrics of worker-0" in [line.text for line in lines]
    states = {r.name: (r.state, r.exit_code, r.reason) for r in final.replicas}
    assert states["master-0"] == (JobState.SUCCEEDED, 0, None)
    assert states["worker-0"] == (JobState.SUCCEEDED, 0, None), "it ended on its own"
    assert states["worker-1"] == (JobState.SUCCEEDED, -signal.SIGTERM, "stopped: the job succeeded")


async def test_cancel_kills_every_replica_process_group(local_engine: LocalEngine) -> None:
    code = """
        import os, signal, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        if os.environ["DISTRUN_REPLICA"] == "worker-1":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # needs the SIGKILL after the grace
        print("child", child.pid, flush=True)
        time.sleep(120)
    """
    job = await local_engine.submit(spec(code, replicas=2), "alice")
    lines = await wait_for_lines(local_engine, job, 2)
    children = [int(line.text.split()[1]) for line in lines]
    replicas = list(job_status(local_engine, job)["pids"].values())
    assert not any(gone(pid) for pid in children + replicas)

    cancelled = await local_engine.cancel(job.id, "alice")
    assert cancelled.state == JobState.CANCELLED
    assert cancelled.reason == "cancelled by the user"
    assert all(replica.state == JobState.CANCELLED for replica in cancelled.replicas)
    # worker-1 ignores SIGTERM, so the supervisor escalates to SIGKILL after the grace period
    exit_codes = [replica.exit_code for replica in cancelled.replicas]
    assert exit_codes == [-signal.SIGTERM, -signal.SIGKILL]
    await wait_until(lambda: all(gone(pid) for pid in children + replicas), "all processes end")
    again = await local_engine.cancel(job.id, "alice")
    assert again.state == JobState.CANCELLED and again.finished_at == cancelled.finished_at


async def test_cancel_kills_a_process_that_left_its_replicas_process_group_with_setsid(
    local_engine: LocalEngine,
) -> None:
    """A process in a session of its own escapes every process-group signal: it is found by
    the job's mark in its environment (/proc on Linux, psutil on the portable path)."""
    code = """
        import subprocess, sys, time
        escaped = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True
        )
        print("escaped", escaped.pid, flush=True)
        time.sleep(120)
    """
    job = await local_engine.submit(spec(code), "alice")
    [line] = await wait_for_lines(local_engine, job, 1)
    escaped = int(line.text.split()[1])
    assert os.getsid(escaped) == escaped  # a session of its own: no group signal reaches it
    await local_engine.cancel(job.id, "alice")
    await wait_until(lambda: gone(escaped), "the escaped process ends")


@pytest.mark.parametrize("nice", [10, 0])
async def test_replicas_run_at_the_engines_niceness_in_the_supervisors_scheduling_group(
    make_local_engine: EngineFactory, nice: int
) -> None:
    code = """
        import os
        try:
            with open("/proc/self/autogroup") as autogroup:
                group = autogroup.read().strip()
        except OSError:
            group = "none"
        print(os.getpriority(os.PRIO_PROCESS, 0), os.getpgid(0), os.getsid(0), group, flush=True)
    """
    engine = make_local_engine(nice=nice)
    job = await engine.submit(spec(code, replicas=2), "alice")
    final, lines = await follow_to_end(engine, job)
    assert final.state == JobState.SUCCEEDED, final.reason
    supervisor = json.loads((engine._files(job.id).supervisor).read_text())["pid"]
    pids = job_status(engine, job)["pids"]
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    for line in lines:
        priority, group, session, autogroup = line.text.split(" ", 3)
        assert int(priority) == max(nice, ours), line
        assert int(group) == pids[line.replica], "each replica leads its own process group"
        assert int(session) == supervisor, "in the supervisor's session, not one of its own"
        if autogroup != "none" and nice:  # Linux's autogroup scheduler weighs sessions
            assert autogroup.endswith(f"nice {nice}"), autogroup


async def test_a_restarted_server_sees_the_job_follows_its_logs_and_can_cancel_it(
    make_local_engine: EngineFactory,
) -> None:
    code = """
        import time
        for i in range(100000):
            print("tick", i, flush=True)
            time.sleep(0.02)
    """
    first, second = make_local_engine(), make_local_engine()
    job = await first.submit(spec(code), "alice")
    seen = await wait_for_lines(first, job, 5)
    await first.close()

    assert [j.id for j in await second.list_jobs("alice")] == [job.id]
    resumed: list[LogLine] = []
    async for event in second.follow(job.id, "alice", since={"worker-0": 5}):
        if isinstance(event, LogBatch):
            resumed += event.lines
            if len(resumed) >= 10:
                break
    assert [line.seq for line in resumed[:10]] == list(range(5, 15))
    assert seen[4].text == "tick 4" and resumed[0].text == "tick 5"

    cancelled = await second.cancel(job.id, "alice")
    assert cancelled.state == JobState.CANCELLED
    final, lines = await follow_to_end(second, job, since={"worker-0": 15})
    assert final.state == JobState.CANCELLED
    assert [line.seq for line in lines] == list(range(15, 15 + len(lines)))


async def test_killing_the_supervisor_kills_its_replicas_and_the_job_is_reported_lost(
    local_engine: LocalEngine,
) -> None:
    code = "import time\nprint('up', flush=True)\ntime.sleep(120)\n"
    job = await local_engine.submit(spec(code, replicas=2), "alice")
    await wait_for_lines(local_engine, job, 2)
    replicas = list(job_status(local_engine, job)["pids"].values())
    supervisor = json.loads((local_engine._jobs_dir / job.id / "supervisor.json").read_text())
    os.kill(supervisor["pid"], signal.SIGKILL)

    await wait_until(lambda: all(gone(pid) for pid in replicas), "the replicas die with it")
    lost = await local_engine.get_job(job.id, "alice")
    assert lost.state == JobState.FAILED
    assert lost.reason == LOST_REASON
    assert all(replica.state == JobState.FAILED for replica in lost.replicas)
    final, lines = await follow_to_end(local_engine, job)
    assert final.state == JobState.FAILED and [line.text for line in lines] == ["up", "up"]


async def test_other_owners_get_not_found_for_every_operation(local_engine: LocalEngine) -> None:
    job = await local_engine.submit(spec("print('secret')"), "alice")
    await follow_to_end(local_engine, job)

    async def follow_as_bob() -> None:
        async for _ in local_engine.follow(job.id, "bob"):
            pass

    operations = [
        local_engine.get_job(job.id, "bob"),
        local_engine.cancel(job.id, "bob"),
        local_engine.delete(job.id, "bob"),
        local_engine.read_logs(job.id, "bob"),
        follow_as_bob(),
    ]
    for operation in operations:
        with pytest.raises(NotFound, match=f"^no job '{job.id}'$"):
            await operation
    assert await local_engine.list_jobs("bob") == []
    assert (await local_engine.get_job(job.id, "alice")).state == JobState.SUCCEEDED
    with pytest.raises(NotFound, match="^no job 'job-zzzzz'$"):
        await local_engine.get_job("job-zzzzz", "bob")
    for bad_id in ("../../etc", "a/b", "", "A-UPPER", "x" * 41):
        with pytest.raises(NotFound):
            await local_engine.get_job(bad_id, "alice")


async def test_follow_delivers_every_line_exactly_once_to_a_slow_consumer(
    local_engine: LocalEngine,
) -> None:
    code = """
        import os
        for i in range(400):
            print(os.environ["DISTRUN_REPLICA"], i)
    """
    job = await local_engine.submit(spec(code, replicas=2), "alice")
    lines: list[LogLine] = []
    updates: list[JobState] = []
    async for event in local_engine.follow(job.id, "alice", max_batch=7):
        if isinstance(event, LogBatch):
            assert 0 < len(event.lines) <= 7
            lines += event.lines
            await asyncio.sleep(0.005)  # a slow consumer
        else:
            assert isinstance(event, JobUpdate)
            updates.append(event.job.state)
    assert updates[-1] == JobState.SUCCEEDED
    for name, replica_lines in by_replica(lines).items():
        assert [line.text for line in replica_lines] == [f"{name} {i}" for i in range(400)]
    assert len(lines) == 800


async def test_many_followers_share_one_poller(local_engine: LocalEngine) -> None:
    code = "for i in range(200):\n    print(i)\n"
    job = await local_engine.submit(spec(code), "alice")
    results = await asyncio.gather(*(follow_to_end(local_engine, job) for _ in range(20)))
    assert all([line.seq for line in lines] == list(range(200)) for _, lines in results)
    assert local_engine._watchers == {}  # the last follower stopped it


# Stands for jupyter_server's CallContext, which holds the request handler of each follower.
_FOLLOWERS_REQUEST: contextvars.ContextVar[object] = contextvars.ContextVar("followers_request")


class _Request:
    pass


async def test_the_shared_watcher_keeps_nothing_of_the_follower_that_started_it(
    local_engine: LocalEngine,
) -> None:
    code = "import time\nprint('up', flush=True)\ntime.sleep(60)\n"
    job = await local_engine.submit(spec(code), "alice")
    second_joined = asyncio.Event()

    async def first_follower(request: _Request) -> None:
        _FOLLOWERS_REQUEST.set(request)
        async with contextlib.aclosing(local_engine.follow(job.id, "alice")) as events:
            async for event in events:
                if isinstance(event, LogBatch):
                    await second_joined.wait()
                    return  # stops following; the watcher goes on for the second follower

    request = _Request()
    gone_request = weakref.ref(request)
    first = asyncio.create_task(first_follower(request))
    del request
    await wait_until(lambda: local_engine._watchers, "the first follower's watcher")
    second = asyncio.create_task(follow_to_end(local_engine, job))
    await wait_until(lambda: local_engine._watchers[job.id].followers == 2, "a second follower")
    second_joined.set()
    await first
    del first
    await asyncio.sleep(0.1)  # callbacks of the first follower's last steps run
    gc.collect()
    assert gone_request() is None, "the watcher's tasks still carry the first follower's context"
    assert job.id in local_engine._watchers
    await local_engine.cancel(job.id, "alice")
    await second


async def test_unfinished_jobs_per_user_are_limited(make_local_engine: EngineFactory) -> None:
    engine = make_local_engine(limits=Limits(max_jobs_per_user=1))
    job = await engine.submit(spec("import time; time.sleep(120)"), "alice")
    with pytest.raises(LimitExceeded, match="1 unfinished jobs, the limit is 1"):
        await engine.submit(spec("print(1)"), "alice")
    other = await engine.submit(spec("print(1)"), "bob")
    assert other.owner == "bob"
    await engine.cancel(job.id, "alice")
    assert (await engine.submit(spec("print(1)"), "alice")).owner == "alice"


async def test_a_submit_reads_the_unfinished_jobs_not_the_whole_history(
    make_local_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_local_engine(limits=Limits(max_jobs_per_user=2))
    for _ in range(6):
        await follow_to_end(engine, await engine.submit(spec("print(1)"), "alice"))
    running = await engine.submit(spec("import time; time.sleep(120)"), "alice")
    await engine.submit(spec("print(1)"), "alice")  # reads each finished job's status once
    read: list[str] = []
    real_read_json = engine_module.read_json
    monkeypatch.setattr(
        engine_module,
        "read_json",
        lambda path: read.append(path.parent.name) or real_read_json(path),
    )
    with pytest.raises(LimitExceeded, match="2 unfinished jobs"):  # counted from two reads
        await engine.submit(spec("print(1)"), "alice")
    assert running.id in read and len(set(read)) <= 2, read
    await engine.cancel(running.id, "alice")  # over now: it counts no more
    assert (await engine.submit(spec("print(1)"), "alice")).owner == "alice"


async def test_delete_cancels_a_running_job_and_forgets_it(local_engine: LocalEngine) -> None:
    job = await local_engine.submit(
        spec("import time; print('on', flush=True); time.sleep(120)"), "alice"
    )
    await wait_for_lines(local_engine, job, 1)
    replicas = list(job_status(local_engine, job)["pids"].values())
    await local_engine.delete(job.id, "alice")
    assert all(gone(pid) for pid in replicas)
    assert await local_engine.list_jobs("alice") == []
    with pytest.raises(NotFound):
        await local_engine.get_job(job.id, "alice")


async def test_code_with_magics_runs_under_ipython_next_to_shipped_files(
    local_engine: LocalEngine,
) -> None:
    code = """
        data = open("data/input.txt").read().strip()
        !echo from-the-shell
        print("read", data)
    """
    files = {"data/input.txt": base64.b64encode(b"hello\n").decode()}
    job = await local_engine.submit(spec(code, files=files), "alice")
    final, lines = await follow_to_end(local_engine, job)
    assert final.state == JobState.SUCCEEDED, final.reason
    assert [line.text for line in lines] == ["from-the-shell", "read hello"]


async def test_a_missing_replica_python_fails_the_job_with_a_clear_reason(
    make_local_engine: EngineFactory,
) -> None:
    engine = make_local_engine(python="/nonexistent/python3")
    job = await engine.submit(spec("print(1)", replicas=2), "alice")
    final, _ = await follow_to_end(engine, job)
    assert final.state == JobState.FAILED
    assert final.failed_replica == "worker-0"
    assert final.reason is not None and "could not start" in final.reason
    assert "/nonexistent/python3" in final.reason


async def test_a_cell_with_a_header_and_body_magics_keeps_traceback_line_numbers(
    local_engine: LocalEngine,
) -> None:
    from distrun.core.header import spec_from_cell

    cell = "%%distrun --framework generic --workers 1\n%time x = 1\n\n1 / 0\n"
    job_spec, _ = spec_from_cell(cell)
    job = await local_engine.submit(job_spec, "alice")
    final, lines = await follow_to_end(local_engine, job)
    assert final.state == JobState.FAILED
    text = "\n".join(line.text for line in lines)
    assert "Wall time" in text  # the body's %time ran under IPython
    assert "ZeroDivisionError" in text
    assert "line 4" in text or "----> 4 " in text  # the cell's own line number
