"""Terminal rendering: replica prefixes, colours, status lines, tables and exit codes."""

import io
from typing import Any

import pytest

from distrun.client.console import (
    Console,
    LiveRows,
    Shown,
    exit_code,
    fit,
    format_duration,
    job_details,
    jobs_table,
    status_line,
    use_color,
)
from distrun.core.logs import LogLine


def job(state: str = "running", running: int = 0, **extra: Any) -> dict[str, Any]:
    names = ["master-0", "worker-0", "worker-1"]
    data: dict[str, Any] = {
        "id": "mnist-ab12c",
        "name": "mnist",
        "owner": "alice",
        "engine": "local",
        "framework": "pytorch",
        "state": state,
        "created_at": 1000.0,
        "started_at": None,
        "finished_at": None,
        "reason": None,
        "failed_replica": None,
        "last_lines": [],
        "replicas_running": running,
        "replicas": [
            {"name": n, "state": state, "exit_code": None, "restarts": 0, "reason": None}
            for n in names
        ],
    }
    data.update(extra)
    return data


def test_prefix_is_padded_to_the_longest_replica_name() -> None:
    console = Console(["master-0", "worker-10", "ps-0"])
    assert console.format_line(LogLine("master-0", 0, 0.0, "hi")) == "master-0  | hi"
    assert console.format_line(LogLine("worker-10", 0, 0.0, "x")) == "worker-10 | x"
    assert console.format_line(LogLine("ps-0", 3, 0.0, "")) == "ps-0      | "


def test_an_unknown_replica_widens_the_prefix_instead_of_breaking() -> None:
    console = Console(["worker-0"])
    assert console.prefix("launcher-0") == "launcher-0 | "
    assert console.prefix("worker-0") == "worker-0   | "


def test_colours_differ_per_replica_and_reset_after_the_prefix() -> None:
    console = Console(["worker-0", "worker-1"], color=True)
    first, second = console.prefix("worker-0"), console.prefix("worker-1")
    assert first.startswith("\x1b[") and first.endswith("\x1b[0m")
    assert first != second and "worker-0 | " in first


def test_a_replica_own_colour_codes_are_reset_at_the_end_of_its_line() -> None:
    console = Console(["worker-0"], color=True)
    assert console.format_line(LogLine("worker-0", 0, 0.0, "\x1b[31mred")).endswith("\x1b[0m")
    plain = Console(["worker-0"])
    assert plain.format_line(LogLine("worker-0", 0, 0.0, "\x1b[31mred")) == "worker-0 | \x1b[31mred"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_tty_and_only_without_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_color(Tty()) is True
    assert use_color(io.StringIO()) is False
    monkeypatch.setenv("NO_COLOR", "")
    assert use_color(Tty()) is False


def test_status_lines_say_where_the_job_is() -> None:
    assert status_line(job("running", 3)) == "[distrun] job mnist-ab12c running (3/3 replicas)"
    assert status_line(job("pending")) == "[distrun] job mnist-ab12c pending (3 replicas)"
    assert (
        status_line(job("pending", reason="waiting for a free GPU"))
        == "[distrun] job mnist-ab12c pending: waiting for a free GPU"
    )
    failed = job("failed", reason="worker-1 exited with code 1")
    assert status_line(failed) == "[distrun] job mnist-ab12c failed: worker-1 exited with code 1"
    done = job("succeeded", started_at=10.0, finished_at=22.5)
    assert status_line(done) == "[distrun] job mnist-ab12c succeeded in 12s"
    assert status_line(job("cancelled")) == "[distrun] job mnist-ab12c cancelled"


def test_status_change_reports_only_changes_of_state_or_running_count() -> None:
    console = Console()
    seen = [
        console.status_change(update)
        for update in (job("pending"), job("pending"), job("running", 1), job("running", 1),
                       job("running", 3), job("succeeded"))
    ]  # fmt: skip
    assert seen == [
        "[distrun] job mnist-ab12c pending (3 replicas)",
        None,
        "[distrun] job mnist-ab12c running (1/3 replicas)",
        None,
        "[distrun] job mnist-ab12c running (3/3 replicas)",
        "[distrun] job mnist-ab12c succeeded",
    ]


def test_status_change_learns_replica_names_for_padding() -> None:
    console = Console()
    console.status_change(job())
    assert console.prefix("ps-0") == "ps-0     | "


