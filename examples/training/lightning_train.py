"""A Lightning fit that checkpoints with Spotline and resumes where it stopped.

    python examples/training/lightning_train.py --epochs 3

On a Spotline request, a Spot notice or SIGTERM it checkpoints at the next step boundary with
Lightning's own `save_checkpoint`; the agent uploads the file in the background (SIGTERM: before
the process exits, with status 143). A restarted run resumes through `ckpt_path`. The model and
its data are made here (no download). Needs `pip install 'spotline[lightning]'`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import nn
from torch.nn import functional as F

from spotline.agent import EXIT_STOPPED, Agent
from spotline.integrations.lightning import SpotlineCallback


class Batches:
    """Fixed batches, resumable mid-epoch (Lightning saves and loads this state with the loops)."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.batches = [(torch.randn(32, 16, generator=g), torch.randn(32, 1, generator=g)) for _ in range(n)]
        self.trained = 0
        self._start = 0

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Any:
        start, self._start = self._start, 0
        self.trained = start
        yield from self.batches[start:]

    def state_dict(self) -> dict[str, int]:
        return {"trained": self.trained % len(self.batches)}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._start = state["trained"]


class Regressor(pl.LightningModule):
    def __init__(self, batches: int, seed: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 1))
        self.data = Batches(batches, seed)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.data.trained += 1
        self.log("loss", loss, prog_bar=True)
        return loss

    def train_dataloader(self) -> Any:
        return self.data

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batches", type=int, default=100, help="per epoch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--local-dir", default=os.environ.get("SPOTLINE_LOCAL_CHECKPOINT_DIR", "/tmp/spotline")
    )
    args = parser.parse_args()

    pl.seed_everything(args.seed)
    model = Regressor(args.batches, args.seed)
    agent = Agent.from_env().start()  # before the Trainer: Lightning chains its SIGTERM handler to ours
    spotline = SpotlineCallback(agent, args.local_dir)
    trainer = pl.Trainer(
        max_epochs=args.epochs,
        accelerator="auto",
        devices="auto",
        callbacks=[spotline],
        enable_checkpointing=False,  # Spotline's checkpoints are the durable ones
        logger=False,
    )
    try:
        trainer.fit(model, ckpt_path=spotline.restore())
    except SIGTERMException:
        spotline.stopped = True  # Lightning's own SIGTERM handling, after our checkpoint
    finally:
        spotline.close()
    return EXIT_STOPPED if spotline.stopped else 0


if __name__ == "__main__":
    sys.exit(main())
