"""Usage per replica on the local engine, with real replica processes: what the supervisor
samples (CPU, resident memory), how a replica over its memory limit ends, and that the series
outlives the server (a new engine over the same state directory reads it)."""

import re
import signal
import statistics
from contextlib import aclosing
from pathlib import Path

import pytest

from distrun.client.console import job_details
from distrun.core.job import JobState
from distrun.core.usage import UsageReport, UsageSample, peak_rss
from distrun.engines.local.engine import NOT_SAMPLED_REASON, LocalEngine
from distrun.engines.protocol import UsageEngine

from ..conftest import EngineFactory
from ..reliability.helpers import follow_to_end, spec

pytestmark = pytest.mark.integration

MiB = 1024 * 1024
STEP = 64 * MiB


def series(report: UsageReport, replica: str) -> list[tuple[float, float, int]]:
    """(time, cpu_percent, rss_bytes) of each sample of `replica`."""
    return [
        (s.time, s.replicas[replica].cpu_percent, s.replicas[replica].rss_bytes)
        for s in report.samples
        if replica in s.replicas
    ]


def printed_times(lines: list[str], prefix: str) -> list[float]:
    return [float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(prefix)]


async def test_a_replica_allocating_memory_in_steps_shows_its_rss_rising_while_each_step_holds(
    local_engine: LocalEngine,
) -> None:
    # Each step is held 2 s: the series must show it before the next one (a sample a second).
    code = f"""
        import time
        hoard = []
        print("start", time.time(), flush=True)
        time.sleep(2.0)
        for step in range(1, 5):
            hoard.append(b"x" * {STEP})  # written, so resident
            print("step", time.time(), flush=True)
            time.sleep(2.0)
        print("end", time.time(), flush=True)
    """
    assert isinstance(local_engine, UsageEngine)
    job = await local_engine.submit(spec(code), "alice")
    final, lines = await follow_to_end(local_engine, job)
    assert final.state == JobState.SUCCEEDED, final.reason
    report = await local_engine.read_usage(job.id, "alice")
    assert report.available and report.interval_seconds == 1.0
    assert [s.seq for s in report.samples] == list(range(len(report.samples)))
    texts = [line.text for line in lines]
    steps = printed_times(texts, "step ")
    ends = [*steps[1:], *printed_times(texts, "end ")]
    rss = series(report, "worker-0")
    before = [r for t, _, r in rss if t < steps[0]]
    assert before, f"no sample before the first step: {rss}"
    base = min(before)
    lags = []
    for k, (held_from, held_to) in enumerate(zip(steps, ends, strict=True), start=1):
        level = base + k * STEP * 0.9
        seen = [t for t, _, r in rss if held_from <= t <= held_to and r >= level]
        assert seen, f"step {k} (+{k * 64} MiB) not seen while it held: {rss}"
        lags.append(seen[0] - held_from)
    print(f"\nRSS seen {', '.join(f'{lag:.2f}' for lag in lags)} s after each step")


async def test_a_cpu_bound_replica_beside_an_idle_one_shows_about_100_against_about_0_percent(
    make_local_engine: EngineFactory,
) -> None:
    # The busy replica prints the share of a core it got, by its own clock: the machine is
    # shared, so that share (not 100 %) is what the samples must show.
    code = """
        import os, time
        start, cpu = time.time(), time.process_time()
        if os.environ["DISTRUN_REPLICA"] == "worker-0":
            while time.time() < start + 6:
                pass
        else:
            time.sleep(6)
        print("share", (time.process_time() - cpu) / (time.time() - start), flush=True)
    """
    engine = make_local_engine(nice=0)  # beside the rest of the machine, not below it
    job = await engine.submit(spec(code, replicas=2), "alice")
    final, lines = await follow_to_end(engine, job)
    assert final.state == JobState.SUCCEEDED, final.reason
    report = await engine.read_usage(job.id, "alice")
    # The first sample of a process says 0 %: it is what later ones are measured against.
    busy = [cpu for _, cpu, _ in series(report, "worker-0")[1:]]
    idle = [cpu for _, cpu, _ in series(report, "worker-1")[1:]]
    assert len(busy) >= 3 and len(idle) >= 3, report.samples
    share = {line.replica: float(line.text.split()[1]) * 100 for line in lines}
    print(
        f"\nsampled: busy {statistics.mean(busy):.0f} %, idle {statistics.mean(idle):.0f} %; "
        f"own clocks: busy {share['worker-0']:.0f} %, idle {share['worker-1']:.0f} %"
    )
    # Generous bounds: samples cover most but not all of the run, on a loaded machine.
    assert abs(statistics.mean(busy) - share["worker-0"]) <= 15 + 0.25 * share["worker-0"]
    assert max(idle) <= 5
    assert statistics.mean(busy) >= 10 * max(1.0, statistics.mean(idle))


