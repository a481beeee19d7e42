"""Lightning's own resume path on distrun, unchanged: a 2-replica DDP job on the local engine
whose Trainer writes its checkpoints in DISTRUN_CHECKPOINT_DIR; a replica is killed with
SIGKILL mid-training, distrun restarts the whole job, and the next run's `fit(ckpt_path="last")`
resumes from Lightning's last checkpoint, at its step."""

import re

import pytest

from distrun.core.spec import JobSpec
from distrun.engines.local.engine import LocalEngine

from .harness import assert_succeeded, describe, example_code, needs_module, run_to_end

pytestmark = [pytest.mark.integration, pytest.mark.training, needs_module("lightning")]

STEPS, EVERY, FAIL_AT = 30, 5, 12
STARTS_RE = re.compile(r"^rank (\d) starts at step (\d+) \(restart (\d+)\)$")
STEP_RE = re.compile(r"^step (\d+) loss=")


def lightning_spec() -> JobSpec:
    return JobSpec.from_dict(
        {
            "framework": "pytorch",
            "name": "lightning",
            "roles": {"master": {"replicas": 1}, "worker": {"replicas": 1}},
            "code": example_code("lightning_ddp_resume.py"),
            "env": {
                "OMP_NUM_THREADS": "1",
                "TRAIN_STEPS": str(STEPS),
                "CHECKPOINT_EVERY": str(EVERY),
                "FAIL_AT_STEP": str(FAIL_AT),
            },
            "restart": "job",
            "max_restarts": 1,
        }
    )


@pytest.mark.timeout(900)
async def test_a_lightning_trainer_resumes_from_its_last_checkpoint_after_a_replica_is_killed(
    unniced_engine: LocalEngine,
) -> None:
    job, printed = await run_to_end(unniced_engine, lightning_spec(), timeout=800)
    assert_succeeded(job, printed)
    starts = [
        (int(m[1]), int(m[2]), int(m[3]))
        for lines in printed.values()
        for line in lines
        if (m := STARTS_RE.match(line))
    ]
    # Both ranks start at 0 in the first run; the worker dies after step 12; the last
    # checkpoint Lightning wrote before that was at step 10, and both ranks resume there.
    assert sorted(starts) == [(0, 0, 0), (0, 10, 1), (1, 0, 0), (1, 10, 1)], describe(printed)
    assert job.attempt == 2
    failure = job.last_failure
    assert failure is not None and (failure.replica, failure.signal) == ("worker-0", "SIGKILL")
    steps = [int(m[1]) for line in printed["master-0"] if (m := STEP_RE.match(line))]
    assert steps[-(STEPS - 10) :] == list(range(11, STEPS + 1)), describe(printed)
    assert "finished at step 30" in printed["master-0"]
    checkpoints = unniced_engine._jobs_dir / job.id / "checkpoints"
    assert (checkpoints / "last.ckpt").is_file(), sorted(p.name for p in checkpoints.iterdir())
