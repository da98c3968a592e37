"""Moves between Spot and On-Demand, each a checkpoint-then-requeue that a pass decides after its
other decisions: On-Demand jobs to Spot room left (`SchedulerConfig.move_to_spot_min_remaining_s`),
and deadline jobs on Spot to On-Demand room when the deadline guard's safety net says a Spot loss
could no longer be absorbed (`moves_to_on_demand`)."""

from __future__ import annotations

from spotline.domain.admission_models import AnswerKind
from spotline.domain.checkpoint_cost import write_s
from spotline.domain.config import SchedulerConfig
from spotline.domain.deadline import PassPlans, on_demand_to_spot_note, spot_unsafe, stays_on_demand
from spotline.domain.decisions import Move
from spotline.domain.models import (
    Allocation,
    ClusterSnapshot,
    Job,
    JobState,
    Pool,
    SpotPoolSignal,
    SpotPreference,
)
from spotline.domain.move_value import MoveValue, move_value
from spotline.domain.placement import changeover_h, preference, spot_refusal, step_h
from spotline.domain.preemption import HELD_FOR_DEADLINE, estimated_remaining_s, shielded
from spotline.domain.priority import PriorityScorer
from spotline.domain.quota import Ledger
from spotline.domain.running import RunningIndex

# With less of a Spot pool's history seen than this (s), a move to it is not weighed against the
# pool's outages (too few to predict from): the remaining-time threshold decides alone.
MOVE_MIN_HISTORY_S = 86400.0


def moves_to_spot(
    snapshot: ClusterSnapshot,
    running: RunningIndex,
    ledger: Ledger,
    taken: set[str],
    score: PriorityScorer,
    now: float,
    config: SchedulerConfig,
    budget: int,
    plans: PassPlans | None = None,
) -> list[Move]:
    """The On-Demand jobs to move to Spot room left after the pass's decisions (`Move`): those
    that may run on Spot, are neither leaving nor shielded (protection period, preemption cap),
    and have at least `move_to_spot_min_remaining_s` left (a deadline job only when the deadline
    guard lets it return: `spotline.domain.deadline.stays_on_demand`), longest first, each to the first
    Spot pool (cheapest) where it fits the GPUs still free and whose history says the move pays
    for itself (`_weigh`); at most `budget` of them."""
    spot = sorted(
        (
            p
            for p in snapshot.pools.values()
            if p.is_spot and ledger.free(p.name) > 0 and _spot_there(snapshot, p.name)
        ),
        key=preference,
    )
    if not spot:
        return []
    candidates = _movable(snapshot, running, taken, now, config, spot[0].name, plans)
    if not candidates:
        return []
    free = {p.name: ledger.free(p.name) for p in spot}
    moves: list[Move] = []
    for remaining, allocation in candidates:
        move = _first_room(allocation, remaining, spot, free, now, config, score, snapshot, plans)
        if move is not None:
            moves.append(move)
        if len(moves) >= budget or not any(free.values()):
            break
    return moves


def _spot_there(snapshot: ClusterSnapshot, pool: str) -> bool:
    """Whether a Spot pool's capacity counts as there: it was not last seen missing."""
    signal = snapshot.spot.get(pool)
    return signal is None or signal.available


def _movable(
    snapshot: ClusterSnapshot,
    running: RunningIndex,
    taken: set[str],
    now: float,
    config: SchedulerConfig,
    target: str,
    plans: PassPlans | None = None,
) -> list[tuple[float, Allocation]]:
    """The running On-Demand jobs that may move, with their estimated remaining run times,
    longest first (then by id): not leaving, not taken by the pass, not shielded, and with at
    least `move_to_spot_min_remaining_s` left."""
    least = config.move_to_spot_min_remaining_s
    candidates: list[tuple[float, str, Allocation]] = []
    for pool in snapshot.pools.values():
        if pool.is_spot or pool.is_reserved:
            continue  # (a reserved pool is prepaid: nothing to save by leaving it)
        for group in running.groups.get(pool.name, {}).values():
            for allocation in group.values():
                job = allocation.job
                if job.state is not JobState.RUNNING or job.id in taken:
                    continue
                shield = shielded(allocation, now, config)
                if shield is not None and not _may_leave_its_hold(job, shield):
                    continue
                remaining = estimated_remaining_s(job, now, config)
                if remaining < least:
                    continue
                if (
                    stays_on_demand(
                        job,
                        now,
                        spot=snapshot.spot.get(target),
                        changeover_h=changeover_h(config),
                        step_h=step_h(config),
                        plans=plans,
                    )
                    is None
                ):
                    candidates.append((remaining, job.id, allocation))
    candidates.sort(key=lambda c: (-c[0], c[1]))
    return [(remaining, allocation) for remaining, _, allocation in candidates]


