"""A job that resumes from an earlier one (`resume_from`, "Run again, resuming") on the local
engine, with real processes: it starts with a copy of the earlier job's checkpoints, resumes at
their step (its timeline says so), and the earlier job's checkpoints stay as they were."""

from pathlib import Path

import pytest

from distrun.core.checkpoint_env import RESUMED_FILE
from distrun.core.errors import SpecError
from distrun.core.job import JobState
from distrun.engines.local.engine import LocalEngine

from ..reliability import helpers
from ..reliability.helpers import spec

pytestmark = pytest.mark.integration

# Trains from the newest checkpoint (or step 0) for 3 steps, saving each.
TRAINS = """
    from distrun import checkpoint
    state = checkpoint.load() or {"step": 0, "weights": []}
    print("starts at", state["step"], flush=True)
    for step in range(state["step"] + 1, state["step"] + 4):
        state = {"step": step, "weights": state["weights"] + [step]}
        checkpoint.save(state, step=step)
    print("ends at", state["step"], state["weights"], flush=True)
"""


def checkpoints(engine: LocalEngine, job_id: str) -> dict[str, bytes]:
    folder = engine._jobs_dir / job_id / "checkpoints"
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


async def run(engine: LocalEngine, **fields: object) -> tuple[str, list[str]]:
    job = await engine.submit(spec(TRAINS, **fields), "alice")
    final, lines = await helpers.follow_to_end(engine, job)
    assert final.state == JobState.SUCCEEDED, (final.reason, [x.text for x in lines])
    return job.id, [line.text for line in lines]


async def test_a_job_resumes_from_an_earlier_ones_checkpoints_and_leaves_them_as_they_were(
    local_engine: LocalEngine,
) -> None:
    first, lines = await run(local_engine)
    assert "ends at 3 [1, 2, 3]" in lines
    before = checkpoints(local_engine, first)
    assert RESUMED_FILE not in before  # the first job resumed from nothing

    second, lines = await run(local_engine, resume_from=first)
    assert "starts at 3" in lines and "ends at 6 [1, 2, 3, 4, 5, 6]" in lines, lines
    assert checkpoints(local_engine, first) == before
    copied = checkpoints(local_engine, second)
    assert "step-000000000006.ckpt" in copied and "step-000000000003.ckpt" not in copied
    job = await local_engine.get_job(second, "alice")
    assert job.spec.resume_from == first
    assert [e.text for e in job.timeline if e.kind == "resumed"] == [
        "attempt 1 resumed from the checkpoint of step 3"
    ]

    # Resuming the resumed job goes on from its newest checkpoint.
    _, lines = await run(local_engine, resume_from=second)
    assert "starts at 6" in lines


async def test_resuming_a_job_that_is_not_yours_or_not_there_is_refused_in_words(
    local_engine: LocalEngine,
) -> None:
    bobs = await local_engine.submit(spec("print('bob')"), "bob")
    await helpers.follow_to_end(local_engine, bobs, owner="bob")
    jobs_before = sorted(p.name for p in Path(local_engine._jobs_dir).iterdir())
    for earlier in (bobs.id, "nothing-ab12c"):
        with pytest.raises(SpecError) as refused:
            await local_engine.submit(spec(TRAINS, resume_from=earlier), "alice")
        assert refused.value.field == "resume_from"
        assert f"you have no job {earlier!r} on the local engine" in str(refused.value)
    # Nothing was made of either submission; bob's job is untouched.
    assert sorted(p.name for p in Path(local_engine._jobs_dir).iterdir()) == jobs_before
    assert (await local_engine.get_job(bobs.id, "bob")).state == JobState.SUCCEEDED


def test_resume_from_must_be_a_job_id() -> None:
    for bad in ("../etc", "Job-1", "a" * 41, 7):
        with pytest.raises(SpecError) as refused:
            spec("print(1)", resume_from=bad)
        assert refused.value.field == "resume_from"
