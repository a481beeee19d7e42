"""Enterprise Gateway's own virtualenv, built on first use into a cache dir keyed by version.

EG 3.3.0 pins jupyter_server<2, so it cannot share the test environment. The venv is created
once (about a minute) and reused; a marker file written last tells a finished venv from a
half-built one, so an interrupted build is redone rather than trusted, and a file lock lets the
suite's background build (tests/prepare.py) and a test that needs it share one build.
"""

import os
import subprocess
import sys
from pathlib import Path

from tests.k8s.binaries import file_lock

EG_VERSION = "3.3.0"
EG_REQUIREMENTS = (f"jupyter-enterprise-gateway=={EG_VERSION}", "ipykernel<7")
_MARKER = ".distrun-complete"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "distrun"


def eg_venv_dir() -> Path:
    return cache_root() / f"enterprise-gateway-{EG_VERSION}" / "venv"


def ensure_eg_venv() -> Path:
    """The venv's python, building the venv first when it is missing or unfinished."""
    venv = eg_venv_dir()
    python = venv / "bin" / "python"
    if (venv / _MARKER).exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(venv.parent / ".lock"):
        if (venv / _MARKER).exists():  # built by another process while this one waited
            return python
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "--quiet"]
        subprocess.run([*pip, *EG_REQUIREMENTS], check=True)
        (venv / _MARKER).write_text(" ".join(EG_REQUIREMENTS) + "\n")
    return python


if __name__ == "__main__":
    print(ensure_eg_venv())
