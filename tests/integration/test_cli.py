"""The real `distrun` CLI as a subprocess, against the local engine and a real jupyter_server,
and the kernel extension inside a real ipykernel.

Needs the local engine and the cell-header parser (and the server extension for the server
tests); each group skips until those modules exist.
"""

import asyncio
import json
import os
import pty
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pyte
import pytest

from tests.cli_process import cli_env, run_distrun
from tests.server_process import ServerProcess

pytestmark = pytest.mark.integration

SERVER_EXT = Path(__file__).resolve().parents[2] / "server_ext"
TOKEN = "test-token-3f9a"
WAIT = 60.0  # generous: the machine may be loaded

TWO_WORKERS = """\
%framework=generic
%worker=2
import os
print("hello from", os.environ["DISTRUN_REPLICA"], flush=True)
"""


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return cli_env(tmp_path)


def distrun(
    env: dict[str, str], *args: str, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return run_distrun(env, *args, cwd=cwd, timeout=WAIT * 2)


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def wait_for_line(proc: subprocess.Popen[str], needle: str, seen: list[str]) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if needle in line:
            return
    raise AssertionError(f"{needle!r} never came; got {seen}")


def finish(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """The rest of stdout and stderr once the process exits (killed if it takes too long).

    Not `communicate()`: it reads the raw pipes and would drop what `readline` buffered."""
    assert proc.stdout is not None and proc.stderr is not None
    watchdog = threading.Timer(WAIT * 2, proc.kill)
    watchdog.start()
    try:
        rest, err = proc.stdout.read(), proc.stderr.read()
        proc.wait()
    finally:
        watchdog.cancel()
    return rest, err


# --- the CLI against the local engine --------------------------------------------------------


def test_run_streams_every_replica_line_with_a_prefix_and_exits_0(
    env: dict[str, str], tmp_path: Path
) -> None:
    result = distrun(env, "run", write(tmp_path / "cell.txt", TWO_WORKERS))
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert "worker-0 | hello from worker-0" in out
    assert "worker-1 | hello from worker-1" in out
    assert out[0].startswith("[distrun] submitted job job-") and out[0].endswith(
        "(2 replicas: worker-0, worker-1)"
    )
    assert out[-1].startswith("[distrun] job job-") and " succeeded" in out[-1]
    assert "\x1b[" not in result.stdout  # not a terminal: no colours


def test_flags_override_the_header_and_a_plain_file_runs_as_generic(
    env: dict[str, str], tmp_path: Path
) -> None:
    script = write(tmp_path / "train.py", "import os\nprint(os.environ['DISTRUN_REPLICA'])\n")
    result = distrun(env, "run", script, "--workers", "3", "--name", "plain")
    assert result.returncode == 0, result.stderr
    assert {f"worker-{i} | worker-{i}" for i in range(3)} <= set(result.stdout.splitlines())
    assert "[distrun] submitted job plain-" in result.stdout


def test_files_named_by_the_header_are_shipped_from_the_files_directory(
    env: dict[str, str], tmp_path: Path
) -> None:
    write(tmp_path / "data.txt", "forty-two\n")
    cell = "%framework=generic\n%files=data.txt\nprint(open('data.txt').read().strip())\n"
    result = distrun(env, "run", write(tmp_path / "cell.txt", cell), cwd=Path("/"))
    assert result.returncode == 0, result.stderr
    assert "worker-0 | forty-two" in result.stdout.splitlines()


def test_a_failing_job_names_the_replica_and_exits_1(env: dict[str, str], tmp_path: Path) -> None:
    cell = (
        "%framework=generic\n%worker=2\nimport os, sys\nprint('about to fail', flush=True)\n"
        "sys.exit(3 if os.environ['DISTRUN_REPLICA'] == 'worker-1' else 0)\n"
    )
    result = distrun(env, "run", write(tmp_path / "fail.txt", cell))
    assert result.returncode == 1
    last = result.stdout.splitlines()[-1]
    assert " failed: " in last and "worker-1" in last and "3" in last
    assert "worker-1 | about to fail" in result.stdout


def test_a_bad_header_is_one_error_line_and_exit_code_2(
    env: dict[str, str], tmp_path: Path
) -> None:
    result = distrun(env, "run", write(tmp_path / "bad.txt", "%framework=generic\n%wokers=2\n"))
    assert result.returncode == 2
    assert result.stdout == ""
    assert (
        result.stderr
        == "distrun: error: line 2: unknown setting 'wokers'; did you mean 'worker'?\n"
    )


def test_an_unknown_job_is_one_error_line_and_exit_code_2(env: dict[str, str]) -> None:
    for command in ("status", "logs", "cancel", "rm"):
        result = distrun(env, command, "no-such-job")
        assert result.returncode == 2
        assert result.stderr.startswith("distrun: error: ") and result.stderr.count("\n") == 1
        assert "Traceback" not in result.stderr


def test_ctrl_c_cancels_the_job_says_so_and_exits_130(env: dict[str, str], tmp_path: Path) -> None:
    cell = "%framework=generic\n%worker=2\nimport time\nprint('started', flush=True)\ntime.sleep(120)\n"
    proc = subprocess.Popen(
        [sys.executable, "-m", "distrun", "run", write(tmp_path / "long.txt", cell)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    try:
        wait_for_line(proc, "| started", seen)
        proc.send_signal(signal.SIGINT)
        rest, err = finish(proc)
    finally:
        proc.kill()
    out = "".join(seen) + rest
    assert proc.returncode == 130, err
    job_id = out.split("[distrun] submitted job ")[1].split()[0]
    assert f"[distrun] interrupted: cancelling job {job_id}\n" in out
    status = json.loads(distrun(env, "status", job_id, "--json").stdout)
    assert status["state"] == "cancelled"


def test_submit_then_logs_status_ls_cancel_and_rm(env: dict[str, str], tmp_path: Path) -> None:
    cell = "%framework=generic\n%worker=2\nfor i in range(5):\n    print('line', i)\n"
    submitted = distrun(env, "submit", write(tmp_path / "cell.txt", cell), "--name", "five")
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert job_id.startswith("five-")

    followed = distrun(env, "logs", "-f", job_id)  # ends when the job ends
    assert followed.returncode == 0, followed.stderr
    for replica in ("worker-0", "worker-1"):
        assert [line for line in followed.stdout.splitlines() if line.startswith(replica)] == [
            f"{replica} | line {i}" for i in range(5)
        ]
    tail = distrun(env, "logs", job_id, "--tail", "2", "--replica", "worker-1")
    assert tail.stdout.splitlines() == ["worker-1 | line 3", "worker-1 | line 4"]

    status = json.loads(distrun(env, "status", job_id, "--json").stdout)
    assert (status["id"], status["state"]) == (job_id, "succeeded")
    assert "state:     succeeded" in distrun(env, "status", job_id).stdout

    listing = distrun(env, "ls").stdout.splitlines()
    assert listing[0].split()[:3] == ["ID", "STATE", "FRAMEWORK"]
    assert any(row.split()[:4] == [job_id, "succeeded", "generic", "0/2"] for row in listing[1:])

    assert distrun(env, "cancel", job_id).returncode == 0  # idempotent on a finished job
    assert distrun(env, "rm", job_id).stdout == f"[distrun] job {job_id} deleted\n"
    assert job_id not in distrun(env, "ls").stdout


TOP_CELL = """\
%framework=generic
%worker=2
%memory=1Gi
import os, time
hoard = b"x" * (96 * 1024 * 1024)
print("holding", flush=True)
time.sleep(600)
"""


def top_until_sampled(env: dict[str, str], job_id: str, *flags: str) -> list[list[str]]:
    """`distrun top JOB` once both replicas hold their memory: its rows, split in columns."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        top = distrun(env, "top", job_id, *flags)
        assert top.returncode == 0, top.stderr
        rows = [line.split("  ") for line in top.stdout.splitlines()]
        rows = [[cell.strip() for cell in row if cell.strip()] for row in rows]
        if len(rows) == 3 and all(row[3].endswith("MiB") and float(row[3][:-4]) > 96
                                  for row in rows[1:]):  # fmt: skip
            return rows
    raise AssertionError(f"no sample of both replicas holding 96 MiB: {top.stdout}")


def test_top_shows_each_replicas_cpu_memory_peak_and_limit(
    env: dict[str, str], tmp_path: Path
) -> None:
    job_id = distrun(env, "submit", write(tmp_path / "top.txt", TOP_CELL)).stdout.strip()
    try:
        rows = top_until_sampled(env, job_id)
    finally:
        distrun(env, "cancel", job_id)
    assert rows[0] == ["REPLICA", "STATE", "CPU", "MEMORY", "PEAK", "LIMIT", "GPU"]
    assert [row[:2] for row in rows[1:]] == [["worker-0", "running"], ["worker-1", "running"]]
    for row in rows[1:]:
        assert row[2].endswith("%") and row[5:] == ["1 GiB", "-"]
    unknown = distrun(env, "top", "no-such-job")
    assert unknown.returncode == 2 and unknown.stderr.startswith("distrun: error: no job")


# --- the CLI against a real jupyter_server ---------------------------------------------------


@pytest.fixture
def server(env: dict[str, str], tmp_path: Path) -> Iterator[ServerProcess]:
    """A real server over the same state directory as the CLI's local engine."""
    state_dir = Path(env["JUPYTER_DATA_DIR"]) / "distrun"
    running = ServerProcess(
        tmp_path / "server", token=TOKEN, config={"DistrunApp": {"state_dir": str(state_dir)}}
    )
    yield running.start()
    running.stop()


def test_run_through_the_server_streams_lines_and_exits_0(
    env: dict[str, str], server: ServerProcess, tmp_path: Path
) -> None:
    cell = write(tmp_path / "cell.txt", TWO_WORKERS)
    token_file = write(tmp_path / "token", f"{TOKEN}\n")
    result = distrun(env, "run", cell, "--url", server.url, "--token-file", token_file)
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr
    assert "worker-0 | hello from worker-0" in result.stdout.splitlines()
    assert "worker-1 | hello from worker-1" in result.stdout.splitlines()
    assert " succeeded" in result.stdout.splitlines()[-1]


def test_the_environment_selects_the_server_and_errors_come_back_as_one_line(
    env: dict[str, str], server: ServerProcess, tmp_path: Path
) -> None:
    remote = {**env, "DISTRUN_URL": server.url, "DISTRUN_TOKEN": TOKEN}
    bad = distrun(remote, "run", write(tmp_path / "bad.txt", "%framework=generic\n%wokers=2\n"))
    assert (bad.returncode, bad.stderr) == (
        2,
        "distrun: error: line 2: unknown setting 'wokers'; did you mean 'worker'?\n",
    )
    missing = distrun(remote, "status", "no-such-job")
    assert missing.returncode == 2 and missing.stderr.startswith("distrun: error: ")
    wrong = distrun({**remote, "DISTRUN_TOKEN": "wrong"}, "ls")
    assert wrong.returncode == 2
    assert "check the token (--token-file, DISTRUN_TOKEN or DISTRUN_TOKEN_FILE)" in wrong.stderr


def test_top_through_the_server_reads_the_same_samples(
    env: dict[str, str], server: ServerProcess, tmp_path: Path
) -> None:
    remote = {**env, "DISTRUN_URL": server.url, "DISTRUN_TOKEN": TOKEN}
    job_id = distrun(remote, "submit", write(tmp_path / "top.txt", TOP_CELL)).stdout.strip()
    try:
        rows = top_until_sampled(remote, job_id)
    finally:
        distrun(remote, "cancel", job_id)
    assert [row[0] for row in rows] == ["REPLICA", "worker-0", "worker-1"]


def test_jobs_run_from_the_cli_show_up_in_the_server_and_back(
    env: dict[str, str], server: ServerProcess, tmp_path: Path
) -> None:
    cell = write(tmp_path / "cell.txt", TWO_WORKERS)
    local_id = distrun(env, "submit", cell, "--name", "fromcli").stdout.strip()
    remote_id = distrun(env, "submit", cell, "--name", "fromserver", "--url", server.url,
                        "--token", TOKEN).stdout.strip()  # fmt: skip
    assert local_id and remote_id
    via_server = distrun(env, "ls", "--json", "--url", server.url, "--token", TOKEN)
    assert "--token shows the token to anyone who can list" in via_server.stderr
    via_engine = distrun(env, "ls", "--json")
    for listing in (via_server, via_engine):
        ids = {job["id"] for job in json.loads(listing.stdout)}
        assert {local_id, remote_id} <= ids


def test_following_resumes_across_a_server_restart_without_losing_or_repeating_lines(
    env: dict[str, str], server: ServerProcess, tmp_path: Path
) -> None:
    count = 60
    cell = (
        "%framework=generic\n%worker=2\nimport time\n"
        f"for i in range({count}):\n    print('line', i, flush=True)\n    time.sleep(0.1)\n"
    )
    remote = ["--url", server.url, "--token", TOKEN]
    job_id = distrun(env, "submit", write(tmp_path / "cell.txt", cell), *remote).stdout.strip()
    follower = subprocess.Popen(
        [sys.executable, "-m", "distrun", "logs", "-f", job_id, *remote],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: list[str] = []
    try:
        wait_for_line(follower, "| line 3", seen)
        server.stop()  # the job keeps running: the local engine's supervisor owns it
        server.start()
        rest, err = finish(follower)
    finally:
        follower.kill()
    assert follower.returncode == 0, err
    lines = ("".join(seen) + rest).splitlines()
    for replica in ("worker-0", "worker-1"):
        assert [line for line in lines if line.startswith(replica)] == [
            f"{replica} | line {i}" for i in range(count)
        ]


async def test_the_server_client_submits_a_cell_follows_it_and_reads_its_logs(
    server: ServerProcess,
) -> None:
    from distrun.client.base import LinesEvent, StatusEvent
    from distrun.client.server_client import ServerClient

    client = ServerClient(server.url, TOKEN)
    job = await client.submit_cell(TWO_WORKERS)
    events = [event async for event in client.follow(job["id"])]
    streamed = {(line.replica, line.seq, line.text)
                for e in events if isinstance(e, LinesEvent) for line in e.lines}  # fmt: skip
    assert streamed == {
        ("worker-0", 0, "hello from worker-0"),
        ("worker-1", 0, "hello from worker-1"),
    }
    statuses = [e.job["state"] for e in events if isinstance(e, StatusEvent)]
    assert statuses[-1] == "succeeded"
    page = await client.logs(job["id"], replicas=["worker-1"])
    assert [(line.replica, line.text) for line in page.lines] == [
        ("worker-1", "hello from worker-1")
    ]
    assert page.next == {"worker-1": 1}
    await client.delete(job["id"])
    assert job["id"] not in {j["id"] for j in await client.list_jobs()}


# --- the kernel extension in a real ipykernel ------------------------------------------------


class Kernel:
    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        from jupyter_client.manager import start_new_kernel

        self.manager, self.client = start_new_kernel(
            kernel_name="python3", env=env, cwd=str(cwd), startup_timeout=WAIT
        )

    def execute(self, code: str, interrupt_on: str | None = None) -> list[tuple[str, str]]:
        """(kind, text) of every stream, result and error of the cell, in order."""
        msg_id = self.client.execute(code)
        output: list[tuple[str, str]] = []
        deadline = time.monotonic() + WAIT
        while True:
            msg = self.client.get_iopub_msg(timeout=max(deadline - time.monotonic(), 0.1))
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                output.append((content["name"], content["text"]))
                if interrupt_on and interrupt_on in content["text"]:
                    self.manager.interrupt_kernel()
                    interrupt_on = None
            elif kind == "execute_result":
                output.append(("result", content["data"]["text/plain"]))
            elif kind in ("display_data", "update_display_data"):
                output.append((kind, content["data"]["text/plain"]))
            elif kind == "error":
                output.append(("error", content["ename"]))
            elif kind == "status" and content["execution_state"] == "idle":
                return output

    def stop(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernel(env: dict[str, str], tmp_path: Path) -> Iterator[Kernel]:
    pytest.importorskip("ipykernel")
    running = Kernel(env, tmp_path)
    assert running.execute("%load_ext distrun.kernel_magic") == []
    yield running
    running.stop()


def stdout_of(output: list[tuple[str, str]]) -> str:
    return "".join(text for kind, text in output if kind == "stdout")


def test_the_distrun_cell_magic_streams_prefixed_lines_into_the_cell(kernel: Kernel) -> None:
    output = kernel.execute(
        "%%distrun --framework generic --workers 2\n"
        "import os\nprint('hello from', os.environ['DISTRUN_REPLICA'])\n"
    )
    text = stdout_of(output)
    assert "worker-0 | hello from worker-0\n" in text
    assert "worker-1 | hello from worker-1\n" in text
    assert " succeeded" in text.splitlines()[-1]
    kind, result = output[-1]
    assert kind == "result" and result.startswith("JobResult(job_id='job-")
    assert result.endswith("state='succeeded')")


def test_a_ciao_cell_runs_unchanged(kernel: Kernel) -> None:
    output = kernel.execute(TWO_WORKERS)
    text = stdout_of(output)
    assert "worker-0 | hello from worker-0\n" in text
    assert "worker-1 | hello from worker-1\n" in text
    assert output[-1][0] == "result" and "state='succeeded'" in output[-1][1]


def test_a_bad_header_in_a_cell_prints_one_error_line_and_no_traceback(kernel: Kernel) -> None:
    output = kernel.execute("%framework=generic\n%wokers=2\nprint(1)\n")
    assert output == [
        ("stderr", "distrun: error: line 2: unknown setting 'wokers'; did you mean 'worker'?\n")
    ]


def test_ordinary_cells_and_magics_still_work_with_the_extension_loaded(kernel: Kernel) -> None:
    assert kernel.execute("%env DISTRUN_TEST=1\nx = 41\nx + 1") == [
        ("stdout", "env: DISTRUN_TEST=1\n"),
        ("result", "42"),
    ]


def test_interrupting_the_kernel_cancels_the_job_and_says_so(
    kernel: Kernel, env: dict[str, str]
) -> None:
    output = kernel.execute(
        "%%distrun --framework generic --workers 2\n"
        "import time\nprint('started', flush=True)\ntime.sleep(120)\n",
        interrupt_on="| started",
    )
    text = stdout_of(output)
    job_id = text.split("[distrun] submitted job ")[1].split()[0]
    assert f"[distrun] interrupted: cancelling job {job_id}\n" in text
    assert f"[distrun] job {job_id} cancelled" in text
    assert output[-1] == ("error", "KeyboardInterrupt")
    assert json.loads(distrun(env, "status", job_id, "--json").stdout)["state"] == "cancelled"


SWEEP_CELL = """\
%framework=generic
%worker=1
%sweep.rate=0.5,0.2,0.1
%parallel=2
%objective=loss:min
import distrun
rate = distrun.params(rate=0.9)["rate"]
for step in range(1, 4):
    print(f"step {step} loss={(1 - rate) ** step:.4f}", flush=True)
"""


def test_a_sweep_cell_shows_its_progress_and_results_instead_of_every_trials_lines(
    kernel: Kernel, env: dict[str, str]
) -> None:
    output = kernel.execute(SWEEP_CELL)
    text = stdout_of(output)
    assert "| step" not in text, "trials' lines stay in their own jobs"
    assert "3/3 done, best #0 loss=0.125" in text
    table = text.splitlines()[-4:]
    assert table[1].split()[:4] == ["*", "#0", "0.5", "succeeded"]
    assert [row.split()[1] for row in table[2:]] == ["0.2", "0.1"]
    kind, result = output[-1]
    assert kind == "result" and result.startswith("SweepResult(sweep_id='sweep-")
    listed = distrun(env, "ls").stdout
    assert len(re.findall(r"sweep-\w+/[0-2]", listed)) == 3


def test_a_sweep_runs_through_a_server_whose_run_distributed_refuses_it_saying_how(
    env: dict[str, str], server: ServerProcess, tmp_path: Path
) -> None:
    status, body = asyncio.run(server.request("POST", "distrun/jobs", {"cell": SWEEP_CELL}))
    assert status == 400
    assert "declares a parameter sweep" in body["message"]
    assert "distrun sweep FILE" in body["message"]
    remote = {**env, "DISTRUN_URL": server.url, "DISTRUN_TOKEN": TOKEN}
    result = distrun(remote, "sweep", write(tmp_path / "sweep.py", SWEEP_CELL))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-3].split()[:4] == ["*", "#0", "0.5", "succeeded"]
    # Katib: only a server's Kubeflow engine takes a sweep whole; here, the server says so.
    katib = distrun(remote, "sweep", str(tmp_path / "sweep.py"), "--katib")
    assert katib.returncode != 0 and "only a Kubeflow engine" in katib.stderr
    alone = distrun(env, "sweep", str(tmp_path / "sweep.py"), "--katib")
    assert alone.returncode != 0 and "--url" in alone.stderr


def test_a_kernel_with_distrun_url_submits_through_the_server(
    env: dict[str, str], server: ServerProcess, tmp_path: Path
) -> None:
    # A data dir of its own: a job the kernel ran in-process would land there, not in the server
    remote = {**env, "DISTRUN_URL": server.url, "DISTRUN_TOKEN": TOKEN,
              "JUPYTER_DATA_DIR": str(tmp_path / "kernel-data")}  # fmt: skip
    kernel = Kernel(remote, tmp_path)
    try:
        assert kernel.execute("%load_ext distrun.kernel_magic") == []
        text = stdout_of(kernel.execute(TWO_WORKERS))
    finally:
        kernel.stop()
    assert "worker-0 | hello from worker-0\n" in text
    job_id = text.split("[distrun] submitted job ")[1].split()[0]
    listed = distrun(env, "ls", "--json", "--url", server.url, "--token", TOKEN)
    assert job_id in {job["id"] for job in json.loads(listed.stdout)}
    assert not (tmp_path / "kernel-data" / "distrun" / "jobs").exists()


# --- progress bars and colours, as training code writes them -----------------------------

BAR_CELL = """\
%framework=generic
%worker=2
import sys, time
print("\\x1b[31mERROR\\x1b[0m coloured", flush=True)
print("hostile\\x1b]52;c;ZXZpbA==\\x07\\x1b]0;owned\\x07\\x1b[2J\\x1b[10;10H\\x1b[?1049h end", flush=True)
for step in range(11):
    sys.stderr.write(f"\\rEpoch {step * 10:3d}%|{'#' * step:<10}|")
    sys.stderr.flush()
    time.sleep(0.15)
sys.stderr.write("\\n")
print("done", flush=True)
"""
HOSTILE = (b"\x1b]52", b"\x1b]0;owned", b"\x1b[2J", b"\x1b[10;10H", b"\x1b[?1049h")
BAR_STATES = re.compile(rb"Epoch +([0-9]+)%")


def run_on_a_terminal(env: dict[str, str], *args: str, columns: int = 120) -> tuple[int, bytes]:
    """`distrun ARGS` with a pseudo-terminal as its stdin, stdout and stderr: its exit code and
    every byte it wrote to the terminal."""
    main, terminal = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "distrun", *args],
        env={**env, "COLUMNS": str(columns), "LINES": "50", "TERM": "xterm-256color"},
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        close_fds=True,
    )
    os.close(terminal)
    written = bytearray()
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the other end closed
            break
        if not chunk:
            break
        written += chunk
    os.close(main)
    return process.wait(WAIT), bytes(written)


def screen_of(written: bytes, columns: int = 120) -> pyte.Screen:
    screen = pyte.Screen(columns, 50)
    pyte.ByteStream(screen).feed(written)
    return screen


def test_on_a_terminal_bars_redraw_in_place_colours_pass_and_nothing_else_acts(
    env: dict[str, str], tmp_path: Path
) -> None:
    code, written = run_on_a_terminal(env, "run", write(tmp_path / "bar.txt", BAR_CELL))
    assert code == 0, written.decode(errors="replace")[-2000:]
    for sequence in HOSTILE:
        assert sequence not in written, f"{sequence!r} reached the terminal"
    screen = screen_of(written)
    rows = [row.rstrip() for row in screen.display if row.strip()]
    for replica in ("worker-0", "worker-1"):
        bars = [row for row in rows if row.startswith(f"{replica} | Epoch")]
        assert bars == [f"{replica} | Epoch 100%|##########|"], rows  # one row, its last state
        assert f"{replica} | hostile end" in rows
        assert f"{replica} | done" in rows
    # The bars were drawn as they advanced, not only once finished.
    states = {int(m.group(1)) for m in BAR_STATES.finditer(written)}
    assert len(states) >= 3, states
    # Colours pass: the ERROR the replica coloured red is red on the screen.
    [(y, row)] = [(y, r) for y, r in enumerate(screen.display) if "worker-0 | ERROR" in r]
    column = row.index("ERROR")
    assert screen.buffer[y][column].fg == "red"
    assert screen.buffer[y][column - 4].fg != "red"  # the prefix keeps its own colour


def test_logs_into_a_file_keep_the_bytes_the_replica_wrote(
    env: dict[str, str], tmp_path: Path
) -> None:
    job_id = distrun(env, "submit", write(tmp_path / "bar.txt", BAR_CELL)).stdout.strip()
    assert distrun(env, "logs", job_id, "-f").returncode == 0
    argv = [sys.executable, "-m", "distrun", "logs", job_id, "--replica", "worker-0"]
    logs = subprocess.run(argv, env=env, capture_output=True, timeout=WAIT, check=True).stdout
    bar = "".join(f"\rEpoch {step * 10:3d}%|{'#' * step:<10}|" for step in range(11))
    assert f"worker-0 | {bar}\n".encode() in logs
    assert b"\x1b]52;c;ZXZpbA==\x07" in logs  # stored and passed on as written


def test_in_a_notebook_bars_update_in_place_and_lines_show_their_last_state(
    kernel: Kernel,
) -> None:
    output = kernel.execute(BAR_CELL)
    assert output[-1][0] == "result" and "state='succeeded'" in output[-1][1]
    text = stdout_of(output)
    assert "worker-0 | Epoch 100%|##########|\n" in text  # no redraws, no \r
    assert "\x1b[31mERROR\x1b[0m coloured" in text
    assert "\x1b]52" not in text and "\x1b[2J" not in text
    shown = [data for kind, data in output if kind in ("display_data", "update_display_data")]
    assert [kind for kind, _ in output].count("display_data") == 1  # one live display
    states = {int(m.group(1)) for data in shown for m in BAR_STATES.finditer(data.encode())}
    assert len(states) >= 3, shown
    assert shown[-1] == ""  # emptied once the job ended
