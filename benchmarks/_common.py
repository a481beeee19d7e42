"""What every benchmark shares: the repo's package on the path, statistics, skipping."""

import json
import os
import socket
import statistics
import sys
from pathlib import Path
from typing import Any, NoReturn

REPO = Path(__file__).resolve().parents[1]


def use_repo_package() -> None:
    """Import distrun from this checkout, here and in every process the benchmark starts
    (the local engine's supervisor runs as `python -m distrun.supervisor`)."""
    source = str(REPO / "server_ext")
    sys.path.insert(0, source)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [source, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    )


def skip(why: str) -> NoReturn:
    print(f"SKIPPED: {why}")
    sys.exit(0)


def require_local_engine() -> None:
    """Skip, saying why, where the local engine cannot run (it needs Linux 5.3+)."""
    from distrun.engines.local.engine import unsupported_platform_reason

    reason = unsupported_platform_reason()
    if reason is not None:
        skip(reason)


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], fraction: float) -> float:
    """The value below which `fraction` of the values fall (nearest rank)."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * len(ordered)) - 1))
    return ordered[index]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def ms(seconds: float) -> str:
    return f"{seconds * 1000:8.1f} ms"


def server_command(
    root: Path, port: int, token: str, config: dict[str, Any]
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of a jupyter_server on 127.0.0.1:`port` with its own config,
    data and runtime directories under `root`; `config` is written as its
    jupyter_server_config.json."""
    config_dir = root / "config"
    config_dir.mkdir(parents=True)
    (config_dir / "jupyter_server_config.json").write_text(json.dumps(config))
    env = {
        **os.environ,
        "JUPYTER_CONFIG_DIR": str(config_dir),
        "JUPYTER_DATA_DIR": str(root / "data"),
        "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
    }
    argv = [
        sys.executable,
        "-m",
        "jupyter_server",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.root_dir={root}",
        f"--IdentityProvider.token={token}",
    ]
    if os.geteuid() == 0:
        argv.append("--allow-root")
    return argv, env
