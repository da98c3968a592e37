"""What every integration shares: the checkpoint decision every rank agrees on."""

from __future__ import annotations

from collections.abc import Callable

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