async def test_a_replica_over_its_memory_limit_is_killed_and_reported_out_of_memory_with_its_peak(
    local_engine: LocalEngine,
) -> None:
    code = f"""
        import time
        hoard = []
        while True:
            hoard.append(b"x" * {16 * MiB})
            time.sleep(0.1)
    """
    roles = {"worker": {"replicas": 1, "resources": {"memory": "200Mi"}}}
    job = await local_engine.submit(spec(code, roles=roles), "alice")
    final, lines = await follow_to_end(local_engine, job)
    assert final.state == JobState.FAILED
    assert final.reason is not None
    # A loaded machine may sample late, so the peak may be far past the limit, in GiB.
    match = re.fullmatch(
        r"worker-0 killed: out of memory \(peak ([\d.]+) (MiB|GiB) of a 200 MiB limit\)",
        final.reason,
    )
    assert match, final.reason
    assert float(match[1]) * (1024 if match[2] == "GiB" else 1) >= 200
    replica = final.replicas[0]
    assert replica.exit_code == -signal.SIGKILL
    assert replica.reason == final.reason.removeprefix("worker-0 ")
    failure = final.last_failure
    assert failure is not None and failure.oom and failure.signal == "SIGKILL"
    assert any("over its memory limit of 200 MiB: killing it" in line.text for line in lines)
    report = await local_engine.read_usage(job.id, "alice")
    assert report.memory_limits == {"worker-0": 200 * MiB}
    peak = peak_rss(report.samples, "worker-0")
    assert peak is not None and peak > 200 * MiB


async def test_the_series_is_resumable_and_outlives_the_engine_that_followed_it(
    make_local_engine: EngineFactory,
) -> None:
    first = make_local_engine()
    job = await first.submit(spec("import time; time.sleep(3.5)"), "alice")
    followed: list[UsageSample] = []
    async with aclosing(first.follow_usage(job.id, "alice")) as updates:
        async for update in updates:
            followed.extend(update.samples)
    assert len(followed) >= 2
    assert [s.seq for s in followed] == list(range(len(followed)))
    await first.close()
    second = make_local_engine()  # a restarted server: the same state directory
    again = await second.read_usage(job.id, "alice")
    assert again.samples == followed
    resumed = await second.read_usage(job.id, "alice", since=2)
    assert resumed.samples == followed[2:]
    with pytest.raises(Exception, match="no job"):
        await second.read_usage(job.id, "mallory")


async def test_without_sampling_the_engine_says_so(make_local_engine: EngineFactory) -> None:
    engine = make_local_engine(usage_interval=0)
    job = await engine.submit(spec("print('hi')"), "alice")
    await follow_to_end(engine, job)
    report = await engine.read_usage(job.id, "alice")
    assert (report.available, report.reason, report.samples) == (False, NOT_SAMPLED_REASON, [])
    assert not (engine._jobs_dir / job.id / "usage").exists()


async def test_the_same_traceback_on_several_replicas_is_told_once_with_the_replicas_listed(
    local_engine: LocalEngine, tmp_path: Path
) -> None:
    # Every replica reaches its error together (a barrier of files) and ignores SIGTERM, so each
    # prints its traceback even though the first failure ends the job.
    code = f"""
        import os, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        me = os.environ["DISTRUN_REPLICA"]
        open(os.path.join({str(tmp_path)!r}, me), "w").close()
        while len(os.listdir({str(tmp_path)!r})) < 3:
            time.sleep(0.01)

        def step(batch):
            raise ValueError(f"bad batch {{batch}}")

        if me == "worker-2":
            {{}}["missing"]
        step(7)
    """
    job = await local_engine.submit(spec(code, replicas=3), "alice")
    final, _ = await follow_to_end(local_engine, job)
    assert final.state == JobState.FAILED
    same, other = final.tracebacks
    assert same.replicas == ["worker-0", "worker-1"]
    assert same.lines[0] == "Traceback (most recent call last):"
    assert same.lines[-1] == "ValueError: bad batch 7"
    assert any("in step" in line for line in same.lines)
    assert other.replicas == ["worker-2"] and other.lines[-1] == "KeyError: 'missing'"
    shown = job_details(final.to_json())
    assert shown.count("ValueError: bad batch 7") == 1
    assert "traceback on worker-0, worker-1:" in shown
    assert "traceback on worker-2:" in shown
