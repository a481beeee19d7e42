"""distrun's releases (releases.json, docs/releasing.md): which commit each version is, and the
one the version-skew tests take as the previous release."""

import json
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_CHANGELOG_HEADING = re.compile(r"^## (\S+)", re.MULTILINE)


@dataclass(frozen=True)
class Release:
    version: str
    date: str
    commit: str | None  # None only for the newest: the commit that sets package.json to it

    @property
    def order(self) -> tuple[int, int, int]:
        major, minor, patch = _parse(self.version)
        return major, minor, patch


def _parse(version: str) -> tuple[int, int, int]:
    match = _VERSION.match(version)
    if match is None:
        raise ValueError(f"{version!r} is not a version MAJOR.MINOR.PATCH")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def releases(root: Path = ROOT) -> list[Release]:
    """releases.json's releases, newest first; a ValueError says what is wrong with it."""
    record = json.loads((root / "releases.json").read_text())
    found = [Release(r["version"], r["date"], r["commit"]) for r in record["releases"]]
    if not found:
        raise ValueError("releases.json records no release")
    orders = [release.order for release in found]
    if orders != sorted(set(orders), reverse=True):
        raise ValueError(f"releases.json is not newest first, each once: {orders}")
    for release in found[1:]:
        if release.commit is None or not _COMMIT.match(release.commit):
            raise ValueError(f"release {release.version} names no full commit: {release.commit}")
    if found[0].commit is not None and not _COMMIT.match(found[0].commit):
        raise ValueError(f"release {found[0].version} names no full commit: {found[0].commit}")
    return found


def package_version(root: Path = ROOT) -> str:
    """package.json's version: the Python package's too (hatch-nodejs-version)."""
    version: str = json.loads((root / "package.json").read_text())["version"]
    return version


def changelog_versions(root: Path = ROOT) -> list[str]:
    """CHANGELOG.md's `## VERSION` headings, in their order (newest first)."""
    return _CHANGELOG_HEADING.findall((root / "CHANGELOG.md").read_text())


def previous_release(root: Path = ROOT) -> Release:
    """The newest release older than package.json's version."""
    current = _parse(package_version(root))
    older = [release for release in releases(root) if release.order < current]
    if not older:
        raise ValueError(f"releases.json records no release before {package_version(root)}")
    return older[0]
