"""Hugging Face Trainer: a request checkpoints at the next step, SIGTERM checkpoints and stops, and
`resume_from_checkpoint` continues with the same loss sequence as an uninterrupted run."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F
from transformers import Trainer, TrainerCallback, TrainingArguments

from spotline.integrations.transformers import SpotlineTrainerCallback

from .conftest import Harness, completed

pytestmark = pytest.mark.frameworks

SEED = 5
EXAMPLES = 24
BATCH = 4  # 6 steps an epoch
EPOCHS = 3


class TinyRegressor(nn.Module):
    """Any nn.Module whose forward returns a loss works with the Trainer (no hub, no download)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.net(F.dropout(x, 0.1, self.training))  # random: the RNG must resume too
        loss = F.mse_loss(out, labels)
        if self.training:
            self.losses.append(loss.item())
        return {"loss": loss, "logits": out}


def dataset() -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(SEED)
    return [
        {"x": torch.randn(4, generator=g), "labels": torch.randn(1, generator=g)} for _ in range(EXAMPLES)
    ]


def arguments(output_dir: Path) -> TrainingArguments:
    return TrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=BATCH,
        num_train_epochs=EPOCHS,
        learning_rate=0.05,
        lr_scheduler_type="linear",
        seed=SEED,
        save_strategy="no",  # Spotline asks for the checkpoints it needs
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        disable_tqdm=True,
        remove_unused_columns=False,
        dataloader_num_workers=0,
    )


class Driver(TrainerCallback):
    """The control plane and the host: a request at one step, SIGTERM at another."""

    def __init__(self, harness: Harness, agent: Any, request_at: int | None, sigterm_at: int | None) -> None:
        self.harness, self.agent = harness, agent
        self.request_at, self.sigterm_at = request_at, sigterm_at

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.request_at:
            self.harness.request_checkpoint()
        self.agent.poll_once()  # what the agent's poller thread does every poll_s
        if state.global_step == self.sigterm_at:
            self.agent.request_stop()  # what SIGTERM does


def train(harness: Harness, run: str, request_at: int | None, sigterm_at: int | None) -> tuple[Any, ...]:
    torch.manual_seed(SEED)
    model = TinyRegressor()
    agent, publisher = harness.agent()
    spotline = SpotlineTrainerCallback(agent)
    output_dir = harness.tmp / run
    trainer = Trainer(
        model=model,
        args=arguments(output_dir),
        train_dataset=dataset(),  # type: ignore[arg-type]
        callbacks=[Driver(harness, agent, request_at, sigterm_at), spotline],
    )
    resume = spotline.restore(output_dir)
    trainer.train(resume_from_checkpoint=resume)
    spotline.close()
    return model.losses, publisher, spotline, resume


def test_request_sigterm_and_resume_give_the_uninterrupted_loss_sequence(harness: Harness) -> None:
    logging.getLogger("transformers").setLevel(logging.ERROR)
    total = EXAMPLES // BATCH * EPOCHS
    reference, *_ = train(harness, "ref", None, None)
    assert len(reference) == total

    first, events, spotline, resumed = train(harness, "run1", request_at=3, sigterm_at=8)
    assert resumed is None and spotline.stopped
    assert first == reference[:8]
    ckpts = completed(events)
    assert [(e["step"], e["reason"]) for e in ckpts] == [(3, "requested"), (8, "sigterm")]
    assert ckpts[0]["requested_at"] is not None
    assert all(e["size_bytes"] > 0 for e in ckpts)

    second, events2, spotline2, resumed2 = train(harness, "run2", None, None)
    assert resumed2 is not None and Path(resumed2).name == "checkpoint-8"
    assert (Path(resumed2) / "trainer_state.json").is_file()
    assert not spotline2.stopped and completed(events2) == []
    assert first + second == reference  # bit-exact: the same floats, in the same order
