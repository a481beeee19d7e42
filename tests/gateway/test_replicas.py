"""Two gateway replicas sharing session storage, as two pods of the chart's Deployment."""

import os
import signal
from pathlib import Path

import pytest

from .conftest import (
    EG_TOKEN,
    KERNEL_NAME,
    GatewayReplica,
    Gateways,
    execute,
    http,
    pid_alive,
    user_token,
    wait_until,
)

pytestmark = pytest.mark.integration

ALICE = user_token("alice")


def channels(replica: GatewayReplica, kernel_id: str) -> str:
    return replica.url.replace("http", "ws", 1) + f"/api/kernels/{kernel_id}/channels"


async def start_kernel(replica: GatewayReplica) -> tuple[str, int]:
    status, kernel = http(f"{replica.url}/api/kernels", "POST", {"name": KERNEL_NAME}, ALICE)
    assert status == 201, kernel
    stdout, errors = await execute(channels(replica, kernel["id"]), ALICE,
                                   "import os; x = 42; print(os.getpid())")  # fmt: skip
    assert errors == []
    return kernel["id"], int(stdout)


def known_to(replica: GatewayReplica) -> set[str]:
    """The kernels the replica's EG holds in memory (asked directly, with EG's own token)."""
    status, kernels = http(f"{replica.eg_url}/api/kernels", token=EG_TOKEN)
    assert status == 200, kernels
    return {kernel["id"] for kernel in kernels}


async def test_a_kernel_started_through_one_replica_is_reachable_through_the_other(
    gateways: Gateways,
) -> None:
    a, b = gateways.start("a"), gateways.start("b")
    kernel_id, pid = await start_kernel(a)
    assert kernel_id not in known_to(b)

    # The user's listing through b revives the kernel from its persisted session...
    assert [k["id"] for k in http(f"{b.url}/api/kernels", token=ALICE)[1]] == [kernel_id]
    # ...and b talks to the very same kernel process, state included.
    stdout, errors = await execute(
        channels(b, kernel_id), ALICE, "import os; print(os.getpid(), x)"
    )
    assert errors == []
    assert stdout.split() == [str(pid), "42"]


async def test_sigterm_to_a_replica_leaves_its_kernels_to_the_other(gateways: Gateways) -> None:
    a, b = gateways.start("a"), gateways.start("b")
    kernel_id, pid = await start_kernel(a)

    # What a rolling update does to the old pod: SIGTERM to the gateway process.
    assert a.eg is not None
    a.eg.proc.send_signal(signal.SIGTERM)
    assert a.eg.proc.wait(timeout=60) == 0
    assert "leaving 1 kernel(s) running for the other replicas" in a.eg.output()

    assert pid_alive(pid)
    stdout, errors = await execute(
        channels(b, kernel_id), ALICE, "import os; print(os.getpid(), x)"
    )
    assert errors == []
    assert stdout.split() == [str(pid), "42"]


async def test_a_kernel_shut_down_through_one_replica_is_not_restarted_by_another(
    gateways: Gateways,
) -> None:
    a, b = gateways.start("a"), gateways.start("b")
    kernel_id, pid = await start_kernel(a)
    stdout, _ = await execute(channels(b, kernel_id), ALICE, "print(x)")  # b now holds it too
    assert stdout == "42\n" and kernel_id in known_to(b)

    assert http(f"{a.url}/api/kernels/{kernel_id}", "DELETE", token=ALICE)[0] == 204
    wait_until(lambda: not pid_alive(pid), "the kernel process to exit")

    # b's restarter notices the dead kernel; with its session gone it forgets it instead.
    assert b.eg is not None
    # (Upstream EG restarts it here, under the same id.)
    wait_until(lambda: kernel_id not in known_to(b), "b to drop the kernel")
    assert f"Kernel {kernel_id} died after another replica deleted its session" in b.eg.output()
    assert http(f"{b.url}/api/kernels", token=ALICE) == (200, [])
    assert http(f"{b.url}/api/kernels/{kernel_id}", token=ALICE)[0] == 404
    # No process was started again under that id (its connection file names the id).
    assert not [pid for pid in os.listdir("/proc") if pid.isdigit() and kernel_id in cmdline(pid)]


def cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""
