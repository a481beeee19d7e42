"""PyTorch DDP over gloo under torch's elastic agent (`%elastic=2:3`): the number of ranks may
change while it trains.

When a replica dies, the agents of the others stop their training processes and start them
again in a smaller group (down to MIN); when it comes back, in a larger one (up to MAX). Each
start resumes from the newest checkpoint in DISTRUN_CHECKPOINT_DIR, so training goes on where
the group left it, with as many ranks as there are. A step's data depend on the step and the
rank only; the loss goes down whatever the group's size.

    %%distrun
    %framework=pytorch
    %worker=2
    %elastic=2:3
"""

import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from distrun import checkpoint

STEPS = int(os.environ.get("TRAIN_STEPS", "200"))
CHECKPOINT_EVERY = int(os.environ.get("CHECKPOINT_EVERY", "5"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0"))


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1_000_003 * step + rank)
    x = torch.randn(16, 8, generator=generator)
    return x, x.sum(dim=1, keepdim=True) * 0.5 + 0.1


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)

    start = 0
    state = checkpoint.load()
    if state is not None:
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"] + 1
    print(f"rank {rank} of {world} starts at step {start}", flush=True)

    for step in range(start, STEPS):
        x, y = batch(step, rank)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        print(f"step {step} world {world} loss={loss.item():.6f}", flush=True)
        if (step + 1) % CHECKPOINT_EVERY == 0:
            saved = {"step": step, "model": model.module.state_dict()}
            checkpoint.save({**saved, "optimizer": optimizer.state_dict()}, step=step)
        time.sleep(STEP_SECONDS)

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
