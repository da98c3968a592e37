"""Plain PyTorch and torchrun: checkpoint on a Spotline request, a Spot notice or SIGTERM with
`torch.distributed.checkpoint` (one shard per rank), and resume.

    dist.init_process_group("gloo")              # or nccl; torchrun sets RANK, LOCAL_RANK, ...
    agent = Agent.from_env().start()
    ckpt = DistributedCheckpointer(agent, "/tmp/spotline-ckpt")
    state = {"model": model.state_dict(), "optim": optim.state_dict()}
    start = ckpt.restore(state)                  # loads into `state` in place; 0 if fresh
    model.load_state_dict(state["model"]); optim.load_state_dict(state["optim"])
    for step in range(start, total):
        train_one_step()
        if not ckpt.step(step + 1, lambda: {"model": model.state_dict(), "optim": optim.state_dict()}):
            break                                # every rank stops at the same step
    ckpt.close()                                 # waits for the last upload

At each step boundary the ranks agree on one decision with an all-reduce (MAX) on a gloo group
of their own: only local rank 0 of each node polls the control plane and instance metadata
(`AgentSettings.is_node_leader`), and SIGTERM may reach the ranks a step apart. On a checkpoint,
every rank writes its own shard with `torch.distributed.checkpoint` (`async_save` where the
torch version has it: training goes on while the shards are written) and uploads its own files
(one writer per shard) on the agent's upload thread; once every rank's files are up, global rank
0 writes the manifest, which names all of them. A restore downloads the checkpoint on every rank
and loads it with `torch.distributed.checkpoint.load`, which reshards it if the world size changed.
"""

from __future__ import annotations

import logging
import re
import shutil
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from spotline.agent import Agent, CheckpointError, CheckpointFile, CheckpointReason, CheckpointRecord
from spotline.integrations._common import agreed_decision

log = logging.getLogger(__name__)

_SHARD = re.compile(r"__(\d+)_\d+\.distcp")


