"""TensorFlow MultiWorkerMirroredStrategy, two workers with TF_CONFIG, through the local engine."""

import pytest

from distrun.core.spec import JobSpec
from distrun.engines.protocol import Engine

from .harness import (
    assert_succeeded,
    describe,
    example_code,
    needs_module,
    reported_losses,
    run_to_end,
    weights_checksums,
)

pytestmark = [pytest.mark.integration, pytest.mark.training, needs_module("tensorflow")]


@pytest.mark.timeout(600)
async def test_workers_train_in_sync_and_end_with_identical_weights(local_engine: Engine) -> None:
    spec = JobSpec.from_dict(
        {
            "framework": "tensorflow",
            "name": "tf-multiworker",
            "roles": {"worker": {"replicas": 2}},
            "code": example_code("tensorflow_multiworker.py"),
            "env": {"TF_CPP_MIN_LOG_LEVEL": "2"},
        }
    )

    job, printed = await run_to_end(local_engine, spec, timeout=420)

    assert_succeeded(job, printed)
    assert [(r.name, r.state.value, r.exit_code) for r in job.replicas] == [
        ("worker-0", "succeeded", 0),
        ("worker-1", "succeeded", 0),
    ]
    # TF_CONFIG gave each worker its task and the whole cluster.
    for index in range(2):
        assert f"worker {index}: 2 replicas in sync" in printed[f"worker-{index}"], describe(
            printed
        )
    checksums = {replica: weights_checksums(lines) for replica, lines in printed.items()}
    assert all(len(sums) == 1 for sums in checksums.values()), checksums
    assert len({sums[0] for sums in checksums.values()}) == 1, f"workers disagree: {checksums}"
    for replica, lines in printed.items():
        losses = reported_losses(lines)
        assert len(losses) >= 3, f"{replica} reported too few losses: {losses}"
        assert losses[-1] < losses[0] / 2, f"{replica}'s loss did not fall: {losses}"
