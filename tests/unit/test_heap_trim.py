"""server/heap_trim.py: the heap's free pages go back to the system when trimmed, also those
between blocks that live on (which the heap cannot shrink past by itself). Each case runs in a
fresh process: what a heap keeps depends on everything the process allocated before."""

import sys

import pytest

from tests.fresh_heap import mib_held

PROGRAM = """
import sys
from distrun.engines.kube.client import return_large_blocks
from distrun.server.heap_trim import trim_heap

return_large_blocks()  # the server's setting with a Kubernetes engine: blocks under 128 KiB stay
before = rss_mib()
reads, kept = [], []
for _ in range(1000):  # 100 MiB read by 1,000 followers catching up at once
    reads.append(bytes(100 * 1024))
    kept.append(bytes(3000))  # what each keeps afterwards: between the reads in the heap
del reads
if sys.argv[1] == "trim":
    assert trim_heap()
print(rss_mib() - before)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's allocator (malloc_trim)")
def test_trimming_returns_the_free_pages_between_live_blocks() -> None:
    assert mib_held(PROGRAM, "keep") > 50  # what the heap keeps by itself: the case this is for
    assert mib_held(PROGRAM, "trim") < 15  # the 3 MiB kept, and the pages they share
