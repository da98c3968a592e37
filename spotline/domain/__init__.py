"""The pure scheduling core: stdlib and pydantic only.

No AWS SDK, no Powertools, no clock and no randomness of its own: `now` and a seeded
`random.Random` are passed in, so Lambda, the local runtime and the simulator run the same code.

The names below load on first use (PEP 562): a Lambda handler that needs only the models does
not import the planner at cold start (`bench/cold_start.py`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from spotline.domain.config import PriorityWeights, ReclaimPolicy, SchedulerConfig, VictimStrategy
    from spotline.domain.decisions import Admit, Decision, Move, PlanStats, Preempt, Wait
    from spotline.domain.models import (
        PRIORITIES_HIGH_FIRST,
        TERMINAL_STATES,
        Allocation,
        ClusterSnapshot,
        Job,
        JobSpec,
        JobState,
        Pool,
        Priority,
        Purchase,
        SpotPreference,
        TeamQuota,
        can_transition,
    )
    from spotline.domain.placement import candidate_pools, spot_refusal
    from spotline.domain.planner import plan, plan_with_stats
    from spotline.domain.preemption import Candidate, select_victims
    from spotline.domain.priority import effective_priority, fairshare_factor
    from spotline.domain.queue import PendingQueue, SortedQueue
    from spotline.domain.quota import Ledger, quota_shortfall
    from spotline.domain.running import RunningIndex

# Each exported name -> the module of this package that defines it.
_MODULES = {
    "PriorityWeights": "config",
    "ReclaimPolicy": "config",
    "SchedulerConfig": "config",
    "VictimStrategy": "config",
    "PRIORITIES_HIGH_FIRST": "models",
    "TERMINAL_STATES": "models",
    "Allocation": "models",
    "ClusterSnapshot": "models",
    "Job": "models",
    "JobSpec": "models",
    "JobState": "models",
    "Pool": "models",
    "Priority": "models",
    "Purchase": "models",
    "SpotPreference": "models",
    "TeamQuota": "models",
    "can_transition": "models",
    "candidate_pools": "placement",
    "spot_refusal": "placement",
    "Admit": "decisions",
    "Decision": "decisions",
    "PendingQueue": "queue",
    "PlanStats": "decisions",
    "Move": "decisions",
    "Preempt": "decisions",
    "SortedQueue": "queue",
    "Wait": "decisions",
    "plan": "planner",
    "plan_with_stats": "planner",
    "Candidate": "preemption",
    "select_victims": "preemption",
    "effective_priority": "priority",
    "fairshare_factor": "priority",
    "Ledger": "quota",
    "quota_shortfall": "quota",
    "RunningIndex": "running",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "PRIORITIES_HIGH_FIRST",
    "TERMINAL_STATES",
    "Admit",
    "Allocation",
    "Candidate",
    "ClusterSnapshot",
    "Decision",
    "Job",
    "JobSpec",
    "JobState",
    "Ledger",
    "Move",
    "PendingQueue",
    "PlanStats",
    "Pool",
    "Preempt",
    "Priority",
    "PriorityWeights",
    "Purchase",
    "ReclaimPolicy",
    "RunningIndex",
    "SchedulerConfig",
    "SortedQueue",
    "SpotPreference",
    "TeamQuota",
    "VictimStrategy",
    "Wait",
    "can_transition",
    "candidate_pools",
    "effective_priority",
    "fairshare_factor",
    "plan",
    "plan_with_stats",
    "quota_shortfall",
    "select_victims",
    "spot_refusal",
]
