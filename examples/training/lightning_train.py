"""A Lightning fit that checkpoints with Spotline and resumes exactly where it stopped.

    python examples/training/lightning_train.py --epochs 3

On a Spotline request, a Spot notice or SIGTERM it checkpoints at the next step boundary with
Lightning's own checkpoint, which the agent uploads (on SIGTERM before the process exits, with
status 143). A new run resumes through `ckpt_path`: model, optimizer, loops, the data's position
(a `ResumableDataLoader`) and the random generators (dropout), so its losses are those of an
uninterrupted run. The data are made here (no download). Needs `pip install 'spotline[lightning]'`.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import nn
from torch.nn import functional as F
from torch.utils.data import TensorDataset

from spotline.agent import EXIT_STOPPED, Agent
from spotline.integrations.data import ResumableDataLoader
from spotline.integrations.lightning import SpotlineCallback


class Regressor(pl.LightningModule):
    def __init__(self, examples: int, seed: int, step_time_s: float) -> None:
        super().__init__()
        self.examples, self.seed, self.step_time_s = examples, seed, step_time_s
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 1))

    def train_dataloader(self) -> Any:
        g = torch.Generator().manual_seed(self.seed)
        x = torch.randn(self.examples, 16, generator=g)
        y = x.sum(dim=1, keepdim=True) + 0.1 * torch.randn(self.examples, 1, generator=g)
        # Shuffled, and resumable mid-epoch: its order comes from its own seed, not the global RNG.
        return ResumableDataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, seed=self.seed)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        print(f"step {self.global_step + 1} loss {loss.item()!r}", flush=True)
        time.sleep(self.step_time_s)  # stands in for a larger model
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--examples", type=int, default=640)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-time-s", type=float, default=0.0)
    parser.add_argument("--local-dir", default="/tmp/spotline-lightning")
    args = parser.parse_args()

    pl.seed_everything(args.seed, verbose=False)
    model = Regressor(args.examples, args.seed, args.step_time_s)
    agent = Agent.from_env().start()  # before the Trainer: Lightning chains its SIGTERM handler to ours
    spotline = SpotlineCallback(agent, args.local_dir)
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        accelerator="auto",
        devices=1,
        callbacks=[spotline],
        enable_checkpointing=False,  # Spotline's checkpoints are the durable ones
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    try:
        trainer.fit(model, ckpt_path=spotline.restore())
    except SIGTERMException:
        spotline.stopped = True  # Lightning's own SIGTERM handling ends fit, after our checkpoint
    finally:
        spotline.close()
    return EXIT_STOPPED if spotline.stopped else 0  # a stopped run must not exit 0


if __name__ == "__main__":
    sys.exit(main())
