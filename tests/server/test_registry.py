"""EngineRegistry: engine lookup by name and a job's engine by id (pure, fake engines)."""

import pytest

from distrun.core.errors import EngineError, NotFound, SpecError
from distrun.core.spec import JobSpec, Limits
from distrun.engines.registry import DEPRECATED_CLASS_PATHS, EngineRegistry, build_engine
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


def test_build_engine_passes_state_dir_and_limits_and_names_the_engine(tmp_path):
    entry = {"class": "distrun.engines.local.LocalEngine", "kwargs": {"grace_seconds": 2.0}}
    engine = build_engine("laptop", entry, tmp_path, Limits(max_replicas=3))
    assert engine.name == "laptop"
    assert engine.limits.max_replicas == 3
    assert engine.grace_seconds == 2.0


@pytest.mark.parametrize("old_path", sorted(DEPRECATED_CLASS_PATHS))
def test_engine_class_paths_from_before_the_layout_still_build_their_engine(
    old_path, tmp_path, caplog
):
    """Configuration written for distrun.engines.<kind> keeps working, with a warning."""
    engine = build_engine("k8s", {"class": old_path}, tmp_path, Limits())
    assert type(engine).__name__ == old_path.rpartition(".")[2]
    assert type(engine).__module__ == DEPRECATED_CLASS_PATHS[old_path].rpartition(".")[0]
    assert f"{old_path} is deprecated; write {DEPRECATED_CLASS_PATHS[old_path]}" in caplog.text


def test_an_unimportable_engine_class_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="engine 'x': cannot import distrun.nope.Engine"):
        build_engine("x", {"class": "distrun.nope.Engine"}, tmp_path, Limits())
