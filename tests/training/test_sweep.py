"""A real parameter sweep from the command line: `distrun sweep FILE` runs six trials of a
PyTorch DDP job (a master and a worker each, gloo) on the local engine, two at a time, reads
each trial's loss from its log, stops the trials that fall behind (the median rule) and prints
the results with the best trial marked."""

import re
import subprocess
from pathlib import Path

import pytest

from tests.cli_process import cli_env, run_distrun

from .harness import needs_module

pytestmark = [pytest.mark.integration, pytest.mark.training, needs_module("torch")]

RATES = (0.3, 0.1, 0.03, 0.01, 0.003, 0.001)

SWEEP_CELL = (Path(__file__).parents[2] / "examples" / "sweep_lr.ipy").read_text()


def run_cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_distrun(cli_env(home), *args, cwd=home, timeout=540)


def table_rows(output: str) -> dict[int, list[str]]:
    """The results table's rows by trial number."""
    rows = {}
    for line in output.splitlines():
        match = re.match(r"\s*(\*?)\s*#(\d+)\s+(.*)", line)
        if match:
            rows[int(match.group(2))] = [match.group(1), *match.group(3).split()]
    return rows


@pytest.mark.timeout(600)
def test_a_cli_sweep_of_six_ddp_trials_finds_the_best_and_stops_the_ones_behind(
    tmp_path: Path,
) -> None:
    (tmp_path / "sweep.py").write_text(SWEEP_CELL)
    done = run_cli(tmp_path, "sweep", "sweep.py")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = table_rows(done.stdout)
    assert sorted(rows) == list(range(6)), done.stdout
    for number, rate in enumerate(RATES):
        assert float(rows[number][1]) == rate, "each trial ran its own rate"
    best = [number for number, row in rows.items() if row[0] == "*"]
    assert best == [0], f"the largest stable rate learns fastest:\n{done.stdout}"
    assert rows[0][2] == "succeeded"
    stopped = {number for number, row in rows.items() if row[2] == "stopped"}
    assert {4, 5} <= stopped, f"the slowest rates fall behind the median:\n{done.stdout}"
    assert 0 not in stopped and 1 not in stopped
    losses = {number: float(row[3]) for number, row in rows.items()}
    assert losses[0] < losses[1] < losses[4], losses

    listed = run_cli(tmp_path, "ls")
    assert listed.returncode == 0, listed.stderr
    trials = [line for line in listed.stdout.splitlines() if re.search(r"sweep-\w+/\d", line)]
    assert len(trials) == 6, listed.stdout


TPE_CELL = SWEEP_CELL.replace(
    "%sweep.lr=0.3,0.1,0.03,0.01,0.003,0.001\n", "%sweep.lr=loguniform(0.001,0.9)\n"
).replace("%earlyStop=median:3\n", "%search=tpe\n%trials=6\n%seed=2\n")


@pytest.mark.timeout(600)
def test_a_tpe_sweep_of_ddp_trials_proposes_better_rates_than_its_first(tmp_path: Path) -> None:
    assert "%search=tpe" in TPE_CELL and "loguniform" in TPE_CELL
    (tmp_path / "sweep.py").write_text(TPE_CELL)
    done = run_cli(tmp_path, "sweep", "sweep.py")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = table_rows(done.stdout)  # [best mark, lr, by, state, loss, seconds]
    assert sorted(rows) == list(range(6)), done.stdout
    assert all(row[3] == "succeeded" for row in rows.values()), done.stdout
    assert {row[2] for row in rows.values()} == {"random", "tpe"}, done.stdout
    assert [rows[n][2] for n in range(3)] == ["random"] * 3, "the first draws are at random"
    losses = {number: float(row[4]) for number, row in rows.items()}
    best = min(losses, key=lambda n: losses[n])
    assert rows[best][0] == "*", done.stdout
    assert losses[best] < losses[0], f"no trial did better than the first:\n{done.stdout}"
