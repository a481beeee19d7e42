"""engines/kube/client.py's return_large_blocks: 256 KiB blocks (a TLS connection's buffer)
allocated together and freed between longer-lived small objects go back to the system, where
glibc would otherwise keep them in its heap. Each case runs in a fresh process (the setting is
process-wide)."""

import sys

import pytest

from tests.fresh_heap import mib_held

PROGRAM = """
import gc, sys
from distrun.engines.kube.client import return_large_blocks

if sys.argv[1] == "set":
    return_large_blocks()
first = bytearray(256 * 1024)
del first  # glibc raises its threshold on this free, unless it was set
before = rss_mib()
blocks, kept = [], []
for _ in range(400):  # 100 MiB, as 400 connections opened at once
    blocks.append(bytearray(256 * 1024))
    kept.append(bytes(2000))  # what a connection keeps: between the buffers in the heap
del blocks
gc.collect()
print(rss_mib() - before)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's allocator (mallopt)")
def test_freed_large_blocks_go_back_to_the_system() -> None:
    assert mib_held(PROGRAM, "unset") > 50  # what glibc keeps by itself: the case this is for
    assert mib_held(PROGRAM, "set") < 10  # the small objects kept: about 1 MiB
