"""Log fidelity and slow readers on the Kubeflow (Training Operator v1) engine, against the tier's
real API server and kwok pods: issue 6's tests of the local engine (tests/reliability/
test_log_fidelity.py, test_slow_followers.py) extended to Kubernetes.

Each replica "prints" the numbered lines of tests/reliability/numbered_lines.py (bursts, a
64 KiB line, invalid UTF-8, ANSI colour codes, carriage returns, non-ASCII text), recorded as a
kubelet records them: lines longer than 16 KiB and some others in pieces ("P" entries, a burst
may end mid-line), and the last line never ended. `DISTRUN_K8S_FIDELITY_LINES` sets the lines
per replica (20,000 by default); `DISTRUN_K8S_FIDELITY_SEED` replays a run (the seed is in every
failure message). The real Training Operator makes the pods and ends the job when they end.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import random
import time
import tracemalloc
from contextlib import aclosing
from typing import Any

import pytest
from tornado.websocket import WebSocketClientConnection

from distrun.client.log_resume import rows_of_runs
from distrun.core.job import Job, JobState
from distrun.core.logs import LogLine
from distrun.core.spec import JobSpec
from distrun.engines.kube.kubeflow import KubeflowEngine

from ..reliability.helpers import SequenceChecker, first_batch, read_all, wait_until
from ..reliability.numbered_lines import line_bytes
from .cluster import KubeCluster, PodLog
from .distrun_server import DistrunServer, receive, submit_cell, user_namespace
from .real_operator import (
    WAIT,
    pods_held,
    register_logs,
    submit_with_logs,
    succeed,
)

pytestmark = pytest.mark.kubernetes

LINES_PER_REPLICA = int(os.environ.get("DISTRUN_K8S_FIDELITY_LINES", "20000"))
CELL = "%engine=kubeflow\n%framework=pytorch\n%worker=3\nprint('numbered lines')\n"
ALICE_NS = user_namespace("alice")
CRI_PIECE_BYTES = 16 * 1024  # containerd records a longer line in pieces of this size
CUT_EVERY = 17  # every 17th line is also recorded in two pieces, as a line written in parts
BURSTS = 8
RESUMES = 3  # reconnects to the first server (once after it was killed), plus one to the other
Entry = tuple[bytes, bool]  # a piece of a line, and whether the line goes on after it
MiB = 1024 * 1024


def fidelity_seed() -> int:
    return int(os.environ.get("DISTRUN_K8S_FIDELITY_SEED") or random.randrange(1 << 30))


def cri_entries(replica: str, count: int) -> list[Entry]:
    """The replica's `count` numbered lines as the kubelet's log entries."""
    entries: list[Entry] = []
    for i in range(count):
        data = line_bytes(replica, i)
        cuts = list(range(CRI_PIECE_BYTES, len(data), CRI_PIECE_BYTES))
        if not cuts and i % CUT_EVERY == 4:
            cuts = [len(data) // 2]  # may cut a UTF-8 character in two
        pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        entries += [(piece, True) for piece in pieces[:-1]]
        entries.append((pieces[-1], i == count - 1))  # the last line never ends
    return entries


def write_entries(log: PodLog, entries: list[Entry]) -> None:
    for partial, group in itertools.groupby(entries, key=lambda entry: entry[1]):
        log.write(*(piece for piece, _ in group), partial=partial)


def bursts(entries: list[Entry], rng: random.Random) -> list[list[Entry]]:
    """`entries` cut at random places (mid-line too) into BURSTS parts."""
    cuts = [0, *sorted(rng.sample(range(1, len(entries)), BURSTS - 1)), len(entries)]
    return [entries[a:b] for a, b in itertools.pairwise(cuts)]


async def feed(logs: dict[str, PodLog], count: int, rng: random.Random) -> None:
    """Every replica's lines, a burst of each replica at a time, with pauses between."""
    parts = {replica: bursts(cri_entries(replica, count), rng) for replica in logs}
    for burst in range(BURSTS):
        for replica, log in logs.items():
            write_entries(log, parts[replica][burst])
        await asyncio.sleep(rng.uniform(0.05, 0.4))


# --- every line exactly once through the websocket, across resumes and servers ---------------


