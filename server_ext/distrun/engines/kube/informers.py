"""One list-and-watch per namespace and resource type, shared by every job's feed (informer-style).

client-go's informers (kubectl, every controller) list a resource type once, watch it from the
list's resourceVersion, and serve every consumer from that cache; so does an `Informer` here:
a `JobFeed` reads its job and its pods from the namespace's informers and is told of changes,
so a server following 150 jobs in a namespace holds two watches there, not 300.

A watch restarts from the last version it saw (an event's or a bookmark's); when that version
has expired (410 Gone, on a busy cluster within minutes) the informer lists once for a fresh
collection version and tells its listeners what changed meanwhile. Every restart waits first:
`Backoff`, exponential with jitter, reset after a watch that ran for a while, so no error or
instantly-ending watch can turn into a loop of requests.
"""

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from distrun.core.errors import DistrunError
from distrun.engines.kube.client import Expired, KubeApi, Obj, Resource

log = logging.getLogger(__name__)
# How a watch or a list breaks when the API server goes away (a restart, a dropped
# connection): the API's own errors, or the connection's, mid-stream.
WATCH_BROKEN = (DistrunError, aiohttp.ClientError, OSError, TimeoutError)
FIRST_DELAY, LONGEST_DELAY = 0.5, 30.0  # seconds before a restart: the first, the cap
HEALTHY_WATCH_SECONDS = 10.0  # a watch that ran this long resets the backoff
LIST_PAGE = 250  # objects a list asks for at once

Listener = Callable[[str, Obj], None]  # ("ADDED" | "MODIFIED" | "DELETED", the object)
KeyOf = Callable[[Obj], str | None]  # which listeners an object concerns (a job's id)


class Backoff:
    """Delays that double from FIRST_DELAY up to LONGEST_DELAY, each drawn between half and all
    of that ("equal jitter": servers restarted together do not come back in step, and no delay
    is near zero). Written here rather than taken from `backoff` or `tenacity`: neither is a
    dependency, and both retry a call until it succeeds, while a watch loop runs forever and
    paces even the restarts that follow a success."""

    def __init__(self, first: float = FIRST_DELAY, longest: float = LONGEST_DELAY) -> None:
        self.first, self.longest = first, longest
        self._ceiling = first

    def next(self) -> float:
        ceiling = self._ceiling
        self._ceiling = min(ceiling * 2, self.longest)
        return ceiling / 2 + random.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self._ceiling = self.first


def by_name(obj: Obj) -> str | None:
    return str(obj.get("metadata", {}).get("name", "")) or None


def by_label(label: str) -> KeyOf:
    def key_of(obj: Obj) -> str | None:
        return (obj.get("metadata", {}).get("labels") or {}).get(label)

    return key_of


def across_jobs(selector: str, job_id: str) -> tuple[str, str]:
    """One job's label selector ("training.kubeflow.org/job-name=ID[,other=value]") as the
    selector of every job's objects in the namespace (the job's label asked to exist) and the
    label whose value says which job an object is of."""
    parts, label = [], None
    for part in selector.split(","):
        key, _, value = part.partition("=")
        if value == job_id and label is None:
            parts.append(key)
            label = key
        else:
            parts.append(part)
    if label is None:
        raise ValueError(f"the selector {selector!r} does not name the job {job_id!r}")
    return ",".join(parts), label


