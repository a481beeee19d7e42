"""TensorFlow MultiWorkerMirroredStrategy, two workers with TF_CONFIG, through a real server with
the local engine, read as the JupyterLab extension reads it: the log websocket."""

import re
from pathlib import Path

import pytest

from distrun.core.terminal import plain_text

from .harness import (
    describe,
    example_code,
    needs_module,
    reported_losses,
    stream_through_a_server,
    weights_checksums,
)

# Keras' progress bar as a terminal shows it: "3/10 ━━━━━━━━━━━━━━━━━━━━ 0s 150ms/step - loss: 0.31"
KERAS_BAR = re.compile(r"^ *(\d+)/10 \S+ .* - loss: ([0-9.]+)$")

pytestmark = [pytest.mark.integration, pytest.mark.training, needs_module("tensorflow")]


@pytest.mark.timeout(600)
async def test_workers_train_in_sync_and_their_keras_bars_move_live(tmp_path: Path) -> None:
    spec = {
        "framework": "tensorflow",
        "name": "tf-multiworker",
        "roles": {"worker": {"replicas": 2}},
        "code": example_code("tensorflow_multiworker.py"),
        "env": {"TF_CPP_MIN_LOG_LEVEL": "2", "STEP_SECONDS": "0.15"},
    }

    streamed = await stream_through_a_server(tmp_path, spec, timeout=420)
    job, printed = streamed.job, streamed.printed

    assert job["state"] == "succeeded", f"{job.get('reason')}\n{describe(printed)}"
    assert [(r["name"], r["state"], r["exit_code"]) for r in job["replicas"]] == [
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

    # Keras' progress bar came through the websocket as it advanced, its loss with it, before
    # its epoch's line was finished: what the cell output shows and the metrics chart reads.
    for replica, lines in printed.items():
        first_epoch = next(i for i, text in enumerate(lines) if "10/10" in plain_text(text))
        steps = {
            (int(m[1]), float(m[2]))
            for r, seq, text, received in streamed.partials
            if r == replica and seq == first_epoch and received <= first_epoch
            if (m := KERAS_BAR.match(plain_text(text)))
        }
        assert len({step for step, _ in steps}) >= 3, f"{replica}: {steps}"
        assert all(step < 10 for step, _ in steps), f"{replica}: {steps}"
