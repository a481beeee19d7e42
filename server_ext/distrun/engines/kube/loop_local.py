"""One object per event loop (a pacer of the loop's iterations), made on its first use there and
let go with the loop (so it must not hold the loop itself: it would keep it)."""

import asyncio
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class LoopLocal(Generic[T]):
    """`of(loop)`: the loop's object, made by `make()` the first time."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._objects: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, T] = (
            weakref.WeakKeyDictionary()
        )

    def of(self, loop: asyncio.AbstractEventLoop) -> T:
        found = self._objects.get(loop)
        if found is None:
            found = self._objects[loop] = self._make()
        return found
