"""`distrun run`'s follow loop against a fake client: output, exit codes, Ctrl-C cancels first."""

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from typing import Any

import pytest

from distrun.client.base import FollowEvent, LinesEvent, StatusEvent
from distrun.client.cli import follow_until_done
from distrun.client.console import Console
from distrun.core.logs import Cursor, LogLine


def job(state: str, running: int = 0, reason: str | None = None) -> dict[str, Any]:
    return {
        "id": "j-abcde",
        "state": state,
        "reason": reason,
        "replicas_running": running,
        "replicas": [{"name": "worker-0"}, {"name": "worker-1"}],
    }


class FakeClient:
    def __init__(self, events: list[FollowEvent], interrupt_after: int | None = None) -> None:
        self.events = events
        self.interrupt_after = interrupt_after
        self.cancelled: list[str] = []

    async def follow(
        self, job_id: str, since: Cursor | None = None, replicas: list[str] | None = None
    ) -> AsyncIterator[FollowEvent]:
        for i, event in enumerate(self.events):
            if i == self.interrupt_after:
                os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl-C
                await asyncio.sleep(30)
            yield event

    async def get_job(self, job_id: str) -> dict[str, Any]:
        return self.events[-1].job if isinstance(self.events[-1], StatusEvent) else job("running")

    async def cancel(self, job_id: str) -> dict[str, Any]:
        self.cancelled.append(job_id)
        return job("cancelled")


EVENTS: list[FollowEvent] = [
    StatusEvent(job("running", 2)),
    LinesEvent([LogLine("worker-0", 0, 1.0, "hello"), LogLine("worker-1", 0, 1.1, "hi")]),
]


async def test_a_succeeded_job_prints_prefixed_lines_and_status_and_exits_0(
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = FakeClient([*EVENTS, StatusEvent(job("succeeded"))])
    code = await follow_until_done(client, job("pending"), Console(["worker-0", "worker-1"]))  # type: ignore[arg-type]
    assert code == 0
    assert capsys.readouterr().out.splitlines() == [
        "[distrun] job j-abcde running (2/2 replicas)",
        "worker-0 | hello",
        "worker-1 | hi",
        "[distrun] job j-abcde succeeded",
    ]


async def test_a_failed_job_says_which_replica_failed_and_exits_1(
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = FakeClient([*EVENTS, StatusEvent(job("failed", reason="worker-1 exited with code 1"))])
    code = await follow_until_done(client, job("pending"), Console())  # type: ignore[arg-type]
    assert code == 1
    out = capsys.readouterr().out
    assert out.endswith("[distrun] job j-abcde failed: worker-1 exited with code 1\n")


async def test_ctrl_c_cancels_the_job_says_so_and_exits_130(
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = FakeClient([*EVENTS, StatusEvent(job("succeeded"))], interrupt_after=2)
    code = await follow_until_done(client, job("pending"), Console())  # type: ignore[arg-type]
    assert code == 130
    assert client.cancelled == ["j-abcde"]
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "[distrun] interrupted: cancelling job j-abcde",
        "[distrun] job j-abcde cancelled",
    ]
    # the handler was removed: the default SIGINT behaviour is back
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


async def test_the_outcome_is_printed_after_lines_that_arrive_behind_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    client = FakeClient(
        [
            StatusEvent(job("failed", reason="worker-1 exited with code 3")),
            LinesEvent([LogLine("worker-1", 0, 1.0, "Traceback")]),
        ]
    )
    code = await follow_until_done(client, job("running"), Console())  # type: ignore[arg-type]
    assert code == 1
    assert capsys.readouterr().out.splitlines() == [
        "worker-1 | Traceback",
        "[distrun] job j-abcde failed: worker-1 exited with code 3",
    ]
