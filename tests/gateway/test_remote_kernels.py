"""A notebook server's kernels run behind the gateway, and %%distrun works from them."""

import os

import pytest

from .conftest import (
    KERNEL_NAME,
    SERVER_TOKEN,
    Gateways,
    execute,
    http,
)

pytestmark = pytest.mark.integration

TWO_WORKERS = """\
%framework=generic
%worker=2
import os
print("hello from", os.environ["DISTRUN_REPLICA"], flush=True)
"""


def ws_url(server_url: str, kernel_id: str) -> str:
    return server_url.replace("http", "ws", 1) + f"api/kernels/{kernel_id}/channels"


async def test_a_notebook_kernel_runs_in_the_gateway_as_the_logged_in_user(
    gateways: Gateways, notebook_server: object
) -> None:
    gateway = gateways.start("a")
    # The server's environment claims another user: the token decides, not KERNEL_USERNAME.
    server = notebook_server(gateway, "alice", KERNEL_USERNAME="mallory")  # type: ignore[operator]
    status, kernel = http(server.url + "api/kernels", "POST", {"name": KERNEL_NAME}, SERVER_TOKEN)
    assert status == 201, kernel

    stdout, errors = await execute(
        ws_url(server.url, kernel["id"]),
        SERVER_TOKEN,
        "import os; print(os.getpid(), os.getppid(), os.environ['KERNEL_USERNAME'],"
        " os.environ['KERNEL_NAMESPACE'], 'PATH' in os.environ, 6 * 7)",
    )

    assert errors == []
    pid, ppid, username, namespace, has_path, answer = stdout.split()
    assert ppid == str(gateway.eg.pid)  # a child of the gateway...
    assert int(pid) != server.process.pid and ppid != str(server.process.pid)  # ...not the server
    assert (username, namespace) == ("alice", "kernels-alice")
    assert has_path == "True" and answer == "42"


async def test_distrun_cell_in_a_remote_kernel_streams_every_replica_back(
    gateways: Gateways, notebook_server: object
) -> None:
    gateway = gateways.start("a")
    server = notebook_server(gateway, "alice")  # type: ignore[operator]
    status, kernel = http(server.url + "api/kernels", "POST", {"name": KERNEL_NAME}, SERVER_TOKEN)
    assert status == 201, kernel

    # The magics are loaded by the kernel's IPython config; the job goes through the server.
    stdout, errors = await execute(ws_url(server.url, kernel["id"]), SERVER_TOKEN, TWO_WORKERS)

    assert errors == []
    assert "worker-0 | hello from worker-0\n" in stdout
    assert "worker-1 | hello from worker-1\n" in stdout
    job_id = stdout.split("[distrun] submitted job ")[1].split()[0]
    status, jobs = http(server.url + "distrun/jobs", token=SERVER_TOKEN)
    assert status == 200
    assert job_id in {job["id"] for job in jobs["jobs"]}
    kernel_pid, _ = (await execute(ws_url(server.url, kernel["id"]), SERVER_TOKEN,
                                   "import os; print(os.getpid())"))  # fmt: skip
    assert int(kernel_pid) != os.getpid()
