"""engines/kube/informers.py against a scripted API: one list and watch per namespace and
resource shared by every feed, a restart after an expired version that lists once, and no
restart without a pause. The tier's tests/k8s/test_watch_expiry.py runs the 410 case against
the real kube-apiserver."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from distrun.core.errors import EngineError
from distrun.engines.kube import informers
from distrun.engines.kube.client import PODS, Expired, Obj, Resource
from distrun.engines.kube.informers import Backoff, Informer, Informers, across_jobs, by_label

LABEL = "training.kubeflow.org/job-name"
EXPIRED = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}


def pod(name: str, job: str, version: int, **extra: Any) -> Obj:
    meta = {"name": name, "labels": {LABEL: job}, "resourceVersion": str(version), **extra}
    return {"metadata": meta}


class ScriptedApi:
    """Each `list` answers the next of `listings` (objects, collection version), the last one
    again once they run out; each `watch` plays the next of `scripts` (events, or an exception
    raised), then `default()`'s; None: a watch that goes on until cancelled."""

    def __init__(self, default: Callable[[], list[Obj] | Exception | None]) -> None:
        self.listings: list[tuple[list[Obj], int]] = [([], 1)]
        self.scripts: list[list[Obj] | Exception] = []
        self.default = default
        self.calls: list[tuple[str, str]] = []  # (verb, the version watched from)

    async def list(
        self, res: Resource, namespace: str, selector: str, what: str, **_paging: Any
    ) -> Obj:
        self.calls.append(("list", ""))
        items, version = self.listings.pop(0) if len(self.listings) > 1 else self.listings[0]
        return {"items": items, "metadata": {"resourceVersion": str(version)}}

    async def watch(
        self, res: Resource, namespace: str, selector: str, version: str, what: str
    ) -> AsyncIterator[Obj]:
        self.calls.append(("watch", version))
        script = self.scripts.pop(0) if self.scripts else self.default()
        if script is None:
            await asyncio.Event().wait()
            return
        if isinstance(script, Exception):
            raise script
        for event in script:
            yield event
        await asyncio.sleep(0)

    def verbs(self) -> list[str]:
        return [verb for verb, _ in self.calls]


def forever() -> None:
    return None


async def until(condition: Callable[[], bool]) -> None:
    async with asyncio.timeout(10):
        while not condition():
            await asyncio.sleep(0.01)


@pytest.fixture
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(informers, "FIRST_DELAY", 0.02)


def test_a_selector_for_one_job_becomes_one_for_every_job_and_the_label_naming_it() -> None:
    assert across_jobs(f"{LABEL}=job-1", "job-1") == (LABEL, LABEL)
    trainer = "jobset.sigs.k8s.io/jobset-name=j,jobset.sigs.k8s.io/replicatedjob-name=node"
    assert across_jobs(trainer, "j") == (
        "jobset.sigs.k8s.io/jobset-name,jobset.sigs.k8s.io/replicatedjob-name=node",
        "jobset.sigs.k8s.io/jobset-name",
    )
    with pytest.raises(ValueError, match="does not name the job"):
        across_jobs("a=b", "c")


def test_backoff_doubles_to_its_cap_never_near_zero_and_starts_over_when_reset() -> None:
    backoff = Backoff(first=1.0, longest=8.0)
    delays = [backoff.next() for _ in range(6)]
    for delay, ceiling in zip(delays, [1, 2, 4, 8, 8, 8], strict=True):
        assert ceiling / 2 <= delay <= ceiling
    backoff.reset()
    assert 0.5 <= backoff.next() <= 1.0


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(lambda: [EXPIRED], id="every watch expired at once"),
        pytest.param(
            lambda: EngineError("cannot watch: connection refused"), id="every watch fails"
        ),
        pytest.param(list, id="every watch ends at once"),
    ],
)
async def test_a_watch_that_keeps_failing_restarts_a_few_times_a_second_at_most(
    failure: Callable[[], list[Obj] | Exception],
) -> None:
    """The job watch of 2026-11-26 restarted thousands of times in 30 s: every 410 Gone was
    followed by a GET and a new watch, with no pause."""
    api = ScriptedApi(failure)
    informer = Informer(api, PODS, "ns", LABEL, by_label(LABEL))  # type: ignore[arg-type]
    await asyncio.sleep(1.5)
    await informer.stop()
    watches = api.verbs().count("watch")
    assert 1 <= watches <= 4, f"{watches} watches in 1.5 s"
    assert api.verbs().count("list") <= watches + 1


async def test_an_expired_version_is_followed_by_one_list_that_tells_what_changed_meanwhile(
    quick_backoff: None,
) -> None:
    api = ScriptedApi(forever)
    api.listings = [
        ([pod("a-0", "a", 1), pod("a-1", "a", 1), pod("b-0", "b", 1)], 1),
        # Meanwhile, while the watch was expired: a-1 deleted, a-2 made, b-0 changed.
        ([pod("a-0", "a", 5), pod("a-2", "a", 8), pod("b-0", "b", 7)], 9),
    ]
    api.scripts = [[{"type": "MODIFIED", "object": pod("a-0", "a", 5)}, EXPIRED]]
    told: list[tuple[str, str, str]] = []

    def listener(kind: str, obj: Obj) -> None:
        told.append((kind, obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))

    informer = Informer(api, PODS, "ns", LABEL, by_label(LABEL))  # type: ignore[arg-type]
    informer.listen("a", listener)
    await until(lambda: len(api.calls) >= 4)
    await informer.stop()
    assert told == [
        ("ADDED", "a-0", "1"),
        ("ADDED", "a-1", "1"),
        ("MODIFIED", "a-0", "5"),
        ("DELETED", "a-1", "1"),
        ("ADDED", "a-2", "8"),
    ]
    assert api.calls == [("list", ""), ("watch", "1"), ("list", ""), ("watch", "9")], (
        "one list after the 410, then a watch from the list's version, not an object's"
    )
    assert set(informer.objects_of("a")) == {"a-0", "a-2"}


