"""Lightning: checkpoint on a Spotline request, a Spot notice or SIGTERM, resume.

    agent = Agent.from_env().start()
    spotline = SpotlineCallback(agent, "/tmp/spotline-ckpt")
    trainer = L.Trainer(..., callbacks=[spotline])
    try:
        trainer.fit(model, data, ckpt_path=spotline.restore())
    except SIGTERMException:  # Lightning's own SIGTERM handling ends fit with it
        pass
    spotline.close()          # waits for the last upload
    if spotline.stopped: sys.exit(EXIT_STOPPED)

For an exact mid-epoch resume, the training data comes from a
`spotline.integrations.data.ResumableDataLoader` (Lightning then restores its position; a plain
shuffled DataLoader restarts the epoch's data), and the callback keeps the RNG states.

At the end of each training batch (the step boundary) every rank agrees on one decision
(`trainer.strategy.reduce`, MAX); on a checkpoint every rank calls Lightning's own
`trainer.save_checkpoint` (model, optimizers, schedulers, loops, callbacks' and datamodule's
state), and the agent uploads the file the global rank 0 wrote, in the background. On SIGTERM (or
a stray run) the checkpoint is durable before `trainer.should_stop` ends the fit. Install with
`pip install 'spotline[lightning]'`.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch

from spotline.agent import Agent, CheckpointReason
from spotline.integrations._common import agreed_decision, collect_rng_states, set_rng_states
from spotline.integrations.data import is_resumable_state

_RNG_KEY = "spotline_rng_states"


class SpotlineCallback(pl.Callback):
    """See the module docstring. `local_dir` holds checkpoints on their way up and the one a
    restore brings down. `stop_on_request`: also stop after a requested checkpoint (the control
    plane stops a preempted run itself, so the default goes on training)."""

    def __init__(
        self, agent: Agent, local_dir: str | Path, *, stop_on_request: bool = False, save_rng: bool = True
    ) -> None:
        self.agent = agent
        self.local_dir = Path(local_dir)
        self.stop_on_request = stop_on_request
        self.save_rng = save_rng
        self.stopped = False

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Lightning's checkpoint holds no random state, so dropout and random augmentation would
        # draw differently after a resume: keep the process's generators with it (the writer's:
        # in a multi-rank run every rank resumes with rank 0's).
        if self.save_rng:
            checkpoint[_RNG_KEY] = collect_rng_states()
        # A ResumableDataLoader counts the batches it handed out, one more than were trained
        # (Lightning fetches one ahead): record the batches the fit loop actually trained.
        fit_loop = checkpoint.get("loops", {}).get("fit_loop", {})
        progress = trainer.fit_loop.epoch_loop.batch_progress.current  # a _ProcessedTracker
        for state in fit_loop.get("state_dict", {}).get("combined_loader", []):
            if is_resumable_state(state):
                state["epoch"] = trainer.current_epoch
                state["batches"] = progress.processed  # type: ignore[attr-defined]

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self.save_rng and _RNG_KEY in checkpoint:
            set_rng_states(checkpoint[_RNG_KEY])

    def restore(self) -> str | None:
        """Download the newest durable checkpoint; the path for `trainer.fit(..., ckpt_path=...)`,
        or None to start fresh."""
        restored = self.agent.restore_files(self.local_dir / "restore")
        if restored is None:
            return None
        checkpoints = sorted(restored.path.glob("*.ckpt"))
        if len(checkpoints) != 1:
            raise RuntimeError(f"checkpoint {restored.record.uri} holds no single .ckpt file")
        return str(checkpoints[0])

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        total = trainer.estimated_stepping_batches
        progress = min(1.0, step / total) if total and total != float("inf") else None
        self.agent.report(step, progress)

        def reduce(code: int) -> int:
            tensor = torch.tensor(code, device=pl_module.device)
            return int(trainer.strategy.reduce(tensor, reduce_op="max").item())

        reason, stop = agreed_decision(self.agent, reduce if trainer.world_size > 1 else None)
        if reason is not None:
            stop = stop or (self.stop_on_request and reason is CheckpointReason.REQUESTED)
            # Waits for the previous upload first: it may still be reading an older file.
            self.agent.wait_for_upload()
            path = self.local_dir / f"step-{step:012d}" / "spotline.ckpt"
            started = time.monotonic()
            trainer.save_checkpoint(path)  # every rank calls it; the strategy decides who writes
            self.agent.save_files(
                step,
                path.parent,
                progress=progress,
                reason=reason,
                wait=stop,
                remove_after=True,
                started=started,
            )
        if stop:
            trainer.should_stop = True
            self.stopped = True

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.agent.wait_for_upload()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        # Lightning's own SIGTERM handling raises after the step: the upload still finishes.
        self.agent.wait_for_upload()

    def close(self) -> None:
        """Wait for the last upload, stop the agent, and drop the restored copy."""
        self.agent.close()
        shutil.rmtree(self.local_dir / "restore", ignore_errors=True)
