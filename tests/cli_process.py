"""The real `distrun` command as a subprocess, over a state directory of its own."""

import os
import subprocess
import sys
from pathlib import Path

SERVER_EXT = Path(__file__).resolve().parents[1] / "server_ext"


def cli_env(home: Path) -> dict[str, str]:
    """The environment of every child: our package, and jupyter dirs inside `home`."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DISTRUN_", "JUPYTER_")) and key != "NO_COLOR"
    }
    environ.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(SERVER_EXT), os.environ.get("PYTHONPATH")])),
        JUPYTER_DATA_DIR=str(home / "data"),  # the state dir is <data>/distrun on both sides
        JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        PYTHONUNBUFFERED="1",
    )
    return environ


def run_distrun(
    env: dict[str, str],
    *args: str,
    cwd: Path | None = None,
    timeout: float = 120.0,
    python: Path | str = sys.executable,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(python), "-m", "distrun", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
