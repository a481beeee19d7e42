"""DISTRUN_NO_SKIP=1: every skip is a failure, except those `tests/expected_skips.txt` names.

A tier that skips because a module, a binary or a cluster is missing passes without a word; in
CI that hides a test that never ran. Under the switch a skip at run time (`pytest.skip`, a
`skipif` or `skip` mark, `importorskip` in a fixture or a test) fails the test, and a skip while
collecting (a module-level `importorskip` or `pytest.skip(allow_module_level=True)`) fails the
collection, each naming the test and the skip's reason. `xfail` is not a skip and is left alone.

The allow-list holds one pattern a line, each with its reason after a `#`: a node id, a node-id
prefix (`tests/unit/test_inotify.py`, `...::test_name`), or a pattern where `*` is any text
(`*[preexec_fn]`).
A `[portable]` line starts entries that apply only when DISTRUN_LOCAL_PORTABLE=1, `[native]`
those only when it is unset, `[always]` those for both (the default)."""

import os
import re
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path

import pytest

VARIABLE = "DISTRUN_NO_SKIP"
EXPECTED_SKIPS = Path(__file__).with_name("expected_skips.txt")
SECTIONS = {"always", "portable", "native"}


@dataclass(frozen=True)
class Expected:
    pattern: str
    why: str

    def matches(self, nodeid: str) -> bool:
        wildcard = ".*".join(map(re.escape, self.pattern.split("*")))
        children = (self.pattern.rstrip(":") + "::", self.pattern + "[")
        return nodeid.startswith(children) or re.fullmatch(wildcard, nodeid) is not None


def parse(text: str, portable: bool) -> list[Expected]:
    """The entries of an allow-list that apply to this pass (portable or native)."""
    entries: list[Expected] = []
    section = "always"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            if section not in SECTIONS:
                raise ValueError(f"expected skips, line {number}: unknown section [{section}]")
            continue
        pattern, _, why = line.partition("#")
        if not why.strip():
            raise ValueError(f"expected skips, line {number}: {pattern.strip()} says no why")
        if section == "always" or (section == "portable") == portable:
            entries.append(Expected(pattern.strip(), why.strip()))
    return entries


def without_group(nodeid: str) -> str:
    """The node id without the `@group` that pytest-xdist's loadgroup appends in a worker (an
    `@` after the last `]`, as xdist tells them apart)."""
    at = nodeid.rfind("@")
    return nodeid[:at] if at > nodeid.rfind("]") else nodeid


def skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    text = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return " ".join(text.removeprefix("Skipped: ").split())  # one line (some reasons are banners)


class NoSkip:
    """The plugin: turns each skip that no entry expects into a failure."""

    def __init__(self, expected: list[Expected]) -> None:
        self.expected = expected

    def allowed(self, nodeid: str) -> bool:
        return any(entry.matches(without_group(nodeid)) for entry in self.expected)

    def _fail(self, report: pytest.TestReport | pytest.CollectReport, what: str) -> None:
        reason = skip_reason(report)
        report.outcome = "failed"
        report.longrepr = (
            f"{report.nodeid} {what} under {VARIABLE}=1: {reason}\n"
            f"(install what it needs, or add it to {EXPECTED_SKIPS.name} with the reason it "
            "may skip)"
        )

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        # A skip in set-up (a skipif mark, a fixture's skip) then reads as an error, in the
        # test's body as a failure.
        if report.skipped and not hasattr(report, "wasxfail") and not self.allowed(item.nodeid):
            self._fail(report, "skipped")
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(
        self, collector: pytest.Collector
    ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
        report = yield
        if report.skipped and not self.allowed(report.nodeid):
            self._fail(report, "skipped while collecting")
        return report


def configure(config: pytest.Config, expected_skips: Path = EXPECTED_SKIPS) -> None:
    """Registers the plugin when DISTRUN_NO_SKIP=1 (from a conftest's pytest_configure)."""
    if os.environ.get(VARIABLE) != "1":
        return
    portable = os.environ.get("DISTRUN_LOCAL_PORTABLE", "").strip() not in ("", "0")
    expected = parse(expected_skips.read_text(), portable)
    config.pluginmanager.register(NoSkip(expected), "distrun-no-skip")
