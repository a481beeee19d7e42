"""PyTorch DDP over gloo that resumes from its last checkpoint when the job restarts.

Run it with restarts asked for (`%maxRestarts=3`): when a replica dies, distrun stops every
replica and starts the whole job again; `checkpoint.load()` then returns the newest complete
checkpoint from DISTRUN_CHECKPOINT_DIR and training goes on from the step after it. The data of
a step depends only on the step and the rank, so a run that was restarted repeats the losses of
one that never was; with two ranks it ends with the very same weights, bit for bit. (With more,
the last bits may differ: DDP lays its gradient bucket out anew after the first step of every
process, and gloo's ring all-reduce adds three or more numbers in an order that follows that
layout.)
"""

import hashlib
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from distrun import checkpoint

STEPS = int(os.environ.get("TRAIN_STEPS", "60"))
CHECKPOINT_EVERY = int(os.environ.get("CHECKPOINT_EVERY", "5"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0"))  # a slower pace, for demonstrations


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The same batch for (step, rank) in every run: resuming replays the data order."""
    generator = torch.Generator().manual_seed(1_000_003 * step + rank)
    x = torch.randn(16, 8, generator=generator)
    return x, x.sum(dim=1, keepdim=True) * 0.5 + 0.1


def weights_sha256(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for parameter in model.parameters():
        digest.update(parameter.detach().numpy().tobytes())
    return digest.hexdigest()


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)

    start = 0
    state = checkpoint.load()  # the two lines that make it resumable: this one ...
    if state is not None:
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"] + 1
    restart = os.environ.get("DISTRUN_RESTART", "0")
    print(f"rank {rank} starts at step {start} (restart {restart})", flush=True)

    for step in range(start, STEPS):
        x, y = batch(step, rank)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()  # DDP all-reduces the gradients here
        optimizer.step()
        print(f"step {step} loss={loss.item():.6f}", flush=True)
        if (step + 1) % CHECKPOINT_EVERY == 0:  # ... and this one (rank 0 writes)
            saved = {"step": step, "model": model.module.state_dict()}
            checkpoint.save({**saved, "optimizer": optimizer.state_dict()}, step=step)
        time.sleep(STEP_SECONDS)

    print(f"weights_sha={weights_sha256(model.module)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
