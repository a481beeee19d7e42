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

SWEEP_CELL = f"""\
%framework=pytorch
%worker=1
%env=OMP_NUM_THREADS=1
%sweep.lr={",".join(map(str, RATES))}
%parallel=2
%objective=loss:min
%earlyStop=median:3
import time

import distrun
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

params = distrun.params(lr=0.1)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(1, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=params["lr"])
x = torch.linspace(-1, 1, 64).unsqueeze(1)
y = 3 * x
for step in range(1, 9):
    loss = ((model(x) - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if dist.get_rank() == 0:
        print(f"step {{step}} loss={{loss.item():.6f}}", flush=True)
    time.sleep(0.4)
dist.destroy_process_group()
"""


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
