"""Plain PyTorch, torchrun (DDP) and FSDP2: checkpoint on a Spotline request, a Spot notice or
SIGTERM with `torch.distributed.checkpoint` (one shard per rank), and resume exactly.

    dist.init_process_group("gloo")              # or nccl; torchrun sets RANK, LOCAL_RANK, ...
    model = DDP(net)                             # or fully_shard(net) (FSDP2), or a plain module
    optimizer = torch.optim.AdamW(model.parameters())
    loader = ResumableDataLoader(dataset, batch_size=32, seed=0)   # spotline.integrations.data
    agent = Agent.from_env().start()
    ckpt = DistributedCheckpointer(agent, "/tmp/spotline-ckpt", model=model, optimizer=optimizer,
                                   loader=loader, extra={"scheduler": scheduler})
    step = ckpt.restore()                        # 0 if fresh; else everything is as it was saved
    while step < total:
        for batch in loader:
            train_one_step(batch); step += 1
            if not ckpt.step(step) or step == total:   # every rank stops at the same step
                break
        ...
    ckpt.close()                                 # waits for the last upload

What a checkpoint holds: the model and optimizer state through
`torch.distributed.checkpoint.state_dict.get_state_dict` (so AdamW's moments and step counts are
there: a fresh optimizer's own `state_dict()` is empty, and `dcp.load` has nothing to load into),
restored with `set_state_dict`; each `extra` object's `state_dict()` (an LR scheduler); and per
rank, the loader's position and the process's random generators (torch, CUDA, Python, numpy), so
dropout and data order after a resume are those of an uninterrupted run. Resuming with another
world size reshards the model and optimizer; the per-rank loader and generator states are then
left out (with a warning): the data order is recomputed for the new world.

At each step boundary the ranks agree on one decision with an all-reduce (MAX) on a gloo group
of their own: only local rank 0 of each node polls the control plane and instance metadata
(`AgentSettings.is_node_leader`), and SIGTERM may reach the ranks a step apart. On a checkpoint,
every rank writes its own shard with `torch.distributed.checkpoint` (`async_save` where the
torch version has it: training goes on while the shards are written) and uploads its own files
(one writer per shard) on the agent's upload thread; once every rank's files are up, global rank
0 writes the manifest, which names all of them. A restore downloads the checkpoint on every rank
and loads it with `torch.distributed.checkpoint.load`.

The older form, `restore(state)` and `step(step, state_fn)` with a dict of your own, still works
for state you manage yourself; an optimizer's plain `state_dict()` in it is not restored (a
warning says so): pass `optimizer=` instead.
"""

from __future__ import annotations

import io
import logging
import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import FileSystemReader
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
from torch.distributed.checkpoint.state_dict_saver import async_save as dcp_async_save
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

from spotline.agent import Agent, CheckpointError, CheckpointFile, CheckpointReason, CheckpointRecord
from spotline.integrations._common import agreed_decision, collect_rng_states, set_rng_states

log = logging.getLogger(__name__)

_SHARD = re.compile(r"__(\d+)_\d+\.distcp")


