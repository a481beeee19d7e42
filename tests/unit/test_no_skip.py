"""DISTRUN_NO_SKIP=1 (tests/no_skip.py): a skip fails, an expected one does not, and nothing
changes without the switch."""

from pathlib import Path

import pytest

from tests.no_skip import Expected, parse

pytest_plugins = ["pytester"]

CONFTEST = """
from pathlib import Path

from tests.no_skip import configure


def pytest_configure(config):
    configure(config, Path(__file__).with_name("expected_skips.txt"))
"""

# As tests/parts.py groups every test under xdist: its node id in a worker ends in `@group`.
GROUPED = """
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.xdist_group("g"))
"""

TESTS = """
import pytest

def test_runs():
    pass

def test_skips_at_run_time():
    pytest.skip("a binary is missing")

@pytest.mark.skipif(True, reason="a module is missing")
def test_skipif():
    pass

def test_expected():
    pytest.skip("by design here")

@pytest.mark.xfail(reason="a known bug")
def test_xfail():
    assert False
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_some=TESTS)
    pytester.makefile(".txt", expected_skips="test_some.py::test_expected  # skips by design\n")
    return pytester


def test_a_skip_fails_under_the_switch_naming_test_and_reason(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTRUN_NO_SKIP", "1")
    result = project.runpytest()
    # The skipif mark skips in set-up: an error; pytest.skip in the body: a failure.
    result.assert_outcomes(passed=1, failed=1, errors=1, skipped=1, xfailed=1)
    for line in (
        "test_some.py::test_skips_at_run_time skipped under DISTRUN_NO_SKIP=1: a binary is missing",
        "test_some.py::test_skipif skipped under DISTRUN_NO_SKIP=1: a module is missing",
    ):
        result.stdout.fnmatch_lines([line])


def test_an_expected_skip_is_allowed_in_an_xdist_worker_whose_node_ids_carry_a_group(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DISTRUN_NO_SKIP", "1")
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    project.makeconftest(CONFTEST + GROUPED)
    result = project.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup"
    )
    result.assert_outcomes(passed=1, failed=1, errors=1, skipped=1, xfailed=1)


def test_nothing_changes_without_the_switch(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISTRUN_NO_SKIP", raising=False)
    project.runpytest().assert_outcomes(passed=1, skipped=3, xfailed=1)


def test_a_skip_while_collecting_fails_under_the_switch(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    project.makepyfile(
        test_needs='import pytest\npytest.importorskip("no_such_module_here")\n'
        "def test_it():\n    pass\n"
    )
    monkeypatch.setenv("DISTRUN_NO_SKIP", "1")
    result = project.runpytest("test_needs.py")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(
        ["*test_needs.py skipped while collecting under DISTRUN_NO_SKIP=1*no_such_module_here*"]
    )
    monkeypatch.delenv("DISTRUN_NO_SKIP")
    project.runpytest("test_needs.py").assert_outcomes(skipped=1)


def test_the_allow_list_has_a_section_per_pass() -> None:
    text = (
        "tests/a.py  # always\n"
        "[portable]\ntests/b.py::test_x  # only portable\n"
        "[native]\ntests/c.py  # only native\n"
    )
    assert [e.pattern for e in parse(text, portable=True)] == ["tests/a.py", "tests/b.py::test_x"]
    assert [e.pattern for e in parse(text, portable=False)] == ["tests/a.py", "tests/c.py"]
    with pytest.raises(ValueError, match="says no why"):
        parse("tests/a.py\n", portable=False)


def test_a_pattern_matches_the_node_its_children_and_its_parameters() -> None:
    entry = Expected("tests/a.py::test_x", "why")
    assert entry.matches("tests/a.py::test_x")
    assert entry.matches("tests/a.py::test_x[setpriv]")
    assert not entry.matches("tests/a.py::test_xy")
    assert Expected("tests/a.py", "why").matches("tests/a.py::Class::test_y")
    assert Expected("*[preexec_fn]", "why").matches("tests/b.py::test_z[preexec_fn]")


def test_the_repository_allow_list_parses() -> None:
    text = (Path(__file__).parent.parent / "expected_skips.txt").read_text()
    assert parse(text, portable=False) and parse(text, portable=True)
