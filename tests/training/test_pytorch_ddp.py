"""PyTorch DDP over gloo, one master and two workers, through the local engine."""

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

pytestmark = [pytest.mark.integration, pytest.mark.training, needs_module("torch")]


@pytest.mark.timeout(600)
async def test_ddp_ranks_rendezvous_and_end_with_identical_weights(local_engine: Engine) -> None:
    spec = JobSpec.from_dict(
        {
            "framework": "pytorch",
            "name": "ddp",
            "roles": {"master": {"replicas": 1}, "worker": {"replicas": 2}},
            "code": example_code("pytorch_ddp.py"),
            # Three replicas on two cores: one intra-op thread each avoids oversubscription.
            "env": {"OMP_NUM_THREADS": "1"},
        }
    )

    job, printed = await run_to_end(local_engine, spec, timeout=420)

    assert_succeeded(job, printed)
    assert [(r.name, r.state.value, r.exit_code) for r in job.replicas] == [
        ("master-0", "succeeded", 0),
        ("worker-0", "succeeded", 0),
        ("worker-1", "succeeded", 0),
    ]
    # The operator's rank rule: the master is rank 0, worker i is rank i + 1.
    for rank, replica in enumerate(["master-0", "worker-0", "worker-1"]):
        assert f"rank {rank} of 3 joined" in printed[replica], describe(printed)
    checksums = {replica: weights_checksums(lines) for replica, lines in printed.items()}
    assert all(len(sums) == 1 for sums in checksums.values()), checksums
    assert len({sums[0] for sums in checksums.values()}) == 1, f"ranks disagree: {checksums}"
    for replica, lines in printed.items():
        losses = reported_losses(lines)
        assert len(losses) >= 10, f"{replica} reported too few losses: {losses}"
        assert losses[-1] < losses[0] / 2, f"{replica}'s loss did not fall: {losses}"
