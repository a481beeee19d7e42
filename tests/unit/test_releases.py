"""One record of releases (releases.json, docs/releasing.md): package.json's version is its
newest release and the changelog's newest section, and the version-skew tests' previous
release is the newest one before it."""

import json
from pathlib import Path

import pytest

from tests.releases import (
    changelog_versions,
    package_version,
    previous_release,
    releases,
)


def test_package_json_the_changelog_and_the_record_name_the_same_newest_release() -> None:
    newest = releases()[0]
    assert newest.version == package_version() == changelog_versions()[0]
    assert newest.commit is None, "the newest release is the commit that sets package.json"


def test_every_release_has_a_changelog_section_and_every_section_a_release() -> None:
    assert changelog_versions() == [release.version for release in releases()]


def test_the_previous_release_is_the_newest_before_the_current_version() -> None:
    previous = previous_release()
    assert previous == releases()[1]
    assert previous.order < releases()[0].order and previous.commit is not None


def record(tmp_path: Path, version: str, *entries: tuple[str, str | None]) -> Path:
    (tmp_path / "package.json").write_text(json.dumps({"version": version}))
    listed = [{"version": v, "date": "2026-12-07", "commit": c} for v, c in entries]
    (tmp_path / "releases.json").write_text(json.dumps({"releases": listed}))
    return tmp_path


COMMIT = "de7ac60fa8f0711d40601cc367ef93bc2f05a5b9"


@pytest.mark.parametrize(
    "entries",
    [
        [],
        [("0.1.0", COMMIT), ("0.2.0", None)],  # oldest first
        [("0.2.0", None), ("0.2.0", COMMIT)],  # twice
        [("0.2.0", None), ("0.1.0", None)],  # an older release without its commit
        [("0.2.0", None), ("0.1.0", "de7ac60")],  # an abbreviated commit
        [("0.2", None)],  # not MAJOR.MINOR.PATCH
    ],
)
def test_a_record_out_of_shape_is_refused(
    tmp_path: Path, entries: list[tuple[str, str | None]]
) -> None:
    with pytest.raises(ValueError):
        releases(record(tmp_path, "0.2.0", *entries))


def test_the_previous_release_is_by_version_order_not_by_text(tmp_path: Path) -> None:
    root = record(tmp_path, "0.10.0", ("0.10.0", None), ("0.9.1", COMMIT), ("0.9.0", COMMIT))
    assert previous_release(root).version == "0.9.1"
    # A current version the record does not have yet (a bump before its entry): its newest.
    root = record(tmp_path, "0.11.0", ("0.10.0", COMMIT), ("0.9.1", COMMIT))
    assert previous_release(root).version == "0.10.0"
