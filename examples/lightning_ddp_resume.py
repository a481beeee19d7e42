"""A Lightning Trainer on distrun: DDP over gloo, one process per replica, its checkpoints in
DISTRUN_CHECKPOINT_DIR, resumed by Lightning itself (`ckpt_path="last"`) when the job restarts.

Lightning's KubeflowEnvironment reads the variables the Training Operator gives a PyTorchJob's
pods (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK), which every distrun engine gives a pytorch
replica: the same cell runs on the laptop and on the cluster.

Environment knobs: TRAIN_STEPS (40), CHECKPOINT_EVERY (5), and FAIL_AT_STEP: the last rank
kills itself with SIGKILL after that step in the job's first run (DISTRUN_RESTART 0), as a
lost node would end it.
"""

import os
import signal

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.environments import KubeflowEnvironment
from torch.utils.data import DataLoader, TensorDataset

STEPS = int(os.environ.get("TRAIN_STEPS", "40"))
EVERY = int(os.environ.get("CHECKPOINT_EVERY", "5"))
FAIL_AT = int(os.environ.get("FAIL_AT_STEP", "0"))
RESTART = int(os.environ.get("DISTRUN_RESTART", "0"))
RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])


class Regression(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: list[torch.Tensor], _index: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)

    def on_train_start(self) -> None:
        print(f"rank {RANK} starts at step {self.trainer.global_step} (restart {RESTART})")

    def on_train_batch_end(self, outputs: object, batch: object, index: int) -> None:
        step = self.trainer.global_step
        if RANK == 0:
            print(f"step {step} loss={float(outputs['loss']):.6f}", flush=True)  # type: ignore[index]
        if FAIL_AT and RESTART == 0 and RANK == WORLD - 1 and step == FAIL_AT:
            os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    torch.manual_seed(0)
    x = torch.randn(64, 4)
    data = TensorDataset(x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]))
    checkpoints = ModelCheckpoint(
        dirpath=os.environ["DISTRUN_CHECKPOINT_DIR"], save_last=True, every_n_train_steps=EVERY
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        num_nodes=WORLD,
        strategy="ddp",
        plugins=[KubeflowEnvironment()],
        max_steps=STEPS,
        callbacks=[checkpoints],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=os.environ["DISTRUN_CHECKPOINT_DIR"],
    )
    loader = DataLoader(data, batch_size=4, shuffle=False)
    trainer.fit(Regression(), loader, ckpt_path="last")
    if RANK == 0:
        print(f"finished at step {trainer.global_step}")


if __name__ == "__main__":
    main()