def since(cursor: dict[str, int]) -> str:
    return ",".join(f"{replica}:{seq}" for replica, seq in cursor.items())


async def read_segment(
    ws: WebSocketClientConnection, checker: SequenceChecker, stop: int | None, states: list[str]
) -> bool:
    """Checks the lines of `ws` until `stop` lines were received in all (the rest of that frame
    is dropped, as a client that goes away mid-frame loses it), or to the end of the stream
    (True)."""
    while True:
        message = await receive(ws)
        assert message is not None, f"closed before the end ({ws.close_code} {ws.close_reason})"
        if message["type"] == "status":
            states.append(message["job"]["state"])
        elif message["type"] == "end":
            return True
        elif message["type"] == "runs":
            rows = rows_of_runs(message["runs"])
            lines = [LogLine(r, seq, when, text) for r, seq, when, text in rows]
            if stop is not None:
                lines = lines[: stop - checker.received]
            checker.check(lines)
            if stop is not None and checker.received >= stop:
                return False
        elif message["type"] == "partial":
            checker.check_partial([LogLine(*line) for line in message["lines"]])
        else:
            raise AssertionError(f"unexpected message {message}")


async def test_every_line_of_four_replicas_reaches_a_resuming_client_exactly_once_across_servers(
    servers: tuple[DistrunServer, DistrunServer],
    alice_operator: str,
    kube_cluster: KubeCluster,
    kube_admin: Any,
) -> None:
    seed = fidelity_seed()
    rng = random.Random(seed)
    first, second = servers
    with pods_held(kube_cluster):  # the operator's pods wait until their logs are registered
        submitted = await submit_cell(first, CELL)
        replicas = [replica["name"] for replica in submitted["replicas"]]
        assert replicas == ["master-0", "worker-0", "worker-1", "worker-2"]
        logs = register_logs(kube_cluster, ALICE_NS, submitted["id"], dict.fromkeys(replicas, ()))
    feeder = asyncio.create_task(feed(logs, LINES_PER_REPLICA, rng))
    total = len(replicas) * LINES_PER_REPLICA
    # The client goes away after a random number of lines, RESUMES + 1 times; one of its
    # reconnects goes to the other server, and once it is its server that goes away: killed
    # mid-stream (SIGKILL) and started again. (The last lines end only with the job: no stop.)
    stops = sorted(rng.sample(range(1, total - len(replicas)), RESUMES + 1))
    elsewhere = rng.randint(1, len(stops))  # the segment the other server serves
    # The first server is killed at the end of this segment, and serves the next one restarted.
    crash = rng.choice([s for s in range(len(stops)) if elsewhere not in (s, s + 1)])
    checker = SequenceChecker(replicas)
    states: list[str] = []
    path = ("distrun", "jobs", submitted["id"], "logs", "stream")
    started = time.monotonic()

    for segment, stop in enumerate([*stops, None]):
        server = second if segment == elsewhere else first
        ws = await server.websocket("alice", *path, since=since(checker.cursor()))
        if stop is None:  # the last segment: every burst written, then the job succeeds
            await asyncio.wait_for(feeder, WAIT)
            await succeed(kube_admin, ALICE_NS, submitted["id"])
        try:
            ended = await read_segment(ws, checker, stop, states)
        except AssertionError as error:
            raise AssertionError(f"{error} (segment {segment}, seed {seed})") from None
        if stop is not None:
            assert not ended, f"the stream ended before the job did (seed {seed})"
            if segment == crash:
                server.kill()  # with frames still on their way
                await asyncio.to_thread(server.start)
            else:
                ws.close()
            await asyncio.sleep(rng.random() * 0.3)  # away for a while; the replicas write on

    elapsed = time.monotonic() - started
    print(
        f"\n{total:,} lines from {len(replicas)} pods in {elapsed:.1f} s, {RESUMES + 1} resumes: "
        f"segment {elsewhere} on the other server, the first killed after segment {crash} and "
        f"restarted, seed {seed}"
    )
    assert ended and states[-1] == "succeeded", (states, seed)
    assert checker.next_seq == dict.fromkeys(replicas, LINES_PER_REPLICA), f"seed {seed}"
    assert checker.received == total
    assert checker.partials > 0, f"no unfinished line was seen (seed {seed})"
    await asyncio.wait_for(ws.read_message(), WAIT)  # the server closes after "end"
    assert ws.close_code == 1000