def _first_room(
    allocation: Allocation,
    remaining: float,
    spot: list[Pool],
    free: dict[str, int],
    now: float,
    config: SchedulerConfig,
    score: PriorityScorer,
    snapshot: ClusterSnapshot,
    plans: PassPlans | None = None,
) -> Move | None:
    """A move of the job to the first of the `spot` pools that can host it in the GPUs still
    `free` (taken from them), whose Spot rules accept it, and where the move pays for itself
    (`_weigh`); None when none does."""
    job = allocation.job
    source = snapshot.pools.get(allocation.pool)
    for pool in spot:
        demand = pool.demand_gpus(job)
        if not pool.can_host(job) or demand > free[pool.name]:
            continue
        if spot_refusal(job, pool, now, remaining, config) is not None:
            continue
        value = _weigh(allocation, source, pool, demand, remaining, snapshot.spot.get(pool.name), config)
        if value is not None and not value.worth:
            continue
        free[pool.name] -= demand
        reason = (
            f"moving from {allocation.pool} to {pool.name}, which has {demand} GPUs free:"
            f" ~{remaining / 3600.0:.1f} h left to run at Spot's price"
        )
        if value is not None:
            reason = f"{reason}; {value.describe()}"
        # The guard's word with the target pool's history, as `_movable` asked it (the plan's
        # reason where the plan let the job go, not the rules' alone).
        note = on_demand_to_spot_note(
            job,
            now,
            changeover_h=changeover_h(config),
            step_h=step_h(config),
            spot=snapshot.spot.get(pool.name),
            plans=plans,
        )
        if note is not None:
            reason = f"{reason}; {note}"
        return Move(job, allocation.pool, pool.name, score(job), reason)
    return None


def _weigh(
    allocation: Allocation,
    source: Pool | None,
    target: Pool,
    demand: int,
    remaining: float,
    signal: SpotPoolSignal | None,
    config: SchedulerConfig,
) -> MoveValue | None:
    """The move's weighing under the target pool's history (`move_value.move_value`); None
    when not weighed: a deadline job (the deadline guard decides its return to Spot:
    `deadline.stays_on_demand`), or thin history (`MOVE_MIN_HISTORY_S`)."""
    job = allocation.job
    if job.spec.deadline_at is not None:
        return None
    return move_value(
        remaining_s=remaining,
        gpus=demand,
        spot_price=target.price,
        on_demand_price=1.0 if source is None else source.price,
        signal=signal,
        write_s=write_s(job, config),
        restart_s=config.restart_cost_s,
        min_history_s=MOVE_MIN_HISTORY_S,
    )


def moves_to_on_demand(
    snapshot: ClusterSnapshot,
    running: RunningIndex,
    ledger: Ledger,
    taken: set[str],
    score: PriorityScorer,
    now: float,
    budget: int,
    config: SchedulerConfig,
) -> list[Move]:
    """The deadline jobs running on Spot that the deadline guard sends to On-Demand now
    (`deadline.spot_unsafe`: a reclaim after the next look would leave no time for an On-Demand
    restart), soonest deadline first, each to the first On-Demand pool (cheapest) where it fits the
    GPUs still free; at most `budget` of them. The job checkpoints, leaves Spot and is requeued;
    Spot placement then refuses it (`placement.spot_refusal`), so it resumes On-Demand."""
    on_demand = sorted(
        (
            p
            for p in snapshot.pools.values()
            if not p.is_spot and not p.is_reserved and ledger.free(p.name) > 0
        ),
        key=preference,
    )
    if not on_demand or budget <= 0:
        return []
    candidates: list[tuple[float, str, Allocation, str]] = []
    for pool in snapshot.pools.values():
        if not pool.is_spot:
            continue
        for group in running.groups.get(pool.name, {}).values():
            for allocation in group.values():
                job = allocation.job
                if job.state is not JobState.RUNNING or job.id in taken or job.spec.deadline_at is None:
                    continue
                if job.spec.spot is SpotPreference.REQUIRED:
                    continue
                unsafe = spot_unsafe(
                    job,
                    now,
                    on_spot=True,
                    spot=snapshot.spot.get(pool.name),
                    changeover_h=changeover_h(config),
                    step_h=step_h(config),
                )
                if unsafe is not None:
                    candidates.append((job.spec.deadline_at, job.id, allocation, unsafe))
    candidates.sort(key=lambda c: (c[0], c[1]))
    free = {p.name: ledger.free(p.name) for p in on_demand}
    moves: list[Move] = []
    for _, _, allocation, why in candidates:
        job = allocation.job
        for pool in on_demand:
            demand = pool.demand_gpus(job)
            if not pool.can_host(job) or demand > free[pool.name]:
                continue
            free[pool.name] -= demand
            reason = f"moving from {allocation.pool} to On-Demand {pool.name} ({demand} GPUs free): {why}"
            moves.append(Move(job, allocation.pool, pool.name, score(job), reason, to_spot=False))
            break
        if len(moves) >= budget:
            break
    return moves


def _may_leave_its_hold(job: Job, shield: str) -> bool:
    """A job shielded only by its own On-Demand hold may still choose Spot (the guard decides),
    unless its deadline was promised On-Demand only."""
    answer = job.deadline_answer
    return shield == HELD_FOR_DEADLINE and answer is not None and answer.kind is not AnswerKind.ON_DEMAND_ONLY