async def test_a_broken_watch_goes_on_from_the_last_version_it_saw_without_a_list(
    quick_backoff: None,
) -> None:
    api = ScriptedApi(forever)
    api.scripts = [
        [{"type": "ADDED", "object": pod("a-0", "a", 3)}],
        EngineError("cannot watch: the server went away"),
        [{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}}],
    ]
    informer = Informer(api, PODS, "ns", LABEL, by_label(LABEL))  # type: ignore[arg-type]
    await until(lambda: len(api.calls) >= 5)
    await informer.stop()
    assert api.calls == [
        ("list", ""),
        ("watch", "1"),
        ("watch", "3"),
        ("watch", "3"),
        ("watch", "7"),
    ]


async def test_feeds_of_one_namespace_share_its_informer_which_stops_with_the_last() -> None:
    api = ScriptedApi(forever)
    pool = Informers()
    first = pool.use(api, PODS, "ns", LABEL, by_label(LABEL))  # type: ignore[arg-type]
    second = pool.use(api, PODS, "ns", LABEL, by_label(LABEL))  # type: ignore[arg-type]
    other = pool.use(api, PODS, "other", LABEL, by_label(LABEL))  # type: ignore[arg-type]
    assert first is second and other is not first
    await pool.let_go(first)
    assert not first.task.done()
    await pool.let_go(second)
    assert first.task.done()
    await pool.close()
    assert other.task.done() and pool.running() == []


async def test_a_first_list_that_fails_fails_who_waits_and_the_informer_tries_on(
    quick_backoff: None,
) -> None:
    api = ScriptedApi(forever)
    failures = [EngineError("cannot list pods: connection refused")]
    listing = api.list

    async def flaky_list(*args: Any, **paging: Any) -> Obj:
        if failures:
            raise failures.pop()
        return await listing(*args, **paging)

    api.list = flaky_list  # type: ignore[method-assign]
    informer = Informer(api, PODS, "ns", LABEL, by_label(LABEL))  # type: ignore[arg-type]
    with pytest.raises(EngineError, match="connection refused"):
        await informer.ready()
    await until(lambda: informer.synced)
    await informer.ready()
    await informer.stop()


async def test_a_watch_answered_410_rather_than_sent_as_an_event_lists_again(
    quick_backoff: None,
) -> None:
    api = ScriptedApi(forever)
    api.listings = [([], 1), ([], 4)]
    api.scripts = [Expired("cannot watch pods in ns: too old resource version: 1 (3)")]
    informer = Informer(api, PODS, "ns", LABEL, by_label(LABEL))  # type: ignore[arg-type]
    await until(lambda: len(api.calls) >= 4)
    await informer.stop()
    assert api.calls == [("list", ""), ("watch", "1"), ("list", ""), ("watch", "4")]


async def test_a_list_is_read_in_pages_of_one_snapshot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(informers, "LIST_PAGE", 2)
    pods = [pod(f"a-{n}", "a", 1) for n in range(5)]
    asked: list[tuple[int | None, str | None]] = []

    class PagedApi(ScriptedApi):
        async def list(
            self,
            res: Resource,
            namespace: str,
            selector: str,
            what: str,
            *,
            limit: int | None = None,
            continue_from: str | None = None,
        ) -> Obj:
            asked.append((limit, continue_from))
            start = int(continue_from or 0)
            end = start + (limit or len(pods))
            meta = {"resourceVersion": "7" if start == 0 else "8"}
            if end < len(pods):
                meta["continue"] = str(end)
            return {"items": pods[start:end], "metadata": meta}

    api = PagedApi(forever)
    informer = Informer(api, PODS, "ns", LABEL, by_label(LABEL))  # type: ignore[arg-type]
    await informer.ready()
    await until(lambda: len(api.calls) >= 1)
    await informer.stop()
    assert asked == [(2, None), (2, "2"), (2, "4")]
    assert set(informer.objects_of("a")) == {f"a-{n}" for n in range(5)}
    assert api.calls == [("watch", "7")], "from the snapshot's version, the first page's"


async def test_a_running_informer_is_found_once_its_first_list_is_in_and_none_is_not() -> None:
    api = ScriptedApi(forever)
    api.listings = [([pod("p-0", "job-1", 2)], 2)]
    pool = Informers()
    assert await pool.synced("ns", PODS, LABEL) is None  # nothing runs: the caller asks the API
    started = pool.use(api, PODS, "ns", LABEL, by_label(LABEL))  # type: ignore[arg-type]
    assert not started.synced
    found = await pool.synced("ns", PODS, LABEL)  # its first list under way: awaited
    assert found is started and started.synced
    assert list(found.objects_of("job-1")) == ["p-0"]
    assert await pool.synced("other", PODS, LABEL) is None
    await pool.close()


async def test_an_informer_whose_first_list_fails_is_not_found() -> None:
    api = ScriptedApi(forever)

    async def refused(*args: Any, **paging: Any) -> Obj:
        raise EngineError("cannot list pods: connection refused")

    api.list = refused  # type: ignore[method-assign]
    pool = Informers()
    pool.use(api, PODS, "ns", LABEL, by_label(LABEL))  # type: ignore[arg-type]
    assert await pool.synced("ns", PODS, LABEL) is None
    await pool.close()
