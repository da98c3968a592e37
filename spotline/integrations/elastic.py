"""Elastic jobs in training code: the run's size, and the gradient accumulation that keeps the
global batch the same at every size.

Spotline restarts an elastic job at another size from its checkpoint (a resize): the run learns
its size from `SPOTLINE_WORLD_SIZE` (its GPUs over all its nodes; torchrun's `WORLD_SIZE` once
the process group is up). `DistributedCheckpointer` reshards the model and optimizer for the new
world on restore. What keeps the training the same is the global batch: each step, the world
together takes `global_batch` samples, each rank `global_batch / world_size` of them in
`accumulation_steps` micro-batches of `micro_batch`, and the loss of each micro-batch is divided
by the number of micro-batches of the world (`loss_scale`), so the gradient DDP averages is the
mean over the global batch at every size. The learning rate needs no change then.

    world = world_size()                              # after dist.init_process_group
    steps = accumulation_steps(global_batch=256, micro_batch=16, world=world)
    for micro in range(steps):
        loss = criterion(model(x[micro]), y[micro]) * loss_scale(steps)
        with model.no_sync() if micro < steps - 1 else nullcontext():
            loss.backward()
    optimizer.step(); optimizer.zero_grad()
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import torch.distributed as dist

# Spotline's variable for the run's size (the control plane sets it on every elastic run).
WORLD_SIZE_ENV = "SPOTLINE_WORLD_SIZE"


def world_size(environ: Mapping[str, str] | None = None) -> int:
    """The run's size: the process group's when it is up, else `SPOTLINE_WORLD_SIZE`, else
    torchrun's `WORLD_SIZE`, else 1. ValueError names a variable that is not a positive integer."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size()
    env = os.environ if environ is None else environ
    for name in (WORLD_SIZE_ENV, "WORLD_SIZE"):
        raw = env.get(name, "").strip()
        if raw:
            if not raw.isdigit() or int(raw) < 1:
                raise ValueError(f"{name}={raw!r} is not a positive whole number")
            return int(raw)
    return 1


def accumulation_steps(global_batch: int, micro_batch: int, world: int) -> int:
    """Micro-batches each rank accumulates per step so that the world takes `global_batch`
    samples per step. ValueError when `world * micro_batch` does not divide `global_batch` (pick
    sizes that do: the job's elastic `sizes` or `step` say which worlds can come)."""
    if min(global_batch, micro_batch, world) < 1:
        raise ValueError("global_batch, micro_batch and world must be positive")
    per_step = world * micro_batch
    if global_batch % per_step:
        raise ValueError(
            f"a global batch of {global_batch} is not a whole number of micro-batches of {micro_batch}"
            f" on {world} ranks ({per_step} a round)"
        )
    return global_batch // per_step


def loss_scale(steps: int) -> float:
    """What to multiply each micro-batch's mean loss by, with `steps` micro-batches per rank: the
    gradient then sums to the mean over the rank's share, and DDP's average over the ranks makes it
    the mean over the global batch."""
    return 1.0 / steps
