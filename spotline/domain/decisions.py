"""What a scheduling pass decides, per job of its window: `Admit`, `Preempt`, `Wait` or `Move`.

A `Wait` carries why as a structured value (`WaitReason`), and the words that `explain.wait_text`
renders from it, which the API and the CLI show.

Plain slotted dataclasses for the decisions, not frozen ones: a pass makes one per job of its
window. Nothing changes a decision after the pass.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotline.domain.models import Job, MovingTo, Priority, SpotPreference

# --- why a job waits ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Draining:
    """Victims chosen for it by an earlier pass are still checkpointing (`count` of them); what
    it needs stays reserved for it meanwhile."""

    count: int


@dataclass(frozen=True, slots=True)
class NoGpuType:
    """No pool has the GPU type it asks for."""

    gpu_type: str


@dataclass(frozen=True, slots=True)
class NoPool:
    """No pool can host its shape (GPUs, nodes) with its Spot preference and class."""

    gpus: int
    nodes: int
    spot: SpotPreference
    priority: Priority


@dataclass(frozen=True, slots=True)
class SpareClaimed:
    """It claimed `gpus` GPUs in `pool` that victims of other preemptors free beyond their
    preemptors' needs, and waits for them to leave."""

    gpus: int
    pool: str


@dataclass(frozen=True, slots=True)
class BudgetSpent:
    """It does not fit (`shortfall`), and the pass's preemption budget is spent."""

    shortfall: str


@dataclass(frozen=True, slots=True)
class PreemptionDelay:
    """It does not fit (`shortfall`), and it may preempt only after waiting `delay_s` in the
    queue (`SchedulerConfig.preemption_delay_s`)."""

    shortfall: str
    delay_s: float


@dataclass(frozen=True, slots=True)
class NoVictim:
    """It does not fit (`shortfall`), and no running job in `pools` may be stopped for it."""

    shortfall: str
    pools: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ArrayCap:
    """`max_running` elements of its array hold GPUs already (Slurm's `%N`)."""

    array_id: str
    max_running: int


@dataclass(frozen=True, slots=True)
class BehindClassHead:
    """It does not fit (`shortfall`), and a job of its class ranked before it is the class's head
    in this pass: only the head preempts (`SchedulerConfig.preempt_for_class_head_only`)."""

    shortfall: str
    head: str


@dataclass(frozen=True, slots=True)
class HeldForGang:
    """It does not fit (`shortfall`): the free GPUs of `pool` are held for the blocked multi-node
    job `gang` ranked before it; `backfill` says why it may not backfill into them (`gang_hold`)."""

    shortfall: str
    gang: str
    pool: str
    backfill: str | None = None


@dataclass(frozen=True, slots=True)
class ReleaseSoon:
    """It does not fit (`shortfall`), and running jobs free the `gpus` GPUs it lacks in `pool`
    within `within_s` by their run times: it waits for them instead of preempting
    (`SchedulerConfig.release_wait_s`, `release.PassReleases`)."""

    shortfall: str
    pool: str
    gpus: int
    within_s: float


@dataclass(frozen=True, slots=True)
class HeldByVariant:
    """It does not fit (`shortfall`), and the simulator variant `variant` keeps it from preempting
    in this pass, for `why` (`extension.PassHooks.may_preempt`; never in production)."""

    shortfall: str
    variant: str
    why: str


@dataclass(frozen=True, slots=True)
class HeldForDeadlines:
    """Its On-Demand pools' free GPUs are held for deadline jobs answered at submission
    (`admission.OnDemandHold`) over the time it would run (`held` GPUs at most, in `pools`)."""

    pools: tuple[str, ...]
    held: int


WaitReason = (
    ArrayCap
    | Draining
    | NoGpuType
    | NoPool
    | SpareClaimed
    | BudgetSpent
    | PreemptionDelay
    | NoVictim
    | BehindClassHead
    | HeldForGang
    | ReleaseSoon
    | HeldByVariant
    | HeldForDeadlines
)


# --- the decisions ------------------------------------------------------------------------


@dataclass(slots=True)
class Admit:
    job: Job
    pool: str
    effective_priority: float
    reason: str
    action: str = "admit"


@dataclass(slots=True)
class Resize:
    """Checkpoint the elastic `job`, running on `from_gpus` in `pool`, stop it and restart it
    there on `to_gpus` (its GPUs stay held meanwhile): a shrink that makes room for the job
    `for_job`, a give-back of GPUs it grew into, or a growth into idle GPUs (`for_job` None)."""

    job: Job
    pool: str
    from_gpus: int
    to_gpus: int
    effective_priority: float
    reason: str
    for_job: str | None = None
    action: str = "resize"

    @property
    def shrinks(self) -> bool:
        return self.to_gpus < self.from_gpus


@dataclass(slots=True)
class Preempt:
    """Checkpoint and stop `victims` in `pool` (or stop them at once when `checkpoint` is
    False: `SchedulerConfig.stop_at_once_for`); `job` is admitted once they have left. A victim
    with a `Resize` in `resizes` is an elastic job shrunk instead: it restarts smaller in `pool`."""

    job: Job
    pool: str
    victims: tuple[str, ...]
    effective_priority: float
    reason: str
    checkpoint: bool = True
    action: str = "preempt"
    resizes: tuple[Resize, ...] = ()


@dataclass(slots=True)
class Wait:
    """The job waits: `why`, and `reason`, the same in words (`explain.wait_text`)."""

    job: Job
    effective_priority: float
    why: WaitReason
    reason: str
    action: str = "wait"
    # (pool, GPUs): the free GPUs held for it in this pass, as the first blocked gang.
    holds: tuple[str, int] | None = None


@dataclass(slots=True)
class Move:
    """Checkpoint `job`, running On-Demand in `source`, and requeue it, to resume in Spot `pool`,
    which has room for it now (`SchedulerConfig.move_to_spot_min_remaining_s`); or, with
    `to_spot=False`, a deadline job on Spot to resume On-Demand in `pool` (the deadline guard). Acted on as a
    preemption with no preemptor: the job keeps its place and priority, and the next pass admits
    it where it fits first, Spot before On-Demand."""

    job: Job
    source: str
    pool: str
    effective_priority: float
    reason: str
    # False: a deadline job leaving Spot for On-Demand (`moves.moves_to_on_demand`)
    to_spot: bool = True
    action: str = "move"

    @property
    def draining_for(self) -> MovingTo:
        """What the job's allocation leaves for while it checkpoints: a pass holds its GPUs in
        `pool` meanwhile."""
        return MovingTo(pool=self.pool)


Decision = Admit | Preempt | Wait | Move | Resize


@dataclass(frozen=True)
class PlanStats:
    """What one pass looked at (the benchmark reports it)."""

    candidates_examined: int
    running_considered: int
