"""A release's own virtualenv: its wheel, built from its commit (`git archive`, `pip wheel`),
installed with what its metadata requires, so that the version-skew tests run that release's
real code and nothing of this tree. Built once per machine, under
`${DISTRUN_CACHE:-~/.cache/distrun}/releases/<version>-<commit12>/`: a marker written last
says it is complete, a file lock lets concurrent test runs share it."""

import io
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

from tests.k8s.binaries import file_lock
from tests.releases import ROOT, Release

# Beyond the wheel and its requirements: IPython, for the release's kernel magic.
EXTRAS = ["ipython"]
_MARKER = "complete"


def cache_root() -> Path:
    return Path(os.environ.get("DISTRUN_CACHE") or Path.home() / ".cache" / "distrun")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of a release's processes: no PYTHONPATH (nothing of this tree), no
    virtualenv, no distrun or Jupyter settings of the caller."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"}
        and not key.startswith(("DISTRUN_", "JUPYTER"))
    }
    env.update(extra)
    return env


def release_python(release: Release, report: Callable[[str], None] = print) -> Path:
    """The python of `release`'s virtualenv, built first if this machine has none."""
    assert release.commit is not None, f"release {release.version} names no commit"
    home = cache_root() / "releases" / f"{release.version}-{release.commit[:12]}"
    python = home / "venv" / "bin" / "python"
    if (home / _MARKER).is_file():
        return python
    home.mkdir(parents=True, exist_ok=True)
    with file_lock(home / ".lock"):
        if (home / _MARKER).is_file():  # another test run built it while we waited
            return python
        report(f"building release {release.version}'s virtualenv in {home} (once) ...")
        started = time.monotonic()
        _build(release, release.commit, home)
        (home / _MARKER).write_text(f"{release.version} {release.commit}\n")
        report(f"built release {release.version}'s virtualenv in {time.monotonic() - started:.1f}s")
    return python


def _build(release: Release, commit: str, home: Path) -> None:
    src, wheels, venv = home / "src", home / "wheels", home / "venv"
    for directory in (src, wheels, venv):
        shutil.rmtree(directory, ignore_errors=True)
    src.mkdir()
    archive = _run(["git", "-C", str(ROOT), "archive", commit], env=clean_env())
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(src, filter="data")
    # No npm build (the frontend plays no part in client/server skew): hatchling skips the
    # jupyter-builder hook and ships no labextension.
    pip = ["-m", "pip", "--disable-pip-version-check", "--no-input"]
    _run(
        [sys.executable, *pip, "wheel", "--no-deps", "--wheel-dir", str(wheels), str(src)],
        env=clean_env(HATCH_BUILD_NO_HOOKS="true"),
    )
    [wheel] = wheels.glob("distrun-*.whl")
    assert wheel.name.startswith(f"distrun-{release.version}-"), (
        f"commit {commit} builds {wheel.name}, not release {release.version}"
    )
    _run([sys.executable, "-m", "venv", str(venv)], env=clean_env())
    _run([str(venv / "bin" / "python"), *pip, "install", str(wheel), *EXTRAS], env=clean_env())
    shutil.rmtree(src)


def _run(argv: list[str], env: dict[str, str]) -> bytes:
    done = subprocess.run(argv, env=env, capture_output=True, check=False)
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode(errors="replace")
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}):\n{output}")
    return done.stdout
