"""`distrun sweep --resume SWEEP` on the local engine, through the real command: a sweep
interrupted with Ctrl-C (SIGINT) after its first trial is gone on with from its trials: the
ended one kept, not run again, the interrupted one left cancelled, the rest started."""

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli_process import cli_env, run_distrun

pytestmark = pytest.mark.integration

CELL = """\
%framework=generic
%worker=1
%sweep.rate=0.5,0.2,0.1,0.05
%parallel=1
%objective=loss:min
import time
import distrun
rate = distrun.params(rate=0.9)["rate"]
for step in range(1, 4):
    print(f"step {step} loss={(1 - rate) ** step:.4f}", flush=True)
    time.sleep(0.5)
"""


def rows(output: str) -> dict[int, list[str]]:
    found = {}
    for line in output.splitlines():
        match = re.match(r"\s*(\*?)\s*#(\d+)\s+(.*)", line)
        if match:
            found[int(match.group(2))] = [match.group(1), *match.group(3).split()]
    return found


@pytest.mark.timeout(300)
def test_an_interrupted_sweep_resumed_runs_only_the_trials_it_had_not_run(
    tmp_path: Path,
) -> None:
    env = cli_env(tmp_path)
    (tmp_path / "sweep.py").write_text(CELL)
    first = subprocess.Popen(
        [sys.executable, "-m", "distrun", "sweep", "sweep.py"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert first.stdout is not None
    said = []
    deadline = time.monotonic() + 240
    for line in first.stdout:  # wait for the first trial's end, then Ctrl-C
        said.append(line)
        if "1/4 done" in line or time.monotonic() > deadline:
            first.send_signal(signal.SIGINT)
            break
    said.append(first.communicate(timeout=120)[0])
    text = "".join(said)
    assert first.returncode != 0, text
    sweep_id = re.search(r"sweep (sweep-\w+)", text).group(1)  # type: ignore[union-attr]
    assert f"distrun sweep --resume {sweep_id}" in text

    again = run_distrun(env, "sweep", "--resume", sweep_id, cwd=tmp_path, timeout=240)
    assert again.returncode == 0, again.stdout + again.stderr
    table = rows(again.stdout)
    assert sorted(table) == [0, 1, 2, 3], again.stdout
    assert [table[n][1] for n in range(4)] == ["0.5", "0.2", "0.1", "0.05"]
    # Trial 1 was cancelled running, or (Ctrl-C before it started) never started until now.
    interrupted = table[1][2] == "cancelled"
    assert f"sweep {sweep_id} resumed: {3 - interrupted} of 4 trials to start" in again.stdout
    assert [table[n][2] for n in (0, 2, 3)] == ["succeeded"] * 3, again.stdout
    assert table[0][0] == "*", "the first run's trial is still the best"
    listed = run_distrun(env, "ls", cwd=tmp_path).stdout
    assert len(re.findall(rf"{sweep_id}/\d", listed)) == 4, listed


def test_resuming_needs_a_sweep_of_yours_and_no_file(tmp_path: Path) -> None:
    env = cli_env(tmp_path)
    unknown = run_distrun(env, "sweep", "--resume", "sweep-nope", cwd=tmp_path)
    assert unknown.returncode != 0 and "no sweep 'sweep-nope' among your jobs" in unknown.stderr
    assert "Traceback" not in unknown.stderr
    (tmp_path / "sweep.py").write_text(CELL)
    both = run_distrun(env, "sweep", "sweep.py", "--resume", "sweep-abc", cwd=tmp_path)
    assert both.returncode != 0 and "give no FILE" in both.stderr
    neither = run_distrun(env, "sweep", cwd=tmp_path)
    assert neither.returncode != 0 and "FILE" in neither.stderr
