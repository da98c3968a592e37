"""DeepSpeed: checkpoint on a Spotline request, a Spot notice or SIGTERM with DeepSpeed's own
checkpoint (`engine.save_checkpoint`, ZeRO's per-rank optimizer partitions included), and resume.

    engine, optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    agent = Agent.from_env().start()
    ckpt = DeepSpeedCheckpointer(agent, engine, "/tmp/spotline-ds", loader=loader)
    step = ckpt.restore()                        # 0 if fresh; else engine, loader and RNG as saved
    while step < total:
        ...; engine.backward(loss); engine.step(); step += 1
        if not ckpt.step(step):                  # every rank stops at the same step
            break
    ckpt.close()

Every rank calls `engine.save_checkpoint` into a local directory (DeepSpeed writes the model
states from rank 0 and each rank's ZeRO partition itself) and adds a small file of its own: its
loader position and random generators, which DeepSpeed's `client_state` (written by rank 0 only)
cannot hold per rank. Each rank uploads its own files, rank 0 the rest and, once every rank's
are up, the manifest. A restore downloads the checkpoint on every rank and calls
`engine.load_checkpoint`. The decision to checkpoint and the upload are `DistributedCheckpointer`'s
(`spotline.integrations.torch`). Install with `pip install 'spotline[deepspeed]'`; tested on the CPU
(DeepSpeed's CPU accelerator, gloo) with ZeRO stages 1 and 2.
"""

from __future__ import annotations

import io
import logging
import re
import shutil
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch

from spotline.agent import Agent, CheckpointReason, CheckpointRecord
from spotline.integrations._common import collect_rng_states, set_rng_states
from spotline.integrations.torch import DistributedCheckpointer

log = logging.getLogger(__name__)

# The tag every Spotline checkpoint is saved under (one checkpoint a directory).
TAG = "spotline"
_PER_RANK = re.compile(r"(?:zero_pp_rank_|spotline_rank)(\d+)[_.]")


class DeepSpeedCheckpointer(DistributedCheckpointer):
    """See the module docstring. `loader`: anything with `state_dict` / `load_state_dict`
    (a `ResumableDataLoader`), saved per rank with the random generators."""

    def __init__(
        self,
        agent: Agent,
        engine: Any,
        local_dir: str | Path,
        *,
        loader: Any = None,
        save_rng: bool = True,
    ) -> None:
        super().__init__(agent, local_dir, loader=loader, save_rng=save_rng, async_write=False)
        self.engine = engine

    def step(self, step: int, state_fn: Any = None, *, progress: float | None = None) -> bool:
        """Call after each training step, on every rank. Checkpoints if one is due and returns
        False when every rank should stop (its checkpoint is durable)."""
        self.agent.report(step, progress)
        reason, stop = self.decision()
        if reason is not None:
            self.save_engine(step, reason=reason, progress=progress, wait=stop)
        if stop:
            self.stopped = True
        return not stop

    def save_engine(
        self,
        step: int,
        *,
        reason: CheckpointReason | str = CheckpointReason.MANUAL,
        progress: float | None = None,
        wait: bool = False,
    ) -> Future[CheckpointRecord | None]:
        """DeepSpeed's checkpoint at `step`, on every rank (collective)."""

        def write(path: Path) -> None:
            self.engine.save_checkpoint(str(path), tag=TAG, client_state={"spotline_step": step})
            own: dict[str, Any] = {}
            if self.loader is not None:
                own["loader"] = self.loader.state_dict()
            if self.save_rng:
                own["rng"] = collect_rng_states()
            (path / TAG).mkdir(parents=True, exist_ok=True)
            torch.save(own, path / TAG / f"spotline_rank{self.rank}.pt")

        return self.save_written(step, write, reason=reason, progress=progress, wait=wait)

    def owner(self, name: str) -> int:
        """Each rank's ZeRO partition and Spotline file are its own; rank 0 uploads the rest."""
        match = _PER_RANK.search(Path(name).name)
        return int(match.group(1)) if match else 0

    def restore(self, state: dict[str, Any] | None = None) -> int:
        """Resume from the newest durable checkpoint on every rank: the engine (model, optimizer
        partitions, LR scheduler) through `engine.load_checkpoint`, then this rank's loader and
        random generators. Its step, or 0 to start fresh (nothing is touched then)."""
        target = self.local_dir / f"restore-rank{self.rank}"
        restored = self.agent.restore_files(target)
        step = restored.step if restored is not None else 0
        if self.distributed and (self._all_reduce_min(step) != step or self._all_reduce_max(step) != step):
            raise RuntimeError("ranks restored different checkpoints (a checkpoint landed during restore?)")
        if restored is None:
            return 0
        loaded, _ = self.engine.load_checkpoint(str(restored.path), tag=TAG)
        if loaded is None:
            raise RuntimeError(f"DeepSpeed could not load the checkpoint in {restored.path}")
        own = restored.path / TAG / f"spotline_rank{self.rank}.pt"
        if own.exists():
            saved = torch.load(io.BytesIO(own.read_bytes()), weights_only=True)
            if self.loader is not None and "loader" in saved:
                self.loader.load_state_dict(saved["loader"])
            if self.save_rng and "rng" in saved:
                set_rng_states(saved["rng"])
        else:
            log.warning(
                "rank %d: the checkpoint has no loader or generator state for it (written by another"
                " world size): not restored",
                self.rank,
            )
        shutil.rmtree(target, ignore_errors=True)
        return restored.step
