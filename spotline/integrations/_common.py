"""What every integration shares: the checkpoint decision every rank agrees on, and the
process's random generators as a checkpoint keeps them."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from spotline.agent import Agent, CheckpointReason

# The decision as a number, so that ranks agree by an all-reduce (MAX): the most urgent wins.
_CODES: dict[CheckpointReason | None, int] = {
    None: 0,
    CheckpointReason.PERIODIC: 1,
    CheckpointReason.REQUESTED: 2,
    CheckpointReason.SPOT_INTERRUPTION: 3,
    CheckpointReason.SIGTERM: 4,
}
# A stray run (the job runs elsewhere): stop without writing anything.
STRAY = 5
_REASONS = {code: reason for reason, code in _CODES.items()}


def local_decision(agent: Agent) -> int:
    """This process's view: STRAY, a reason's code, or 0."""
    if agent.stray_of is not None:
        return STRAY
    return _CODES[agent.checkpoint_reason()]


def agreed_decision(
    agent: Agent, all_reduce_max: Callable[[int], int] | None = None
) -> tuple[CheckpointReason | None, bool]:
    """(reason to checkpoint now or None, whether to stop after it), the same on every rank.

    Only one process per node polls the control plane and instance metadata, and SIGTERM may
    reach the ranks a step apart: `all_reduce_max` (None for a single process) makes one
    decision of all of theirs, so every rank checkpoints and stops at the same step."""
    code = local_decision(agent)
    if all_reduce_max is not None:
        code = all_reduce_max(code)
    if code == STRAY:
        return None, True
    if code == _CODES[CheckpointReason.SIGTERM] and not agent.stop_requested:
        # Another rank got SIGTERM first: this one stops with it.
        agent.request_stop()
    reason = _REASONS[code]
    return reason, reason is CheckpointReason.SIGTERM


def collect_rng_states() -> dict[str, Any]:
    """The process's random generators, in types a `weights_only` load accepts."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state(legacy=True)
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": [
            kind,
            torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            int(pos),
            int(has_gauss),
            float(gauss),
        ],
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    kind, keys, pos, has_gauss, gauss_np = states["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss_np))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
