"""JupyterHub's proxy, configurable-http-proxy, from the npm registry into a cache directory
keyed by the lockfile, on first use (like Enterprise Gateway's virtualenv, tests/gateway/
eg_venv.py): `npm ci` of proxy_npm/'s package-lock.json. A marker written last tells a finished
install from a half-done one."""

import hashlib
import shutil
import subprocess
from pathlib import Path

from tests.gateway.eg_venv import cache_root
from tests.k8s.binaries import file_lock

LOCKED = Path(__file__).with_name("proxy_npm")
_MARKER = ".distrun-complete"


def ensure_proxy() -> Path:
    """The path of the configurable-http-proxy command, installing it first if needed."""
    lock = (LOCKED / "package-lock.json").read_bytes()
    home = cache_root() / f"configurable-http-proxy-{hashlib.sha256(lock).hexdigest()[:12]}"
    command = home / "node_modules" / ".bin" / "configurable-http-proxy"
    if (home / _MARKER).exists():
        return command
    home.mkdir(parents=True, exist_ok=True)
    with file_lock(home / ".lock"):  # shared with the suite's background build (prepare.py)
        if (home / _MARKER).exists():
            return command
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(LOCKED / name, home / name)
        command_line = ["npm", "ci", "--no-audit", "--no-fund", "--prefix", str(home)]
        subprocess.run(command_line, check=True, timeout=600, capture_output=True)
        (home / _MARKER).write_text("npm ci\n")
    return command


if __name__ == "__main__":
    print(ensure_proxy())