def _slim(obj: Obj) -> Obj:
    """The object as kept: without managedFields, which nothing here reads and which are often
    half a pod's size."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def _version(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


class Informer:
    """A resource type's objects in a namespace (those `selector` matches), listed once and
    watched, kept by name and by key; listeners of a key are told of each change to it."""

    def __init__(
        self, api: KubeApi, resource: Resource, namespace: str, selector: str, key_of: KeyOf
    ) -> None:
        self.api, self.resource, self.namespace = api, resource, namespace
        self.selector, self.key_of = selector, key_of
        self._objects: dict[str, Obj] = {}  # by name
        self._by_key: dict[str, dict[str, Obj]] = {}  # key -> name -> object
        self._listeners: dict[str, list[Listener]] = {}
        self.synced = False  # the first list is in
        self._first_list = asyncio.get_running_loop().create_future()
        self.lists = self.watches = 0  # requests made, for tests and diagnostics
        self.task = asyncio.create_task(self._run())
        self.task.add_done_callback(self._ended)

    # --- what feeds use ---

    async def ready(self) -> None:
        """Once the first list is in; that list's error if it failed (the informer tries on)."""
        if not self.synced:
            await asyncio.shield(self._first_list)

    def objects_of(self, key: str) -> dict[str, Obj]:
        return dict(self._by_key.get(key, {}))

    def get(self, name: str) -> Obj | None:
        return self._objects.get(name)

    def listen(self, key: str, listener: Listener) -> None:
        self._listeners.setdefault(key, []).append(listener)

    def unlisten(self, key: str, listener: Listener) -> None:
        listeners = self._listeners.get(key, [])
        if listener in listeners:
            listeners.remove(listener)
        if not listeners:
            self._listeners.pop(key, None)

    async def stop(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)

    def _ended(self, task: "asyncio.Task[None]") -> None:
        """Whoever waits for a first list that will never come is told (a bug, or a stop)."""
        if self._first_list.done():
            return
        if task.cancelled() or task.exception() is None:
            self._first_list.cancel()
        else:
            self._first_list.set_exception(task.exception())  # type: ignore[arg-type]

    # --- the list and the watch ---

    def _what(self, verb: str) -> str:
        return f"{verb} {self.resource.plural} in {self.namespace}"

    async def _run(self) -> None:
        version = ""
        backoff = Backoff()
        loop = asyncio.get_running_loop()
        while True:
            try:
                if not version:
                    version = await self._list()
                began = loop.time()
                version = await self._watch(version)
                if loop.time() - began >= HEALTHY_WATCH_SECONDS:
                    backoff.reset()
            except WATCH_BROKEN as error:
                log.info("%s broke: %r", self._what("watching"), error)
                if isinstance(error, Expired):  # answered 410 rather than sent it as an event
                    version = ""
                if not self.synced:  # who waits for it fails; the next list is awaited anew
                    self._first_list.set_exception(error)
                    self._first_list.exception()
                    self._first_list = loop.create_future()
            await asyncio.sleep(backoff.next())

    async def _list(self) -> str:
        """Every object, in pages of LIST_PAGE (one snapshot: the first page's version), so
        that no single answer of thousands of pods holds the event loop while it is parsed."""
        self.lists += 1
        items: list[Obj] = []
        token: str | None = None
        version = ""
        while True:
            listed = await self.api.list(
                self.resource,
                self.namespace,
                self.selector,
                self._what("list"),
                limit=LIST_PAGE,
                continue_from=token,
            )
            items += [_slim(obj) for obj in listed.get("items") or []]
            meta = listed.get("metadata") or {}
            version = version or str(meta.get("resourceVersion", ""))
            token = meta.get("continue")
            if not token:
                break
        self._replace(items)
        if not self.synced:
            self.synced = True
            self._first_list.set_result(None)
        return version

    async def _watch(self, version: str) -> str:
        """Events until the watch ends; the version to go on from ("" to list again)."""
        self.watches += 1
        what = self._what("watch")
        async for event in self.api.watch(
            self.resource, self.namespace, self.selector, version, what
        ):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":  # 410 Gone, mostly: the version expired
                log.info("%s from %s: %s", what, version, obj.get("message", obj))
                return ""
            version = _version(obj) or version
            if kind == "DELETED":
                self._remove(by_name(obj) or "")
            elif kind in ("ADDED", "MODIFIED"):
                self._put(_slim(obj))
        return version

    # --- the cache ---

    def _replace(self, listed: list[Obj]) -> None:
        """A fresh list: what is gone is deleted, what changed put, each told to its listeners."""
        names = {by_name(obj) for obj in listed}
        for name in [name for name in self._objects if name not in names]:
            self._remove(name)
        for obj in listed:
            old = self._objects.get(by_name(obj) or "")
            if old is None or _version(old) != _version(obj):
                self._put(obj)

    def _put(self, obj: Obj) -> None:
        name = by_name(obj)
        if name is None:
            return
        old = self._objects.get(name)
        if old is not None and self.key_of(old) != self.key_of(obj):
            self._remove(name)
            old = None
        self._objects[name] = obj
        key = self.key_of(obj)
        if key is not None:
            self._by_key.setdefault(key, {})[name] = obj
            self._tell(key, "ADDED" if old is None else "MODIFIED", obj)

    def _remove(self, name: str) -> None:
        obj = self._objects.pop(name, None)
        if obj is None:
            return
        key = self.key_of(obj)
        if key is None:
            return
        of_key = self._by_key.get(key, {})
        of_key.pop(name, None)
        if not of_key:
            self._by_key.pop(key, None)
        self._tell(key, "DELETED", obj)

    def _tell(self, key: str, kind: str, obj: Obj) -> None:
        for listener in list(self._listeners.get(key, ())):
            listener(kind, obj)


@dataclass(frozen=True)
class InformerKey:
    namespace: str
    resource: Resource
    selector: str


class Informers:
    """The informers one engine runs, each shared by every feed that uses it and stopped when
    the last of them lets it go."""

    def __init__(self) -> None:
        self._running: dict[InformerKey, tuple[Informer, int]] = {}

    def use(
        self, api: KubeApi, resource: Resource, namespace: str, selector: str, key_of: KeyOf
    ) -> Informer:
        key = InformerKey(namespace, resource, selector)
        informer, users = self._running.get(key) or (
            Informer(api, resource, namespace, selector, key_of),
            0,
        )
        self._running[key] = (informer, users + 1)
        return informer

    async def let_go(self, informer: Informer) -> None:
        key = InformerKey(informer.namespace, informer.resource, informer.selector)
        running, users = self._running.get(key, (None, 0))
        if running is not informer:
            return
        if users > 1:
            self._running[key] = (informer, users - 1)
            return
        del self._running[key]
        await informer.stop()

    async def synced(self, namespace: str, resource: Resource, selector: str) -> Informer | None:
        """The running informer of these objects once its first list is in (awaited when it
        is under way); None if none runs, or its first list failed or was stopped."""
        running = self._running.get(InformerKey(namespace, resource, selector))
        if running is None:
            return None
        informer = running[0]
        try:
            await informer.ready()
        except WATCH_BROKEN:
            return None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this caller is cancelled, not the informer's list
            return None
        return informer

    def running(self) -> list[Informer]:
        return [informer for informer, _users in self._running.values()]

    async def close(self) -> None:
        informers = self.running()
        self._running.clear()
        await asyncio.gather(*(informer.stop() for informer in informers))
