"""Hugging Face `Trainer`: checkpoint on a Spotline request, a Spot notice or SIGTERM, resume.

    agent = Agent.from_env().start()
    spotline = SpotlineTrainerCallback(agent)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[spotline])
    trainer.train(resume_from_checkpoint=spotline.restore(args.output_dir))
    spotline.close()          # waits for the last upload; exit with EXIT_STOPPED if stopped

At the end of each step every rank agrees on one decision (`torch.distributed` when it is
initialised); on a checkpoint it sets `control.should_save`, and the Trainer writes its own
checkpoint directory (`checkpoint-<step>`: model, optimizer, scheduler, RNG states, trainer
state), which the callback hands to the agent from `on_save`. On SIGTERM (or a stray run) it also
sets `control.should_training_stop`, and the SIGTERM checkpoint is durable before `train()`
returns. The Trainer's own periodic saves are left alone: Spotline uploads only the checkpoints it
asked for. Install with `pip install 'spotline[transformers]'`.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from spotline.agent import Agent, CheckpointReason
from spotline.integrations._common import agreed_decision

log = logging.getLogger(__name__)

# Where the Trainer puts a checkpoint (transformers.trainer_utils.PREFIX_CHECKPOINT_DIR).
CHECKPOINT_DIR = "checkpoint-{step}"


class SpotlineTrainerCallback(TrainerCallback):
    """See the module docstring. `stop_on_request`: also stop after a requested checkpoint (the
    control plane stops a preempted run itself, so the default goes on training)."""

    def __init__(self, agent: Agent, *, stop_on_request: bool = False) -> None:
        self.agent = agent
        self.stop_on_request = stop_on_request
        self._pending: tuple[CheckpointReason, bool] | None = None
        self.stopped = False

    def restore(self, output_dir: str | Path) -> str | None:
        """Download the newest durable checkpoint into `output_dir/checkpoint-<step>`; the path
        for `trainer.train(resume_from_checkpoint=...)`, or None to start fresh."""
        staging = Path(output_dir) / ".spotline-restore"
        restored = self.agent.restore_files(staging)
        if restored is None:
            return None
        target = Path(output_dir) / CHECKPOINT_DIR.format(step=restored.step)
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
        return str(target)

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        self.agent.report(state.global_step, _progress(state))
        reason, stop = agreed_decision(self.agent, _all_reduce_max(args))
        if reason is not None:
            control.should_save = True
            stop = stop or (self.stop_on_request and reason is CheckpointReason.REQUESTED)
            self._pending = (reason, stop)
        if stop:
            control.should_training_stop = True
            self.stopped = True
        return control

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        if self._pending is None:
            return control  # the Trainer's own save_steps: not ours to upload
        reason, stop = self._pending
        self._pending = None
        path = Path(str(args.output_dir)) / CHECKPOINT_DIR.format(step=state.global_step)
        # Every rank reports (the others only mark the request answered); the writer uploads.
        # A stopping run waits: the process must not exit before its checkpoint is durable.
        self.agent.save_files(state.global_step, path, progress=_progress(state), reason=reason, wait=stop)
        return control

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> TrainerControl:
        self.agent.wait_for_upload()
        return control

    def close(self) -> None:
        """Wait for the last upload and stop the agent."""
        self.agent.close()


def _progress(state: TrainerState) -> float | None:
    return min(1.0, state.global_step / state.max_steps) if state.max_steps else None


def _all_reduce_max(args: TrainingArguments) -> Any:
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None

    def reduce(code: int) -> int:
        device = args.device if dist.get_backend() == "nccl" else torch.device("cpu")
        tensor = torch.tensor([code], dtype=torch.int64, device=device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return int(tensor.item())

    return reduce
