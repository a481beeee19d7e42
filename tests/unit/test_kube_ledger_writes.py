"""engines/kube/logs.py's LedgerStore: what writing a job's anchors costs the API server (a
fake one: a ConfigMap with optimistic concurrency). At 150 jobs a read before every write was
half the soak's requests (docs/performance.md, issue 35)."""

import asyncio
import copy
from typing import Any, cast

import pytest

from distrun.core.errors import Conflict
from distrun.engines.kube.anchors import ANCHORS_KEPT, Anchor, AnchorPolicy
from distrun.engines.kube.client import KubeApi, Resource
from distrun.engines.kube.logs import FIRST_ANCHOR_FLUSH_SECONDS, LedgerStore


class FakeConfigMaps:
    """One ConfigMap; a replace whose resourceVersion is not the current one is a 409."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] = {"metadata": {"name": "ledger", "resourceVersion": "1"}}
        self.calls: list[str] = []

    async def get(self, res: Resource, namespace: str, name: str, what: str) -> dict[str, Any]:
        self.calls.append("GET")
        return copy.deepcopy(self.obj)

    async def replace(
        self, res: Resource, namespace: str, name: str, body: dict[str, Any], what: str
    ) -> dict[str, Any]:
        self.calls.append("PUT")
        if body["metadata"]["resourceVersion"] != self.obj["metadata"]["resourceVersion"]:
            raise Conflict("the object has been modified")
        self.write(body["metadata"].get("annotations", {}))
        return copy.deepcopy(self.obj)

    def write(self, annotations: dict[str, str]) -> None:
        """As any writer would: the annotations replaced, the version moved on."""
        version = str(int(self.obj["metadata"]["resourceVersion"]) + 1)
        self.obj = {"metadata": {**self.obj["metadata"], "resourceVersion": version}}
        self.obj["metadata"]["annotations"] = copy.deepcopy(annotations)


def store(fake: FakeConfigMaps) -> LedgerStore:
    return LedgerStore(cast(KubeApi, fake), "ns", "ledger")


def anchor(index: int) -> Anchor:
    return Anchor(index, (f"2026-11-26T00:00:{index:02d}Z", 0, index))


async def test_anchors_written_after_a_read_cost_one_request_each_not_a_read_and_a_write() -> None:
    fake = FakeConfigMaps()
    ledger = store(fake)
    await ledger.load()
    for index in range(3):
        ledger.leave_anchor("worker-0", "pod/uid/0", anchor(index))
        await ledger.write_anchors()
    assert fake.calls == ["GET", "PUT", "PUT", "PUT"]
    kept = store(fake)
    await kept.load()
    assert kept.anchors_of("worker-0", "pod/uid/0") == [anchor(0), anchor(1), anchor(2)]


async def test_another_writer_first_means_a_read_again_and_both_writes_kept() -> None:
    fake = FakeConfigMaps()
    ours, theirs = store(fake), store(fake)
    await ours.load()
    await theirs.load()
    theirs.leave_anchor("worker-1", "pod/uid/0", anchor(5))
    await theirs.write_anchors()
    fake.calls.clear()
    ours.leave_anchor("worker-0", "pod/uid/0", anchor(1))
    await ours.write_anchors()
    assert fake.calls == ["PUT", "GET", "PUT"]  # the 409 on the held copy, then as before
    check = store(fake)
    await check.load()
    assert check.anchors_of("worker-1", "pod/uid/0") == [anchor(5)]
    assert check.anchors_of("worker-0", "pod/uid/0") == [anchor(1)]


async def test_a_store_that_never_read_reads_before_it_writes() -> None:
    fake = FakeConfigMaps()
    ledger = store(fake)
    ledger.leave_anchor("worker-0", "pod/uid/0", anchor(1))
    await ledger.write_anchors()
    assert fake.calls == ["GET", "PUT"]


async def flushed(ledger: LedgerStore, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Lets the store's pending flush run at once; the waits it asked for."""
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(delay: float) -> None:
        waits.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    flush = ledger._flush
    assert flush is not None
    await flush
    monkeypatch.undo()
    return waits


