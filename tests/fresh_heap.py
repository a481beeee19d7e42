"""Heap experiments in a fresh process: what a C heap keeps depends on everything the process
allocated before, and allocator settings are process-wide."""

import subprocess
import sys

RSS_MIB = """
def rss_mib():
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS"))
    return int(line.split()[1]) / 1024
"""


def mib_held(program: str, mode: str) -> float:
    """What `program` prints (with `rss_mib()` defined and `mode` as its argv[1]): the MiB a
    heap kept."""
    out = subprocess.run(
        [sys.executable, "-c", RSS_MIB + program, mode], check=True, capture_output=True, text=True
    ).stdout
    return float(out)