@pytest.mark.parametrize(
    ("state", "code"), [("succeeded", 0), ("failed", 1), ("cancelled", 1), ("running", 1)]
)
def test_exit_code_is_zero_only_for_a_succeeded_job(state: str, code: int) -> None:
    assert exit_code(state) == code


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.42, "0.4s"), (-1, "0.0s"), (12, "12s"), (185, "3m05s"), (7620, "2h07m"), (273600, "3d04h")],
)
def test_durations_are_short(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_jobs_table_has_aligned_columns_with_age_and_duration() -> None:
    running = job("running", 2, started_at=1030.0)
    finished = job("succeeded", id="other-zz9zz", started_at=1000.0, finished_at=1090.0)
    table = jobs_table([running, finished], now=1100.0).splitlines()
    assert table[0].split() == ["ID", "STATE", "FRAMEWORK", "REPLICAS", "AGE", "DURATION"]
    assert table[1].split() == ["mnist-ab12c", "running", "pytorch", "2/3", "1m40s", "1m10s"]
    assert table[2].split() == ["other-zz9zz", "succeeded", "pytorch", "0/3", "1m40s", "1m30s"]
    assert table[1].index("running") == table[0].index("STATE")


def test_a_sweeps_trials_are_listed_together_in_trial_order_with_their_sweep() -> None:
    trials = [
        job("succeeded", id=f"fit-t{n}-x", spec={"env": {"DISTRUN_SWEEP": f"sweep-a1/{n}"}})
        for n in (1, 0)
    ]
    plain = job("running", id="plain-x")
    table = jobs_table([trials[0], plain, trials[1]], now=1100.0).splitlines()
    assert table[0].split()[-1] == "SWEEP"
    assert [row.split()[0] for row in table[1:]] == ["fit-t0-x", "fit-t1-x", "plain-x"]
    assert table[1].split()[-1] == "sweep-a1/0"
    assert table[3].split()[-2:] == ["1m40s", "-"], "no sweep, no sweep cell"


def test_job_details_show_every_replica_and_the_failing_lines() -> None:
    failed = job(
        "failed",
        reason="worker-1 exited with code 1",
        failed_replica="worker-1",
        last_lines=["Traceback (most recent call last):", "ValueError: boom"],
    )
    failed["replicas"][2]["exit_code"] = 1
    text = job_details(failed)
    assert "reason:    worker-1 exited with code 1" in text
    assert any(line.startswith("worker-1") and " 1 " in line for line in text.splitlines())
    assert text.endswith("last lines of worker-1:\n  Traceback (most recent call last):\n"
                         "  ValueError: boom")  # fmt: skip


def test_job_details_say_which_device_or_share_each_replica_got() -> None:
    running = job("running")
    share = "50% of GPU 0 (GPU-a); compute share enforced by CUDA MPS"
    running["replicas"][1]["gpu"] = share
    lines = job_details(running).splitlines()
    assert [line for line in lines if "GPU:" in line] == [
        f"{running['replicas'][1]['name']}  GPU: {share}"
    ]


def test_a_console_for_people_shows_lines_as_a_terminal_would_and_files_get_them_raw() -> None:
    raw = "\x1b[32mok\x1b[0m 10%\r\x1b[32mok\x1b[0m 20%\x1b]0;title\x07"
    line = LogLine("worker-0", 0, 0.0, raw)
    assert Console(["worker-0"], shown=Shown.RAW).format_line(line) == f"worker-0 | {raw}"
    visible = Console(["worker-0"], shown=Shown.VISIBLE).format_line(line)
    assert visible == "worker-0 | \x1b[32mok\x1b[0m 20%"
    assert Console(["worker-0"], shown=Shown.PLAIN).format_line(line) == "worker-0 | ok 20%"


def test_unfinished_lines_are_kept_per_replica_until_their_line_finishes() -> None:
    console = Console(["worker-0", "worker-1"])
    console.unfinished([LogLine("worker-1", 3, 0.0, "b 50%"), LogLine("worker-0", 7, 0.0, "a 1%")])
    assert console.unfinished_rows() == ["worker-0 | a 1%", "worker-1 | b 50%"]
    assert not console.finished([LogLine("worker-0", 6, 0.0, "an earlier line")])
    assert console.finished([LogLine("worker-0", 7, 0.0, "a 100%")])
    assert console.unfinished_rows() == ["worker-1 | b 50%"]
    console.unfinished([LogLine("worker-1", 3, 0.0, "")])  # taken back
    assert console.unfinished_rows() == []


def test_live_rows_go_back_up_over_themselves_before_anything_is_printed() -> None:
    out = io.StringIO()
    rows = LiveRows(out)
    rows.show(["w-0 | 10%", "w-1 | 20%"])
    rows.print("w-0 | a line")
    rows.show([])
    assert out.getvalue() == (
        "w-0 | 10%\nw-1 | 20%\n\x1b[2A\r\x1b[Jw-0 | a line\nw-0 | 10%\nw-1 | 20%\n\x1b[2A\r\x1b[J"
    )


def test_fit_cuts_to_the_visible_width_and_keeps_and_closes_colours() -> None:
    assert fit("abcdef", 4) == "abcd"
    assert fit("\x1b[31mabc\x1b[0mdef", 4) == "\x1b[31mabc\x1b[0md\x1b[0m"
    assert fit("ab", 10) == "ab"


def test_a_restarted_job_shows_its_attempt_why_the_last_one_ended_and_its_timeline() -> None:
    failure = {
        "time": 1010.25,
        "kind": "failed",
        "attempt": 1,
        "text": "worker-1 failed: killed by SIGKILL (out of memory?)",
        "replica": "worker-1",
        "exit_code": -9,
        "signal": "SIGKILL",
        "oom": False,
        "step": None,
    }
    timeline = [
        {**failure, "time": 1000.0, "kind": "submitted", "text": "submitted"},
        {**failure, "time": 1001.0, "kind": "started", "text": "attempt 1 started"},
        failure,
        {**failure, "time": 1010.5, "kind": "started", "attempt": 2, "text": "attempt 2 started"},
    ]
    running = job(
        "running", 3, attempt=2, max_restarts=3, restart_scope="job", last_failure=failure
    )
    running["timeline"] = timeline
    assert status_line(running) == (
        "[distrun] job mnist-ab12c running (3/3 replicas): attempt 2 of 4, after worker-1 "
        "failed: killed by SIGKILL (out of memory?)"
    )
    text = job_details(running)
    assert "attempt:   2 of 4 (a failure restarts the whole job)" in text
    assert "last failure: worker-1 failed: killed by SIGKILL (out of memory?)" in text
    rows = text.split("timeline:\n")[1].splitlines()
    assert [row.split("  ", 3)[2:] for row in rows] == [
        ["attempt 1", "submitted"],
        ["attempt 1", "attempt 1 started"],
        ["attempt 1", "worker-1 failed: killed by SIGKILL (out of memory?)"],
        ["attempt 2", "attempt 2 started"],
    ]
    assert rows[2].split()[0].endswith(".250")
    assert "attempt" not in status_line(job("running", 3)), "a first attempt says nothing more"
