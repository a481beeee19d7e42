"""EngineRegistry: engine lookup by name and a job's engine by id (pure, fake engines)."""

import pytest

from distrun.app import EngineRegistry
from distrun.errors import EngineError, NotFound, SpecError
from distrun.spec import JobSpec
from tests.fake_engine import FakeEngine

SPEC = JobSpec.from_dict({"framework": "generic", "code": ""})


def test_an_unconfigured_default_engine_is_a_clear_error():
    with pytest.raises(ValueError, match="default_engine is 'k8s', which is not configured"):
        EngineRegistry({"local": FakeEngine("local")}, "k8s")


def test_the_default_engine_comes_first_and_is_used_without_a_name():
    local, k8s = FakeEngine("local"), FakeEngine("k8s")
    registry = EngineRegistry({"local": local, "k8s": k8s}, "k8s")
    assert registry.all() == [k8s, local]
    assert registry.get(None) is k8s
    with pytest.raises(SpecError, match="unknown engine 'nope'; write one of k8s, local"):
        registry.get("nope")


async def test_find_job_asks_every_engine():
    local, k8s = FakeEngine("local"), FakeEngine("k8s")
    registry = EngineRegistry({"local": local, "k8s": k8s}, "local")
    job = await k8s.submit(SPEC, "alice")
    engine, found = await registry.find_job(job.id, "alice")
    assert (engine, found.id) == (k8s, job.id)
    with pytest.raises(NotFound):
        await registry.find_job(job.id, "bob")


async def test_find_job_reports_an_unreachable_engine_rather_than_not_found():
    local, k8s = FakeEngine("local"), FakeEngine("k8s")
    registry = EngineRegistry({"local": local, "k8s": k8s}, "local")
    k8s.fail_with = EngineError("cluster unreachable")
    with pytest.raises(EngineError, match="cluster unreachable"):
        await registry.find_job("job-00001", "alice")


async def test_close_closes_every_engine():
    local, k8s = FakeEngine("local"), FakeEngine("k8s")
    await EngineRegistry({"local": local, "k8s": k8s}, "local").close()
    assert local.closed and k8s.closed
