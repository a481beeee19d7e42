"""The helm binary, built once from its Go module into a cache dir keyed by version.

Helm has no Debian package here; `go install helm.sh/helm/v3/cmd/helm@<version>` through the
Go module proxy takes a few minutes on 2 cores the first time. The binary is built into a
temporary directory and renamed into place, so a half-built one is never used, under a file lock,
so the suite's background build (tests/prepare.py) and a test that needs it build it once.
"""

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.k8s.binaries import GO_BUILD_FLAGS, file_lock

HELM_VERSION = "v3.22.0"


def helm_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "distrun" / f"helm-{HELM_VERSION}"


def ensure_helm() -> Path:
    binary = helm_dir() / "helm"
    if binary.exists():
        return binary
    go = shutil.which("go") or "/usr/local/go/bin/go"
    binary.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(binary.parent / ".lock"):
        if binary.exists():  # built by another process while this one waited
            return binary
        with tempfile.TemporaryDirectory(dir=binary.parent) as build:
            env = {**os.environ, "GOBIN": build, "CGO_ENABLED": "0"}
            package = f"helm.sh/helm/v3/cmd/helm@{HELM_VERSION}"
            command = [go, "install", *GO_BUILD_FLAGS, "-ldflags=-s -w", package]
            built = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if built.returncode != 0:
                raise RuntimeError(f"{' '.join(command)} failed:\n{built.stderr[-4000:]}")
            os.replace(Path(build) / "helm", binary)
    return binary


if __name__ == "__main__":
    print(ensure_helm())
