"""Data-parallel training with PyTorch DDP over gloo on the CPU, written as for a PyTorchJob.

The Kubeflow Training Operator (and distrun's local engine) sets MASTER_ADDR, MASTER_PORT,
WORLD_SIZE and RANK in every replica; init_process_group's default env:// rendezvous reads them.
Each rank trains on its own shard of the same seeded synthetic data; DDP averages the gradients,
so every rank ends with the same weights, and the checksum printed at the end shows it.
"""

import hashlib

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

EPOCHS = 4
BATCH_SIZE = 16


def synthetic_regression(samples: int = 960, features: int = 8) -> TensorDataset:
    """y = x . w + noise, the same on every rank (fixed seed)."""
    generator = torch.Generator().manual_seed(1234)
    x = torch.randn(samples, features, generator=generator)
    true_w = torch.randn(features, 1, generator=generator)
    y = x @ true_w + 0.05 * torch.randn(samples, 1, generator=generator)
    return TensorDataset(x, y)


def weights_sha256(model: nn.Module) -> str:
    digest = hashlib.sha256()
    for parameter in model.parameters():
        digest.update(parameter.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def main() -> None:
    dist.init_process_group("gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank} of {world_size} joined", flush=True)

    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
    dataset = synthetic_regression()
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)  # a different shard per rank
    loader = DataLoader(dataset, batch_size=BATCH_SIZE, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.MSELoss()

    step = 0
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()  # DDP all-reduces the gradients here
            optimizer.step()
            if step % 5 == 0:
                print(f"step {step} loss={loss.item():.4f}", flush=True)
            step += 1

    print(f"final_loss={loss.item():.4f}", flush=True)
    print(f"weights_sha={weights_sha256(model.module)}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
