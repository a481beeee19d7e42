"""tests/parts.py: the two parts of the suite, and the xdist groups that start each cluster once,
with real pytest-xdist workers (a pytest whose node ids xdist's loadgroup cannot read, as 9.2's,
fails here)."""

import os
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

# A tier's tests: six on a stand-in for a session cluster (their group is the cluster), six not.
TIER = """
import os
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def kube_cluster():
    return "a cluster"


def record(name):
    Path(os.environ["RECORD"], name).write_text(os.environ.get("PYTEST_XDIST_WORKER", "none"))


@pytest.mark.parametrize("n", range(6))
def test_on_the_cluster(kube_cluster, n):
    record(f"{__name__}-cluster-{n}")


@pytest.mark.parametrize("n", range(6))
def test_without_it(n):
    record(f"{__name__}-plain-{n}")
"""


@pytest.fixture
def record(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tests/k8s (part `built`) and tests/unit (part `own`) with TIER's tests each; returns
    the folder where each test records the worker that ran it."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    monkeypatch.delenv("DISTRUN_TEST_PART", raising=False)
    recorded = pytester.mkdir("record")
    monkeypatch.setenv("RECORD", str(recorded))
    tests = pytester.mkdir("tests")
    (tests / "conftest.py").write_text('pytest_plugins = ["tests.parts"]\n')
    for tier in ("k8s", "unit"):
        (tests / tier).mkdir()
        (tests / tier / f"test_{tier}_tier.py").write_text(TIER)
    return recorded


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def test_every_test_of_a_cluster_runs_in_one_worker(
    pytester: pytest.Pytester, record: Path
) -> None:
    run(pytester, "-n", "3", "--dist", "loadgroup", "tests").assert_outcomes(passed=24)
    on_the_cluster = {path.read_text() for path in record.glob("*-cluster-*")}
    assert len(on_the_cluster) == 1, on_the_cluster
    assert on_the_cluster <= {f"gw{n}" for n in range(3)}


@pytest.mark.parametrize(("part", "tier"), [("own", "unit"), ("built", "k8s")])
def test_a_part_runs_its_tiers_alone(
    pytester: pytest.Pytester, record: Path, monkeypatch: pytest.MonkeyPatch, part: str, tier: str
) -> None:
    monkeypatch.setenv("DISTRUN_TEST_PART", part)
    run(pytester, "tests").assert_outcomes(passed=12)
    assert {path.name.split("-")[0] for path in record.iterdir()} == {f"test_{tier}_tier"}


def test_an_unknown_part_is_refused_in_words(
    pytester: pytest.Pytester, record: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTRUN_TEST_PART", "cluster")
    result = run(pytester, "tests")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*DISTRUN_TEST_PART='cluster': write one of own, built*"])
    assert not os.listdir(record)
