"""The deadline plans of one scheduling pass: how many the pass may solve, for which jobs, and the
plans it has solved, reused within the pass.

A plan (rule 6, `spotline.domain.deadline_plan.plan_now`) costs up to ~0.3 s to solve, and a pass
asks one per deadline job waiting while Spot is missing, and per deadline job running On-Demand
while Spot is there (`deadline.plan_asked`). `SchedulerConfig.deadline_plans_per_pass` bounds
that: the jobs that may ask (`may_ask`) with the soonest deadlines get the plan; the others get
the guard's rules for this pass (its safety net keeps every deadline that is still feasible, with
or without a plan). A pass and `explain` that build `PassPlans` from the same snapshot and window
leave the same jobs to the rules.

Within a pass, a plan is solved once per (pool's signal, work left, time left) on the plan's grid
(`PassPlans.plan`): a job asked twice (placement, then the reason of its On-Demand admission), or
jobs alike, share it. The object belongs to the pass that built it: nothing outlives the pass.
Pure: no clock, no process-wide state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from spotline.domain.config import SchedulerConfig
from spotline.domain.deadline_plan import EPS, DeadlinePlan, SpotChain, fitted_chain, plan_fits, solve_now
from spotline.domain.deadline_rules import GuardSettings, GuardState
from spotline.domain.models import (
    Allocation,
    ClusterSnapshot,
    Job,
    JobState,
    SpotPoolSignal,
    SpotPreference,
)

# (the signal's id, the step in seconds, the settings, work left in grid units, whole steps left)
_PlanKey = tuple[int, int, GuardSettings, int, int]
_ChainKey = tuple[int, int, GuardSettings]


def may_ask(
    job: Job, snapshot: ClusterSnapshot, config: SchedulerConfig, now: float, *, pending: bool
) -> bool:
    """Whether the pass may ask the plan for `job` (`deadline.plan_asked`): a deadline job with a
    declared runtime, either pending (spot `auto`) with a Spot pool that could host it last seen
    missing, or running On-Demand with such a pool seen there and at least
    `move_to_spot_min_remaining_s` left (a move back to Spot, `moves.moves_to_spot`); and whose
    plan's grid fits (`PLAN_NOW_MAX_CELLS`: beyond it the guard keeps its rules anyway)."""
    if job.spec.deadline_at is None or job.spec.expected_runtime_s is None:
        return False
    if pending and job.spec.spot is not SpotPreference.AUTO:
        return False
    if not pending:
        pool = snapshot.pools.get(job.pool or "")
        if job.state is not JobState.RUNNING or pool is None or pool.is_spot:
            return False
        if not 0 < config.move_to_spot_min_remaining_s <= (job.remaining_s(now) or 0.0):
            return False
    if not _fits(job, config, now):
        return False
    for candidate in snapshot.pools.values():
        signal = snapshot.spot.get(candidate.name)
        if (
            candidate.is_spot
            and signal is not None
            and candidate.can_host(job)
            and signal.available != pending
        ):
            return True
    return False


def _fits(job: Job, config: SchedulerConfig, now: float) -> bool:
    """Whether a plan would be solved for the job's work and time left (`deadline_plan.plan_fits`,
    with the guard's settings as the pass has them: `deadline.job_state`); a job whose grid is
    too large keeps the rules whatever the budget, so it takes no place in it."""
    deadline, expected = job.spec.deadline_at, job.spec.expected_runtime_s
    assert deadline is not None and expected is not None
    done_s = job.elapsed_s(now) if job.progress is None else job.progress * expected
    work_left_h = (expected - min(expected, max(0.0, done_s))) / 3600.0
    settings = GuardSettings(changeover_h=config.deadline_changeover_s / 3600.0)
    return plan_fits(work_left_h, (deadline - now) / 3600.0, settings)


