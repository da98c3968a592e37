"""A Hugging Face Trainer run that checkpoints with Spotline and resumes exactly where it stopped.

    python examples/training/transformers_train.py --epochs 3

On a Spotline request, a Spot notice or SIGTERM the callback sets `control.should_save` (and on
SIGTERM `control.should_training_stop`); the Trainer writes its own `checkpoint-<step>` directory
(model, optimizer, scheduler, RNG, trainer state) and the agent uploads it. A restarted run
resumes through `resume_from_checkpoint`, and its losses are those of an uninterrupted run (the
Trainer restores its data position and random generators itself). The model is a small BERT made
from a config here (no download, no tokenizer: random token ids). Needs `pip install
'spotline[transformers]'`.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from spotline.agent import EXIT_STOPPED, Agent
from spotline.integrations.transformers import SpotlineTrainerCallback


def dataset(n: int, seed: int) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 1000, (n, 32), generator=g)
    return [{"input_ids": row, "labels": (row.sum() % 2).long()} for row in ids]


class PrintLoss(TrainerCallback):
    """Each step's loss on stdout (`logging_steps=1`), and a pause that stands in for a larger model."""

    def __init__(self, step_time_s: float) -> None:
        self.step_time_s = step_time_s

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if logs and "loss" in logs:
            print(f"step {state.global_step} loss {logs['loss']!r}", flush=True)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        time.sleep(self.step_time_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=float, default=3)
    parser.add_argument("--examples", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-time-s", type=float, default=0.0)
    parser.add_argument("--local-dir", default="/tmp/spotline-hf", help="the Trainer's output_dir")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    config = BertConfig(vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, num_labels=2)  # fmt: skip
    model = BertForSequenceClassification(config)
    agent = Agent.from_env().start()
    spotline = SpotlineTrainerCallback(agent)
    trainer = Trainer(
        model=model,
        args=TrainingArguments(
            output_dir=args.local_dir,
            num_train_epochs=args.epochs,
            per_device_train_batch_size=16,
            seed=args.seed,
            save_strategy="no",  # Spotline asks for the checkpoints it needs
            logging_steps=1,
            disable_tqdm=True,
            report_to=[],
        ),
        train_dataset=dataset(args.examples, args.seed),  # type: ignore[arg-type]
        callbacks=[spotline, PrintLoss(args.step_time_s)],
    )
    try:
        trainer.train(resume_from_checkpoint=spotline.restore(args.local_dir))
    finally:
        spotline.close()
    return EXIT_STOPPED if spotline.stopped else 0


if __name__ == "__main__":
    sys.exit(main())
