"""The pure scheduling core: stdlib and pydantic only.

No AWS SDK, no Powertools, no clock and no randomness of its own: `now` and a seeded
`random.Random` are passed in, so Lambda, the local runtime and the simulator run the same code.
"""

from spotline.domain.config import PriorityWeights, ReclaimPolicy, SchedulerConfig, VictimStrategy
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
from spotline.domain.planner import (
    Admit,
    Decision,
    PendingQueue,
    PlanStats,
    Preempt,
    SortedQueue,
    Wait,
    plan,
    plan_with_stats,
)
from spotline.domain.preemption import Candidate, select_victims
from spotline.domain.priority import effective_priority, fairshare_factor
from spotline.domain.quota import Ledger, quota_shortfall
from spotline.domain.running import RunningIndex

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
