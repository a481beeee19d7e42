"""engines/kube/loop_local.py: one object per event loop."""

import asyncio
import gc
import weakref

from distrun.engines.kube.loop_local import LoopLocal


class Made:
    pass


def test_each_loop_has_its_own_object_made_once_and_let_go_with_it() -> None:
    local = LoopLocal(Made)
    first, second = asyncio.new_event_loop(), asyncio.new_event_loop()
    made = local.of(first)
    assert local.of(first) is made
    assert local.of(second) is not made and local.of(second) is local.of(second)
    gone = weakref.ref(made)
    del made
    first.close()
    second.close()
    del first
    gc.collect()
    assert gone() is None