class DistributedCheckpointer:
    """See the module docstring. Works in a single process too (no process group)."""

    def __init__(self, agent: Agent, local_dir: str | Path, *, async_write: bool = True) -> None:
        self.agent = agent
        self.local_dir = Path(local_dir)
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world_size = dist.get_world_size() if self.distributed else 1
        # Two gloo groups: one for the decision (the training thread), one for the checkpoint's
        # own collectives (async_save's and the upload's, on background threads). Gloo carries
        # these few bytes on the CPU whatever backend the training uses.
        self._decide = dist.new_group(backend="gloo") if self.distributed else None
        self._write = dist.new_group(backend="gloo") if self.distributed else None
        self.async_write = async_write
        self.stopped = False

    # -- the step boundary ----------------------------------------------------------------------

    def decision(self) -> tuple[CheckpointReason | None, bool]:
        """(reason, stop), the same on every rank."""
        return agreed_decision(self.agent, self._all_reduce_max if self.distributed else None)

    def _all_reduce_max(self, code: int) -> int:
        tensor = torch.tensor([code], dtype=torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self._decide)
        return int(tensor.item())

    def step(
        self, step: int, state_fn: Callable[[], Mapping[str, Any]], *, progress: float | None = None
    ) -> bool:
        """Call after each training step, on every rank. Checkpoints if one is due (`state_fn`
        only then) and returns False when every rank should stop (its checkpoint is durable)."""
        self.agent.report(step, progress)
        reason, stop = self.decision()
        if reason is not None:
            self.save(step, state_fn(), reason=reason, progress=progress, wait=stop)
        if stop:
            self.stopped = True
        return not stop

    # -- save -------------------------------------------------------------------------------------

    def save(
        self,
        step: int,
        state: Mapping[str, Any],
        *,
        reason: CheckpointReason | str = CheckpointReason.MANUAL,
        progress: float | None = None,
        wait: bool = False,
    ) -> Future[CheckpointRecord | None]:
        """A sharded checkpoint of `state` at `step`, on every rank (collective)."""
        captured_at = self.agent.now()  # the state is the step's: later requests are not answered
        self.agent.wait_for_upload()  # one checkpoint in flight; its collectives come first
        started = time.monotonic()
        store = self.agent.store
        if store is None or self.agent.stray_of is not None:
            return self.agent.save_files(step, self.local_dir, reason=reason)  # logs, settles
        path = self.local_dir / f"step-{step:012d}"
        if self.rank == 0 and path.exists():
            shutil.rmtree(path)
        self._barrier()
        prefix = self._broadcast(store.new_files_prefix(step) if self.rank == 0 else None)
        if self.async_write and not wait:
            written: Any = dcp_async_save(dict(state), checkpoint_id=str(path), process_group=self._write)
        else:
            dcp_save(dict(state), checkpoint_id=str(path), process_group=self._write)
            written = None

        def upload() -> list[CheckpointFile]:
            mine: list[CheckpointFile] | None = None
            try:
                if written is not None:
                    written.result()  # the shards are on disk
                mine = store.upload_files(prefix, self._own_files(path))
            except Exception:
                log.exception("rank %d: uploading its shard of step %d failed", self.rank, step)
            # Every rank's files (None from a rank that failed), on every rank: the writer's
            # manifest names them all, and no rank waits for one that gave up.
            gathered: list[list[CheckpointFile] | None] = [None] * self.world_size
            if self.distributed:
                dist.all_gather_object(gathered, mine, group=self._write)
            else:
                gathered = [mine]
            if self.rank == 0:
                shutil.rmtree(path, ignore_errors=True)
            failed = [rank for rank, files in enumerate(gathered) if files is None]
            if failed:
                raise CheckpointError(f"step {step}: the shards of rank(s) {failed} were not uploaded")
            return [f for files in gathered if files for f in files]

        return self.agent.save_shards(
            step,
            prefix,
            upload,
            progress=progress,
            reason=reason,
            wait=wait,
            captured_at=captured_at,
            started=started,
        )

    def _own_files(self, path: Path) -> dict[str, Path]:
        """This rank's shard files (and, on rank 0, the metadata and any other file dcp wrote)."""
        own: dict[str, Path] = {}
        for file in sorted(path.rglob("*")):
            if not file.is_file():
                continue
            name = file.relative_to(path).as_posix()
            match = _SHARD.fullmatch(file.name)
            if (match and int(match.group(1)) == self.rank) or (not match and self.rank == 0):
                own[name] = file
        return own

    # -- restore ----------------------------------------------------------------------------------

    def restore(self, state: dict[str, Any]) -> int:
        """Load the newest durable checkpoint into `state` in place (every rank); its step, or 0
        to start fresh. Every rank must agree: they all read the same manifest."""
        target = self.local_dir / f"restore-rank{self.rank}"
        restored = self.agent.restore_files(target)
        step = restored.step if restored is not None else 0
        if self.distributed and (self._all_reduce_min(step) != step or self._all_reduce_max(step) != step):
            raise RuntimeError("ranks restored different checkpoints (a checkpoint landed during restore?)")
        if restored is None:
            return 0
        dcp_load(state, checkpoint_id=str(restored.path), process_group=self._write)
        shutil.rmtree(target, ignore_errors=True)
        return restored.step

    def close(self) -> None:
        """Wait for the last upload (every rank: its collectives need them all) and stop the agent."""
        self.agent.close()

    # -- collectives --------------------------------------------------------------------------------

    def _all_reduce_min(self, value: int) -> int:
        if not self.distributed:
            return value
        tensor = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN, group=self._decide)
        return int(tensor.item())

    def _barrier(self) -> None:
        if self.distributed:
            dist.barrier(group=self._decide)

    def _broadcast(self, value: str | None) -> str:
        if not self.distributed:
            assert value is not None
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self._decide)
        assert box[0] is not None
        return box[0]
