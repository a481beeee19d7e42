"""What the supervisor loads before it starts the replicas: only what starting them needs."""

import subprocess
import sys
from pathlib import Path

PACKAGE_PARENT = Path(__file__).resolve().parents[2] / "server_ext"
PROBE = """
import sys
sys.path.insert(0, sys.argv[1])
import distrun.engines.local.supervisor
print(sorted(name for name in ("asyncio", "distrun.core.header",
                               "distrun.engines.local.supervisor_loop",
                               "distrun.engines.local.logstore",
                               "distrun.engines.local.engine") if name in sys.modules))
"""


def test_the_supervisor_module_starts_replicas_without_asyncio_or_the_magics_parser() -> None:
    result = subprocess.run(
        [sys.executable, "-S", "-c", PROBE, str(PACKAGE_PARENT)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert result.stdout.strip() == "[]", result.stderr