class DistributedCheckpointer:
    """See the module docstring. Works in a single process too (no process group). `model`,
    `optimizer` (one or several), `loader` (anything with `state_dict` / `load_state_dict`,
    e.g. a `ResumableDataLoader`), `extra` (more objects with `state_dict` / `load_state_dict`)
    and `save_rng` say what a checkpoint holds when `step` and `restore` get no state of yours."""

    def __init__(
        self,
        agent: Agent,
        local_dir: str | Path,
        *,
        model: torch.nn.Module | None = None,
        optimizer: torch.optim.Optimizer | Iterable[torch.optim.Optimizer] | None = None,
        loader: Any = None,
        extra: Mapping[str, Any] | None = None,
        save_rng: bool = True,
        async_write: bool = True,
    ) -> None:
        self.agent = agent
        self.local_dir = Path(local_dir)
        self.model = model
        self.optimizers: tuple[torch.optim.Optimizer, ...] = (
            ()
            if optimizer is None
            else (optimizer,)
            if isinstance(optimizer, torch.optim.Optimizer)
            else tuple(optimizer)
        )
        if self.optimizers and model is None:
            raise ValueError("an optimizer's state is saved with its model's: pass model= too")
        self.loader = loader
        self.extra = dict(extra or {})
        self.save_rng = save_rng
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
        self,
        step: int,
        state_fn: Callable[[], Mapping[str, Any]] | None = None,
        *,
        progress: float | None = None,
    ) -> bool:
        """Call after each training step, on every rank. Checkpoints if one is due (the state
        of `model`, `optimizer`, ..., or `state_fn()` if given, only then) and returns False when
        every rank should stop (its checkpoint is durable)."""
        self.agent.report(step, progress)
        reason, stop = self.decision()
        if reason is not None:
            state = state_fn() if state_fn is not None else self.training_state()
            self.save(step, state, reason=reason, progress=progress, wait=stop)
        if stop:
            self.stopped = True
        return not stop

    # -- what a checkpoint holds ----------------------------------------------------------------

    def training_state(self) -> dict[str, Any]:
        """The state `step` saves: model and optimizer (`get_state_dict`), the `extra` objects,
        and this rank's loader position and random generators (keys of this rank only)."""
        if self.model is None and not self.extra and self.loader is None:
            raise ValueError(
                "nothing to checkpoint: give model= (and optimizer=, loader=, extra=) or a state_fn"
            )
        state: dict[str, Any] = {}
        if self.model is not None:
            model_state, optim_state = get_state_dict(self.model, self.optimizers)
            state["model"] = model_state
            if self.optimizers:
                state["optim"] = optim_state
        for name, item in self.extra.items():
            state[name] = item.state_dict()
        if self.loader is not None:
            state[self._rank_key("loader")] = self.loader.state_dict()
        if self.save_rng:
            buffer = io.BytesIO()
            torch.save(collect_rng_states(), buffer)
            state[self._rank_key("rng")] = buffer.getvalue()
        return state

    def _rank_key(self, name: str) -> str:
        return f"{name}_rank{self.rank}"

    def _apply(self, state: Mapping[str, Any]) -> None:
        """Put a loaded `training_state` back into the objects it came from."""
        if self.model is not None:
            set_state_dict(
                self.model,
                self.optimizers,
                model_state_dict=state["model"],
                optim_state_dict=state.get("optim", {}),
            )
        for name, item in self.extra.items():
            item.load_state_dict(state[name])
        if self.loader is not None and self._rank_key("loader") in state:
            self.loader.load_state_dict(state[self._rank_key("loader")])
        if self.save_rng and self._rank_key("rng") in state:
            set_rng_states(torch.load(io.BytesIO(state[self._rank_key("rng")]), weights_only=True))

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

        def write(path: Path) -> Any:
            if self.async_write and not wait:
                return dcp_async_save(dict(state), checkpoint_id=str(path), process_group=self._write)
            dcp_save(dict(state), checkpoint_id=str(path), process_group=self._write)
            return None

        return self.save_written(step, write, reason=reason, progress=progress, wait=wait)

    def save_written(
        self,
        step: int,
        write: Callable[[Path], Any],
        *,
        reason: CheckpointReason | str = CheckpointReason.MANUAL,
        progress: float | None = None,
        wait: bool = False,
    ) -> Future[CheckpointRecord | None]:
        """A checkpoint that `write(path)` writes into the directory `path` on every rank (a
        collective of the framework's: each rank writes its own files; it may return a future,
        whose `result()` the upload waits for); each rank then uploads the files `owner` gives it."""
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
        written = write(path)

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

    def owner(self, name: str) -> int:
        """The rank that uploads the file `name` of a checkpoint: a shard's own rank
        (`__<rank>_<n>.distcp`), rank 0 for the metadata and anything else."""
        match = _SHARD.fullmatch(Path(name).name)
        return int(match.group(1)) if match else 0

    def _own_files(self, path: Path) -> dict[str, Path]:
        """The files of `path` this rank uploads (see `owner`)."""
        own: dict[str, Path] = {}
        for file in sorted(path.rglob("*")):
            if file.is_file():
                name = file.relative_to(path).as_posix()
                if self.owner(name) == self.rank:
                    own[name] = file
        return own

    # -- restore ----------------------------------------------------------------------------------

    def restore(self, state: dict[str, Any] | None = None) -> int:
        """Resume from the newest durable checkpoint (every rank); its step, or 0 to start fresh
        (nothing is touched then). Without `state`: `model`, `optimizer`, the `extra` objects,
        the loader and the random generators are restored. With `state`: it is loaded in place,
        as `torch.distributed.checkpoint.load` does. Every rank must agree: they all read the
        same manifest."""
        target = self.local_dir / f"restore-rank{self.rank}"
        restored = self.agent.restore_files(target)
        step = restored.step if restored is not None else 0
        if self.distributed and (self._all_reduce_min(step) != step or self._all_reduce_max(step) != step):
            raise RuntimeError("ranks restored different checkpoints (a checkpoint landed during restore?)")
        if restored is None:
            return 0
        if state is not None:
            _warn_unrestorable_optimizers(state)
            dcp_load(state, checkpoint_id=str(restored.path), process_group=self._write)
        else:
            # Built only now: get_state_dict gives a fresh optimizer its (zero) state to load into.
            template = self.training_state()
            saved = set(FileSystemReader(str(restored.path)).read_metadata().state_dict_metadata)
            for key in [k for k in template if k.endswith(f"_rank{self.rank}")]:
                if not any(name == key or name.startswith(key + ".") for name in saved):
                    log.warning(
                        "rank %d: the checkpoint has no %s (written by another world size): not restored",
                        self.rank,
                        key,
                    )
                    del template[key]
            dcp_load(template, checkpoint_id=str(restored.path), process_group=self._write)
            self._apply(template)
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


def _warn_unrestorable_optimizers(state: Mapping[str, Any]) -> None:
    """An optimizer's own `state_dict()` before its first step holds no per-parameter state, so
    `dcp.load` has nothing to load it into: the optimizer would silently start over."""
    for key, value in state.items():
        if isinstance(value, Mapping) and "param_groups" in value and not value.get("state"):
            log.warning(
                "%r looks like an optimizer's state_dict() with no state yet: torch.distributed.checkpoint"
                " cannot restore it in place and the optimizer starts over. Pass optimizer= (and model=) to"
                " DistributedCheckpointer, which uses get_state_dict / set_state_dict.",
                key,
            )
