"""The two ways a replica's process tree is read (/proc directly, psutil) agree on a real tree."""

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from distrun.engines.local import capabilities
from distrun.engines.local.usage_sampler import ProcTable, PsutilTable, UsageSampler

pytestmark = pytest.mark.integration

TREE = """
import subprocess, sys, time
children = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            for _ in range(2)]
hoard = b"x" * (64 * 1024 * 1024)
end = time.time() + 0.5
while time.time() < end:
    pass
print("ready", flush=True)
time.sleep(60)
"""


@pytest.fixture
def tree() -> Iterator["subprocess.Popen[str]"]:
    process = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    children = psutil.Process(process.pid).children()
    yield process
    for child in children:  # the tree's own, by pid
        with contextlib.suppress(psutil.Error):
            child.kill()
    process.kill()
    process.wait()


def test_proc_and_psutil_read_the_same_tree_alike(tree: "subprocess.Popen[str]") -> None:
    if not capabilities.current().proc:
        pytest.skip("no /proc to read here: psutil alone")
    roots = {"worker-0": tree.pid}
    by_proc, by_psutil = ProcTable(), PsutilTable()
    found = by_proc.trees(roots)
    assert sorted(found["worker-0"]) == sorted(by_psutil.trees(roots)["worker-0"])
    assert len(found["worker-0"]) == 3 and found["worker-0"][0] == tree.pid
    proc, psutil_reading = by_proc.read(tree.pid), by_psutil.read(tree.pid)
    assert proc is not None and psutil_reading is not None
    assert abs(proc[0] - psutil_reading[0]) <= 0.05  # CPU seconds, tick resolution
    assert abs(proc[1] - psutil_reading[1]) <= 1024 * 1024  # resident bytes
    assert proc[1] > 64 * 1024 * 1024


def test_a_sample_sums_the_tree_and_a_dead_process_leaves_it(
    tree: "subprocess.Popen[str]",
) -> None:
    sampler = UsageSampler()
    first = sampler.sample({"worker-0": tree.pid})["worker-0"]
    assert first.processes == 3 and first.cpu_percent == 0.0  # nothing to compare with yet
    assert first.rss_bytes > 64 * 1024 * 1024
    time.sleep(0.2)
    assert sampler.sample({"worker-0": tree.pid})["worker-0"].cpu_percent < 50  # asleep
    tree.kill()
    tree.wait()
    left = sampler.sample({"worker-0": tree.pid}).get("worker-0")
    assert left is None or left.processes <= 2  # its children outlive it, until the rescan
