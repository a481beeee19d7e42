"""TensorBoard scalars written by real training code in real replicas, read back per replica:
torch's `SummaryWriter` in a DDP job, and `tf.summary` in a TensorFlow one."""

import textwrap

import pytest

from distrun.core.scalars import ScalarsReport
from distrun.core.spec import JobSpec
from distrun.engines.protocol import Engine, ScalarsEngine

from .harness import OWNER, assert_succeeded, needs_module, run_to_end

pytestmark = [pytest.mark.integration, pytest.mark.training]

# TensorBoard imports TensorFlow where it is installed (as it is here, for the TensorFlow
# tests), and TensorFlow and torch in one process abort on their LLVMs' options: the code
# flips TensorBoard's own switch to its TensorFlow stub first (docs/observability.md).
TORCH_DDP = textwrap.dedent(
    """
    import os
    import sys
    import types
    sys.modules["tensorboard.compat.notf"] = types.ModuleType("tensorboard.compat.notf")
    import torch
    import torch.distributed as dist
    from torch.utils.tensorboard import SummaryWriter

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    writer = SummaryWriter(os.environ["DISTRUN_TENSORBOARD_DIR"])
    x, y = torch.ones(8, 4), torch.zeros(8, 1)
    for step in range(5):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        writer.add_scalar("loss/train", loss.item(), step)
    writer.add_scalar("rank", float(dist.get_rank()), 0)
    writer.close()
    dist.destroy_process_group()
    """
)

TF_SUMMARY = textwrap.dedent(
    """
    import os
    import tensorflow as tf

    writer = tf.summary.create_file_writer(os.path.join(os.environ["DISTRUN_TENSORBOARD_DIR"], "eval"))
    with writer.as_default():
        for step in range(3):
            tf.summary.scalar("accuracy", 0.5 + step / 10, step=step)
    writer.close()
    """
)


async def scalars_of(engine: Engine, spec: JobSpec) -> ScalarsReport:
    assert isinstance(engine, ScalarsEngine)
    job, printed = await run_to_end(engine, spec, timeout=420)
    assert_succeeded(job, printed)
    return await engine.read_scalars(job.id, OWNER)


@needs_module("torch")
@pytest.mark.timeout(600)
async def test_summarywriter_scalars_of_a_ddp_job_are_read_per_replica(
    local_engine: Engine,
) -> None:
    spec = JobSpec.from_dict(
        {
            "framework": "pytorch",
            "roles": {"master": {"replicas": 1}, "worker": {"replicas": 1}},
            "code": TORCH_DDP,
            "env": {"OMP_NUM_THREADS": "1"},
        }
    )
    report = await scalars_of(local_engine, spec)
    assert report.available, report.reason
    assert set(report.replicas) == {"master-0", "worker-0"}
    for rank, replica in enumerate(["master-0", "worker-0"]):
        tags = report.replicas[replica]
        assert tags["rank"] == [(0, float(rank))]
        losses = tags["loss/train"]
        assert [step for step, _ in losses] == [0, 1, 2, 3, 4]
        assert losses[-1][1] < losses[0][1], losses  # DDP training: the loss goes down
    # Both ranks trained the same synchronised model: the same losses.
    assert report.replicas["master-0"]["loss/train"] == report.replicas["worker-0"]["loss/train"]


@needs_module("tensorflow")
@pytest.mark.timeout(600)
async def test_tf_summary_scalars_in_a_subdirectory_are_read_with_its_name(
    local_engine: Engine,
) -> None:
    spec = JobSpec.from_dict(
        {"framework": "generic", "roles": {"worker": {"replicas": 1}}, "code": TF_SUMMARY}
    )
    report = await scalars_of(local_engine, spec)
    assert report.available, report.reason
    points = report.replicas["worker-0"]["eval/accuracy"]
    assert [step for step, _ in points] == [0, 1, 2]
    assert [round(value, 6) for _, value in points] == [0.5, 0.6, 0.7]
