"""The scheduling policy a deployment sets (`SchedulerConfig`), each setting with its unit, its
default and why it is a setting; docs/concepts/scheduling-policy.md is the user's page for them.

The same `SchedulerConfig` drives the Lambda scheduler, the local runtime and the simulator. An
unknown or removed setting is refused with its name (`extra="forbid"`): nothing a deployment
writes is silently dropped. What a user has no reason to change is a constant beside the code
that uses it, with its reason.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spotline.domain.models import Priority


class VictimStrategy(StrEnum):
    """How preemption orders the candidates of one class (`preemption.py`); the lowest class
    always goes first, as in Slurm and Kueue."""

    RANDOM = "random"
    LEAST_REMAINING_TIME = "least-remaining-time"
    LOWEST_UTILIZATION = "lowest-utilization"
    LEAST_LOST_WORK = "least-lost-work"


class ReclaimPolicy(StrEnum):
    """Which borrowers a team under its nominal quota may preempt to take its quota back
    (Kueue's `reclaimWithinCohort`)."""

    NEVER = "never"
    LOWER_PRIORITY = "lower-priority"  # only jobs of a lower priority class (Kueue's LowerPriority)
    SAME_OR_LOWER_PRIORITY = "same-or-lower-priority"  # also the lender's peers of its own class
    ANY = "any"


# Where a user finds every setting, named in the error for one that is not a setting.
SETTINGS_PAGE = "docs/concepts/scheduling-policy.md"


def _unknown(model: type[BaseModel], data: Any, prefix: str = "") -> list[str]:
    if not isinstance(data, dict):
        return []
    return sorted(prefix + str(key) for key in data if key not in model.model_fields)


def _refuse(unknown: list[str]) -> None:
    """Refuse, in one message naming them all, keys that are not settings (a typo, or a setting
    an earlier version had)."""
    if unknown:
        raise ValueError(
            f"not a setting of this version: {', '.join(unknown)} (the settings: {SETTINGS_PAGE})"
        )


# The gap between the best job of a class and the worst of the class above, in effective priority.
CLASS_GAP = 1000.0
# Slack beyond this much counts as no urgency (s).
DEADLINE_HORIZON_S = 6 * 3600.0
# The job size that earns the whole size term (GPUs).
SIZE_NORM_GPUS = 64
# Disruptions (preemptions and interruptions) beyond this many earn nothing more.
HISTORY_CAP = 3
# A declared remaining run time beyond this earns nothing of the shortest-declared term (s).
SHORTEST_NORM_S = 72 * 3600.0


class PriorityWeights(BaseModel):
    """Weights of the multifactor effective priority (Slurm's multifactor plugin, adapted). Every
    weight is at least 0; 0 turns its factor off.

    effective = class_step * rank(class)               # low 0, normal 1, high 2, critical 3
              + age * min(wait / max_age_s, 1)         # waiting time, capped (PriorityMaxAge)
              + deadline * urgency                     # 1 - slack / 6 h, in [0, 1]
              + size * min(gpus / 64, 1)               # bigger jobs first (PriorityFavorSmall=NO)
              + fairshare * 2 ** (-usage / share)      # Slurm's classic fair-share factor
              + history * min(disruptions, 3) / 3      # preemptions and interruptions suffered
              + shortest * shortness(declared remaining)   # shortest declared job first

    The class order is strict, as Slurm's QOS priority is above its multifactor terms:
    `class_step` is the largest spread the other terms can make (`within_class_span`) plus
    `CLASS_GAP`, so the other terms order the jobs of a class and never rank one above a job of
    the class over it.

    `shortness` is 1 - min(1, ln(1 + r / 1 h) / ln(1 + 72 h / 1 h)) of the declared remaining
    run time r = `expected_runtime_s` - run time so far: 1 for a job about to end, 0.25 with a
    day left, 0 beyond 72 h. A job that declares nothing, or has run past what it declared,
    gets 0.
    """

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known(cls, data: Any) -> Any:
        _refuse(_unknown(cls, data))
        return data

    # Waiting time moves a job up its class, up to a full day's wait.
    age: float = Field(default=900.0, ge=0)
    # The wait that earns the whole age term (s; Slurm's PriorityMaxAge).
    max_age_s: float = Field(default=24 * 3600.0, gt=0)
    # A job whose deadline slack runs out moves up its class.
    deadline: float = Field(default=1500.0, ge=0)
    # Bigger jobs slightly first: small ones fit into gaps anyway.
    size: float = Field(default=100.0, ge=0)
    # Teams that used less than their share recently go first; it keeps a team that takes its
    # quota back ahead of the jobs it preempted.
    fairshare: float = Field(default=400.0, ge=0)
    # A job preempted or interrupted moves ahead inside its class, so it is not disrupted again.
    history: float = Field(default=60.0, ge=0)
    # Jobs that declare a short remaining run time go first (they free their GPUs soonest).
    shortest: float = Field(default=200.0, ge=0)

    @property
    def within_class_span(self) -> float:
        """The most by which the terms other than the class can separate two jobs."""
        return self.age + self.deadline + self.size + self.fairshare + self.history + self.shortest

    @property
    def class_step(self) -> float:
        """The class term's step: `within_class_span` plus `CLASS_GAP`."""
        return self.within_class_span + CLASS_GAP

    def class_term(self, priority: Priority) -> float:
        """The class term of a job of `priority`."""
        return self.class_step * priority.rank


class SchedulerConfig(BaseModel):
    """Policy of one Spotline deployment: what a user may choose, and what describes the
    deployment (restart and checkpoint costs, the pass's cadence)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _known(cls, data: Any) -> Any:
        weights = data.get("weights") if isinstance(data, dict) else None
        _refuse(_unknown(cls, data) + _unknown(PriorityWeights, weights, "weights."))
        return data

    weights: PriorityWeights = Field(default_factory=PriorityWeights)

    # --- preemption -----------------------------------------------------------------------------
    # The order in which victims of one class are taken (the lowest class first, always).
    strategy: VictimStrategy = VictimStrategy.LEAST_LOST_WORK
    # A job cannot be preempted within this long of its last start, so it makes progress (s).
    protection_period_s: float = Field(default=600.0, ge=0)
    # A preemptor waits this long in the queue before preempting: running jobs end all the time,
    # and every preemption costs its victims a checkpoint write and a restart (s).
    preemption_delay_s: float = Field(default=60.0, ge=0)
    # A job that would preempt waits instead when running jobs free the GPUs it lacks within this
    # long by their run times: a preemption costs every victim GPU a write and a restart (s; 0: never).
    release_wait_s: float = Field(default=5400.0, ge=0)
    # Classes that preempt at once, and stop victims whose unsaved work is no more than their
    # checkpoint write without waiting for it: work that cannot wait a minute.
    stop_at_once_for: frozenset[Priority] = frozenset({Priority.CRITICAL})
    # Classes that preempt only for their head in a pass (the first of the class that neither
    # starts nor claims spare GPUs); the others wait for GPUs to free: fewer preemptions.
    preempt_for_class_head_only: frozenset[Priority] = frozenset({Priority.NORMAL})
    # Which borrowers a team under its nominal quota may preempt to take its quota back.
    reclaim_within_cohort: ReclaimPolicy = ReclaimPolicy.LOWER_PRIORITY

    # --- Spot and On-Demand ---------------------------------------------------------------------
    # Classes that run On-Demand when their spot setting is `auto`: they do not risk a reclaim.
    on_demand_classes: frozenset[Priority] = frozenset({Priority.CRITICAL})
    # A job with spot `auto` interrupted this many times runs On-Demand, when Spot is then
    # expected to cost it more than On-Demand.
    max_interruptions_on_spot: int = Field(default=2, ge=0)
    # A deadline job runs on Spot only when its slack covers this many times the delay that
    # interruptions are expected to cost it (a risk appetite).
    spot_slack_factor: float = Field(default=2.0, ge=0)
    # A job that started On-Demand because Spot was full moves to Spot room when at least this
    # much of its run is left and the move pays for itself (s; 0: no moves).
    move_to_spot_min_remaining_s: float = Field(default=21600.0, ge=0)
    # The deadline guard's plans one pass may solve (each up to ~0.3 s), soonest deadlines first;
    # the others get the guard's rules this pass (None: no bound; 0: no plan).
    deadline_plans_per_pass: int | None = Field(default=16, ge=0)

    # --- fair-share -----------------------------------------------------------------------------
    # Half-life of the decayed GPU usage that fair-share compares (s; Slurm's PriorityDecayHalfLife).
    usage_half_life_s: float = Field(default=7 * 24 * 3600.0, gt=0)

    # --- the deployment -------------------------------------------------------------------------
    # A restart's cost (scheduling, image pull, loading the checkpoint), part of each victim's
    # lost work (s).
    restart_cost_s: float = Field(default=120.0, ge=0)
    # A checkpoint write's cost for a job whose agent has not measured one yet (s).
    checkpoint_write_s: float = Field(default=60.0, ge=0)
    # The deadline guard's changeover: the restart a move between Spot and On-Demand costs
    # (launch, image pull, checkpoint load) (s).
    deadline_changeover_s: float = Field(default=720.0, gt=0)
    # The time to the deadline guard's next look at a job: a scheduling pass's cadence (s).
    deadline_step_s: float = Field(default=300.0, ge=0)

    def waives_preemption_delay(self, priority: Priority) -> bool:
        """A job of this class preempts without waiting `preemption_delay_s`."""
        return priority in self.stop_at_once_for
