"""engines/kube/engine.py's reads of a job object: concurrent reads (a burst of viewers
connecting) share one request, each caller checked as the owner on its own."""

import asyncio
from typing import Any

import pytest

from distrun.core.errors import NotFound
from distrun.engines.kube.client import Obj, Resource
from distrun.engines.kube.kubeflow import KubeflowEngine
from distrun.engines.kube.manifests.common import ANNOTATION_OWNER, LABEL_MANAGED_BY

JOB = "job-1"


class CountingApi:
    """A job object of alice's (and its ConfigMap, owned by it) behind a slow GET."""

    def __init__(self) -> None:
        self.gets: list[str] = []
        self.release = asyncio.Event()

    async def get(self, res: Resource, namespace: str, name: str, what: str) -> Obj:
        self.gets.append(res.plural)
        await self.release.wait()
        if name != JOB:
            raise NotFound(f"no {res.plural} {name}")
        if res.plural == "configmaps":
            reference = {"kind": "PyTorchJob", "name": JOB}
            return {"metadata": {"name": JOB, "ownerReferences": [reference]}}
        meta = {
            "name": JOB,
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: "distrun"},
            "annotations": {ANNOTATION_OWNER: "alice"},
        }
        return {"kind": "PyTorchJob", "metadata": meta}


async def read_together(engine: KubeflowEngine, api: Any, owners: list[str], job: str) -> list[Any]:
    reads = [asyncio.ensure_future(engine._owned_object(api, job, owner)) for owner in owners]
    await asyncio.sleep(0.01)
    api.release.set()
    return await asyncio.gather(*reads, return_exceptions=True)


async def test_reads_of_a_job_asked_for_together_share_one_get_and_each_owner_is_checked() -> None:
    engine, api = KubeflowEngine(), CountingApi()
    results = await read_together(engine, api, ["alice", "alice", "alice", "bob"], JOB)
    assert api.gets == ["configmaps", "pytorchjobs"]  # its kind, then the job: once for all
    assert [r["metadata"]["name"] for r in results[:3]] == [JOB] * 3
    assert results[0] is not results[1]  # each caller its own copy
    assert isinstance(results[3], NotFound)
    await engine._owned_object(api, JOB, "alice")  # none in flight: a read of its own
    assert api.gets == ["configmaps", "pytorchjobs"] * 2


async def test_a_job_that_does_not_exist_is_not_found_by_every_reader_sharing_the_read() -> None:
    engine, api = KubeflowEngine(), CountingApi()
    results = await read_together(engine, api, ["alice", "alice"], "job-2")
    assert all(isinstance(result, NotFound) for result in results)
    assert api.gets.count("configmaps") == 1
    with pytest.raises(NotFound):
        await engine._owned_object(api, "job-2", "alice")
