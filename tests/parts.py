"""The suite in two parts, so that the one needing builds can wait for them while the other runs.

`built`: the tiers that need what tests/prepare.py builds once per machine (a control plane and
the real controllers from Go modules, helm, the hub's proxy); `own`: every other tier, which
needs only this checkout and its virtualenv. `.ci/test` runs `own` while prepare.py builds in
the background, then `built`. `DISTRUN_TEST_PART=own|built` selects one; unset, both run.

Under pytest-xdist (`-n N --dist loadgroup`, as `.ci/test` runs both parts) each module's tests,
and every test of one cluster, run in one worker (`group_of`).

Before a test that needs a build, `pytest_runtest_protocol` below waits for it (or builds it)
outside the test's timeout: pytest-timeout's wrapper is inside this one.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

BUILT_TIERS = ("k8s", "helm", "hub")
PARTS = ("own", "built")


def part_of(item: pytest.Item) -> str:
    """`built` for a test in tests/<a tier of BUILT_TIERS>/, else `own`."""
    where = Path(str(item.path)).resolve().relative_to(item.config.rootpath.resolve()).parts
    return (
        "built" if where[:1] == ("tests",) and where[1:2] in {(t,) for t in BUILT_TIERS} else "own"
    )


# A session-scoped cluster is started once in each xdist worker that runs a test needing it:
# the tests of one cluster go to one worker (their xdist group), as do a module's tests (its
# module-scoped servers and deployments start once).
CLUSTERS = ("katib_cluster", "controllers_cluster", "kube_cluster")


def group_of(item: pytest.Item) -> str:
    fixtures = getattr(item, "fixturenames", ())
    cluster = next((fixture for fixture in CLUSTERS if fixture in fixtures), None)
    return cluster or item.nodeid.split("::")[0]


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(group_of(item)))
    part = os.environ.get("DISTRUN_TEST_PART")
    if not part:
        return
    if part not in PARTS:
        raise pytest.UsageError(f"DISTRUN_TEST_PART={part!r}: write one of {', '.join(PARTS)}")
    kept = [item for item in items if part_of(item) == part]
    deselected = [item for item in items if part_of(item) != part]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def prebuilt() -> dict[str, Callable[[], object]]:
    """Fixture name -> the builds its set-up waits for (the Kubernetes tier's own are in
    tests/k8s/conftest.py)."""
    from tests.compat.release_venv import release_python
    from tests.gateway.eg_venv import ensure_eg_venv
    from tests.helm.helm_binary import ensure_helm
    from tests.hub.proxy import ensure_proxy
    from tests.releases import previous_release

    return {
        "previous_python": lambda: release_python(previous_release()),
        "helm": ensure_helm,
        "eg_python": ensure_eg_venv,
        "hub": lambda: (ensure_eg_venv(), ensure_helm(), ensure_proxy()),
    }


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    fixtures = getattr(item, "fixturenames", ())
    for fixture, build in prebuilt().items():
        if fixture in fixtures:
            try:
                build()
            except Exception as error:  # noqa: BLE001  (the fixture's call fails the test)
                item.add_report_section("setup", "build", f"building for {fixture}: {error}")
    yield
