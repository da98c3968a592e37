"""Lightning: a request checkpoints at the next step, SIGTERM checkpoints and stops, and a new run
resumes through `ckpt_path` with the same loss sequence as an uninterrupted run (bit-exact)."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from spotline.integrations.lightning import SpotlineCallback

from .conftest import Harness, completed

pytestmark = pytest.mark.frameworks

SEED = 7
BATCHES = 6  # per epoch
EPOCHS = 3


class Batches:
    """The training data: fixed batches, resumable mid-epoch. Its state is how many batches of
    this epoch were trained on (not fetched: Lightning fetches one ahead)."""

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(SEED)
        self.batches = [
            (torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)) for _ in range(BATCHES)
        ]
        self.trained = 0
        self._start = 0

    def __len__(self) -> int:
        return BATCHES

    def __iter__(self) -> Any:
        start, self._start = self._start, 0
        self.trained = start
        yield from self.batches[start:]

    def state_dict(self) -> dict[str, int]:
        return {"trained": self.trained % BATCHES}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self._start = state["trained"]


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
        self.data = Batches()
        self.losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        # Dropout draws from the global RNG: a resume must restore it too.
        loss = F.mse_loss(self.net(F.dropout(x, 0.1)), y)
        self.losses.append(loss.item())
        self.data.trained += 1
        return loss

    def train_dataloader(self) -> Any:
        return self.data

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.5)]


class Driver(pl.Callback):
    """The control plane and the host: a request at one step, SIGTERM at another."""

    def __init__(self, harness: Harness, agent: Any, request_at: int | None, sigterm_at: int | None) -> None:
        self.harness, self.agent = harness, agent
        self.request_at, self.sigterm_at = request_at, sigterm_at

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.request_at:
            self.harness.request_checkpoint()
        self.agent.poll_once()  # what the agent's poller thread does every poll_s
        if trainer.global_step == self.sigterm_at:
            self.agent.request_stop()  # what SIGTERM does


def trainer(tmp: Path, callbacks: list[pl.Callback]) -> pl.Trainer:
    return pl.Trainer(
        max_epochs=EPOCHS,
        accelerator="cpu",
        devices=1,
        callbacks=callbacks,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp,
        deterministic=True,
    )


def fit(harness: Harness, run: str, request_at: int | None, sigterm_at: int | None) -> tuple[Any, ...]:
    pl.seed_everything(SEED, verbose=False)
    model = Tiny()
    agent, publisher = harness.agent()
    spotline = SpotlineCallback(agent, harness.tmp / run)
    driver = Driver(harness, agent, request_at, sigterm_at)
    ckpt_path = spotline.restore()
    trainer(harness.tmp / run, [driver, spotline]).fit(model, ckpt_path=ckpt_path)
    spotline.close()
    return model.losses, publisher, spotline, ckpt_path


def test_request_sigterm_and_resume_give_the_uninterrupted_loss_sequence(harness: Harness) -> None:
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    total = BATCHES * EPOCHS
    pl.seed_everything(SEED, verbose=False)
    reference = Tiny()
    trainer(harness.tmp / "ref", []).fit(reference)
    assert len(reference.losses) == total

    # A run asked for a checkpoint at step 4 goes on; SIGTERM at step 9 (mid-epoch) stops it
    first, events, spotline, restored_from = fit(harness, "run1", request_at=4, sigterm_at=9)
    assert restored_from is None and spotline.stopped
    assert first == reference.losses[:9]
    ckpts = completed(events)
    assert [(e["step"], e["reason"]) for e in ckpts] == [(4, "requested"), (9, "sigterm")]
    assert ckpts[0]["requested_at"] is not None and ckpts[1]["requested_at"] is None
    assert all(e["size_bytes"] > 0 and e["write_s"] >= 0 for e in ckpts)

    # A new run restores the SIGTERM checkpoint and finishes with the uninterrupted losses
    second, events2, spotline2, restored_from2 = fit(harness, "run2", request_at=None, sigterm_at=None)
    assert restored_from2 is not None and restored_from2.endswith(".ckpt")
    assert not spotline2.stopped and completed(events2) == []
    assert first + second == reference.losses  # bit-exact: the same floats, in the same order


def test_a_real_sigterm_checkpoints_before_lightning_stops(harness: Harness) -> None:
    """Lightning's own SIGTERM handler raises at the end of the step; the checkpoint is durable
    before it does."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    pl.seed_everything(SEED, verbose=False)
    model = Tiny()
    agent, publisher = harness.agent()
    agent.start()  # installs the agent's SIGTERM handler; Lightning's is added to it

    class Kill(pl.Callback):
        def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
            if trainer.global_step == 3:
                signal.raise_signal(signal.SIGTERM)

    spotline = SpotlineCallback(agent, harness.tmp / "run")
    with pytest.raises(SIGTERMException):
        trainer(harness.tmp / "run", [Kill(), spotline]).fit(model)
    spotline.close()
    assert [(e["step"], e["reason"]) for e in completed(publisher)] == [(4, "sigterm")]
    assert spotline.stopped