@dataclass(slots=True)
class PassPlans:
    """A pass's deadline plans. `allowed`: the jobs that may have one solved (None: every job);
    `left_to_rules`: the jobs that may ask but were left to the guard's rules by the budget;
    `solved`: plans asked of the solver so far (`deadline_plan.solve_now`; a reused one does
    not count)."""

    budget: int | None = None
    allowed: frozenset[str] | None = None
    left_to_rules: frozenset[str] = frozenset()
    solved: int = 0
    _plans: dict[_PlanKey, tuple[SpotPoolSignal, DeadlinePlan | None]] = field(default_factory=dict)
    _chains: dict[_ChainKey, tuple[SpotPoolSignal, SpotChain | None]] = field(default_factory=dict)

    @classmethod
    def for_pass(
        cls,
        snapshot: ClusterSnapshot,
        pending: Iterable[Job],
        config: SchedulerConfig,
        now: float,
        running: Iterable[Allocation] | None = None,
    ) -> PassPlans:
        """The plans of a pass at `now` over `pending` (its window) and the running jobs
        (`running`, else the snapshot's allocations): with a budget
        (`config.deadline_plans_per_pass`), that many jobs that may ask (`may_ask`), the soonest
        deadlines first (then by id), are allowed a plan, the others left to the rules; None:
        every job is allowed."""
        budget = config.deadline_plans_per_pass
        if budget is None or not snapshot.spot:
            return cls(budget=budget)  # no bound, or no pool's signal: no plan to solve
        held = snapshot.allocations if running is None else running
        # (Only a deadline job may ask: the others are passed over before the call.)
        asking = [
            j
            for j in pending
            if j.spec.deadline is not None and may_ask(j, snapshot, config, now, pending=True)
        ]
        asking += [
            a.job
            for a in held
            if a.job.spec.deadline is not None and may_ask(a.job, snapshot, config, now, pending=False)
        ]
        return cls.ranked(asking, budget)

    @classmethod
    def for_waiting(cls, waiting: Iterable[Job], config: SchedulerConfig, now: float) -> PassPlans:
        """The plans of the reconciler's look at deadline jobs waiting on a Spot launch in a pool
        last seen missing (`control.spot_signals.leave_missing_spot`): the same budget
        (`config.deadline_plans_per_pass`), the soonest deadlines first, over those whose plan's
        grid fits."""
        budget = config.deadline_plans_per_pass
        if budget is None:
            return cls(budget=budget)
        asking = [
            j
            for j in waiting
            if j.spec.deadline_at is not None
            and j.spec.expected_runtime_s is not None
            and _fits(j, config, now)
        ]
        return cls.ranked(asking, budget)

    @classmethod
    def ranked(cls, asking: Iterable[Job], budget: int) -> PassPlans:
        """The first `budget` of the jobs `asking`, soonest deadline first (then by id), allowed a
        plan; the others left to the rules."""
        order = sorted({j.id: j for j in asking}.values(), key=lambda j: (j.spec.deadline_at or 0.0, j.id))
        ids = [j.id for j in order]
        return cls(budget=budget, allowed=frozenset(ids[:budget]), left_to_rules=frozenset(ids[budget:]))

    def allows(self, job_id: str | None) -> bool:
        """Whether the job may have a plan solved in this pass."""
        return self.allowed is None or (job_id is not None and job_id in self.allowed)

    def plan(
        self, state: GuardState, signal: SpotPoolSignal, settings: GuardSettings, step_h: float
    ) -> DeadlinePlan | None:
        """`deadline_plan.plan_now`, solved once per (signal, settings, work left in the grid's
        finest units, whole steps left): states with the same key have the same grid, so the
        same plan (up to rounding at a unit's edge)."""
        step_s = round(step_h * 3600.0)
        change_s = round(settings.changeover_h * 3600.0)
        if settings.plan_longest_h is None or step_s <= 0 or len(signal.spans_s) < len(signal.outages_s):
            return None
        finest = math.gcd(step_s, change_s) if change_s else step_s
        work_u = math.ceil((state.job_h - state.progress_h) * 3600.0 / finest - EPS)
        steps = math.floor((state.deadline_h - state.elapsed_h) / step_h + EPS)
        key = (id(signal), step_s, settings, work_u, steps)
        known = self._plans.get(key)
        if known is not None and known[0] is signal:
            return known[1]
        solved = self._solve(state, signal, settings, step_h)
        self._plans[key] = (signal, solved)
        return solved

    def _solve(
        self, state: GuardState, signal: SpotPoolSignal, settings: GuardSettings, step_h: float
    ) -> DeadlinePlan | None:
        """`deadline_plan.plan_now`, with the pool's chain fitted once per signal in the pass."""
        key = (id(signal), round(step_h * 3600.0), settings)
        known = self._chains.get(key)
        if known is None or known[0] is not signal:
            known = (signal, fitted_chain(signal, settings, step_h))
            self._chains[key] = known
        chain = known[1]
        if chain is None:
            return None
        self.solved += 1
        return solve_now(state, chain, settings, step_h)