# --- slow and stalled followers of the engine ----------------------------------------------


async def test_stalled_followers_hold_up_no_one_hold_no_memory_and_leave_no_task_when_closed(
    kubeflow: KubeflowEngine,
    kube_cluster: KubeCluster,
    kube_admin: Any,
    operator_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(7)
    spec = JobSpec.from_dict(
        {"framework": "pytorch", "code": "pass\n", "roles": {"worker": {"replicas": 3}}}
    )
    submitted, logs = await submit_with_logs(kube_cluster, kubeflow, spec, monkeypatch)
    names = [replica.name for replica in submitted.replicas]
    parts = {name: bursts(cri_entries(name, LINES_PER_REPLICA), rng) for name in names}
    for name, log in logs.items():
        write_entries(log, parts[name][0])
    tasks_before = asyncio.all_tasks()

    # Three followers read a first batch and then stop reading: two left as generators, one
    # inside a consumer task that waits for nothing.
    stalled = [kubeflow.follow(submitted.id, "alice", max_batch=100) for _ in range(2)]
    stalled_checkers = [SequenceChecker(names) for _ in stalled]
    for events, checker in zip(stalled, stalled_checkers, strict=True):
        checker.check((await asyncio.wait_for(first_batch(events), WAIT)).lines)
    task_checker = SequenceChecker(names)

    async def read_then_stall() -> None:
        async with aclosing(kubeflow.follow(submitted.id, "alice", max_batch=100)) as events:
            task_checker.check((await first_batch(events)).lines)
            await asyncio.Event().wait()

    stalled_task = asyncio.create_task(read_then_stall())
    await wait_until(lambda: task_checker.received > 0, "the third follower's first batch", WAIT)

    # The rest comes in bursts while they stall; a fourth follower reads along and gets it all.
    fast_checker = SequenceChecker(names)

    async def read_along() -> Job | None:
        async with aclosing(kubeflow.follow(submitted.id, "alice")) as events:
            return await read_all(events, fast_checker)

    tracemalloc.start()
    try:
        held_before, _ = tracemalloc.get_traced_memory()
        fast = asyncio.create_task(read_along())
        for burst in range(1, BURSTS):
            for name, log in logs.items():
                write_entries(log, parts[name][burst])
            await asyncio.sleep(rng.uniform(0.05, 0.4))
        written = sum(log.path.stat().st_size for log in logs.values())
        await succeed(kube_admin, operator_namespace, submitted.id)
        final = await asyncio.wait_for(fast, WAIT)
        gc.collect()
        held_after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert final is not None and final.state == JobState.SUCCEEDED, final
    assert fast_checker.next_seq == dict.fromkeys(names, LINES_PER_REPLICA)
    assert all(checker.received <= 100 for checker in stalled_checkers)  # they really stalled
    assert task_checker.received <= 100 and not stalled_task.done()
    growth = held_after - held_before
    print(
        f"\n{written / MiB:.1f} MiB written while 3 followers stalled; held {growth / MiB:.2f} MiB"
    )
    # Had the stalled followers read on, they would hold three times what was written (it was
    # 4.5 times, when aiohttp buffered 4 MiB per stream); bounded, it is their queues, a 64 KiB
    # buffer per stream, and the connections: once the pods ended, each stalled follower opens
    # a read of each ended container's whole log (it waits on its queue like the rest); their
    # TLS read buffer is the event loop's one (client.share_tls_buffer), not 256 KiB each.
    assert written > 3 * MiB
    assert growth < 2 * written, "the stalled followers read on into memory"

    # One stalled follower, woken at last, gets every line exactly once; the others are
    # closed and cancelled while stalled.
    woken, closed = stalled
    async with aclosing(woken) as events:
        await asyncio.wait_for(read_all(events, stalled_checkers[0]), WAIT)
    assert stalled_checkers[0].next_seq == dict.fromkeys(names, LINES_PER_REPLICA)
    await closed.aclose()
    stalled_task.cancel()
    await asyncio.gather(stalled_task, return_exceptions=True)
    await wait_until(
        lambda: asyncio.all_tasks() <= tasks_before | {asyncio.current_task()},
        "every follower's tasks ended",
        WAIT,
    )