async def test_a_jobs_anchors_from_every_replica_wait_the_flush_and_go_in_one_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 150 jobs x 8 replicas a write every 5 s per job was 400-700 requests a minute; one a
    minute per job keeps a hub's anchors within the soak's bound of 200 (issue 35). The
    replicas' first anchors go out sooner, in one write too."""
    fake = FakeConfigMaps()
    ledger = store(fake)
    await ledger.load()
    fake.calls.clear()
    for replica in range(8):
        ledger.leave_anchor(f"worker-{replica}", "pod/uid/0", anchor(replica))
    assert await flushed(ledger, monkeypatch) == [FIRST_ANCHOR_FLUSH_SECONDS]
    assert fake.calls == ["PUT"]
    for replica in range(8):
        ledger.leave_anchor(f"worker-{replica}", "pod/uid/0", anchor(replica + 10))
    waits = await flushed(ledger, monkeypatch)
    assert waits == [AnchorPolicy().flush_seconds] and waits[0] >= 60.0
    assert fake.calls == ["PUT", "PUT"]
    kept = store(fake)
    await kept.load()
    assert [kept.anchors_of(f"worker-{r}", "pod/uid/0") for r in range(8)] == [
        [anchor(r), anchor(r + 10)] for r in range(8)
    ]


async def test_a_first_anchor_hastens_a_flush_already_waiting() -> None:
    fake = FakeConfigMaps()
    earlier = store(fake)
    earlier.leave_anchor("worker-0", "pod/uid/0", anchor(0))
    await earlier.close()
    ledger = store(fake)
    await ledger.load()
    ledger.leave_anchor("worker-0", "pod/uid/0", anchor(1))  # waits the long flush...
    loop = asyncio.get_running_loop()
    assert ledger._flush_due > loop.time() + FIRST_ANCHOR_FLUSH_SECONDS
    long_flush = ledger._flush
    ledger.leave_anchor("worker-0", "pod/uid/1", anchor(0))  # ...a new instance's first: soon
    assert ledger._flush is not long_flush
    assert ledger._flush_due <= loop.time() + FIRST_ANCHOR_FLUSH_SECONDS
    await ledger.close()


def test_a_claim_sooner_than_the_live_followers_next_written_anchor_is_refused_in_words() -> None:
    with pytest.raises(ValueError, match="must be more than log_anchor_seconds"):
        AnchorPolicy(every_seconds=30.0, flush_seconds=60.0, claim_after=60.0)


async def test_loads_asked_for_together_share_one_read_and_a_later_one_reads_again() -> None:
    fake = FakeConfigMaps()
    fake.write({"a": "1"})
    ledger = store(fake)
    await asyncio.gather(*(ledger.load() for _ in range(8)))  # a job's replicas starting
    assert fake.calls == ["GET"]
    fake.write({"a": "2"})
    await ledger.load()
    assert fake.calls == ["GET", "GET"]
    assert ledger._held is not None and ledger._held["metadata"]["annotations"] == {"a": "2"}


async def test_an_anchor_the_book_has_or_would_drop_is_not_written_again() -> None:
    """A follower that starts again anchors its file's first line again (each viewer that
    comes after the last one left starts the job's followers: 150 writes for 150 jobs)."""
    fake = FakeConfigMaps()
    first = store(fake)
    await first.load()
    for index in range(ANCHORS_KEPT + 1):
        first.leave_anchor("worker-0", "pod/uid/0", anchor(index))
    first.leave_anchor("worker-1", "pod/uid/0", anchor(0))
    await first.write_anchors()
    again = store(fake)
    await again.load()
    fake.calls.clear()
    again.leave_anchor("worker-1", "pod/uid/0", anchor(0))  # the book has it
    again.leave_anchor("worker-0", "pod/uid/0", anchor(0))  # older than the 16 it keeps
    assert again._flush is None
    await again.write_anchors()
    assert fake.calls == []
    again.leave_anchor("worker-1", "pod/uid/0", anchor(1))  # a new one is written
    await again.write_anchors()
    assert fake.calls == ["PUT"]
    assert again.anchors_of("worker-1", "pod/uid/0") == [anchor(0), anchor(1)]
