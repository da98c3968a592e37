"""The deadline guard for the control plane's jobs: its rules (`spotline.domain.deadline_rules`,
re-exported here) and its plan (`spotline.domain.deadline_plan`), applied to a `Job` and the
pool's signal (`SpotPoolSignal`) as a scheduling pass, the reconciler and `explain` see them.

Rules 1 to 5 and 7 are in `deadline_rules`; rule 6, the plan, in `deadline_plan`. Pure.
"""

from __future__ import annotations

from spotline.domain.deadline_budget import PassPlans
from spotline.domain.deadline_plan import decide_from_signal, plan_now
from spotline.domain.deadline_rules import (
    DEFAULT_CHANGEOVER_H,
    DEFAULT_STEP_H,
    EPS,
    PLANNED,
    GuardDecision,
    GuardSettings,
    GuardState,
    Placement,
    SpotHistory,
    Why,
    decide,
    line_h,
    slack_h,
    span,
    wait_limit_h,
)
from spotline.domain.models import TERMINAL_STATES, ClusterSnapshot, Job, JobState, SpotPoolSignal

__all__ = [
    "DEFAULT_CHANGEOVER_H",
    "DEFAULT_STEP_H",
    "EPS",
    "PLANNED",
    "GuardDecision",
    "GuardSettings",
    "GuardState",
    "PassPlans",
    "Placement",
    "SpotHistory",
    "Why",
    "decide",
    "explain_deadline",
    "guard_job",
    "job_state",
    "line_h",
    "on_demand_to_spot_note",
    "plan_asked",
    "slack_h",
    "span",
    "spot_unsafe",
    "stays_on_demand",
    "wait_limit_h",
]


def guard_job(
    job_h: float,
    submitted_at: float,
    deadline_at: float,
    now: float,
    done_s: float,
    placement: Placement,
    spot_available: bool,
    history: SpotHistory,
    settings: GuardSettings,
    *,
    outage_h: float = 0.0,
    changeover_left_h: float = 0.0,
    step_h: float = 0.0,
) -> GuardDecision:
    """The guard for a control-plane job: times in epoch seconds, work done in seconds (from the
    last checkpoint or heartbeat), the declared runtime in hours."""
    return decide(
        GuardState(
            job_h=job_h,
            deadline_h=max(EPS, (deadline_at - submitted_at) / 3600.0),
            elapsed_h=max(0.0, (now - submitted_at) / 3600.0),
            progress_h=min(job_h, max(0.0, done_s / 3600.0)),
            placement=placement,
            changeover_left_h=changeover_left_h,
            spot_available=spot_available,
            outage_h=outage_h,
            step_h=step_h,
        ),
        history,
        settings,
    )


def explain_deadline(
    job: Job,
    now: float,
    snapshot: ClusterSnapshot,
    *,
    changeover_h: float = DEFAULT_CHANGEOVER_H,
    step_h: float = DEFAULT_STEP_H,
    plans: PassPlans | None = None,
) -> dict[str, object] | None:
    """What the guard says about a job with a deadline and a declared runtime (None otherwise):
    where it should be, why, how far ahead of or behind its line it is, and the Spot history it
    used (`snapshot.spot`: what the control plane has seen of the pool). Spot counts as there
    when the job runs on Spot, or a Spot pool that could host it has free GPUs now and was not
    last seen without capacity. `plans`: the pass's (`PassPlans.for_pass` over the same snapshot,
    window, settings and time), so a job the pass's plan budget left to the rules is explained by the rules,
    and says so (`plan_left_to_rules`); None: the plan is solved for the job when asked."""
    deadline = job.spec.deadline_at
    expected = job.spec.expected_runtime_s
    if deadline is None or expected is None or job.state in TERMINAL_STATES:
        return None
    pool = snapshot.pools.get(job.pool or "")
    holding = job.state in {JobState.ADMITTED, JobState.RUNNING, JobState.CHECKPOINTING}
    if holding and pool is not None:
        placement = Placement.SPOT if pool.is_spot else Placement.ON_DEMAND
    else:
        placement = Placement.NONE
    used: dict[str, int] = {}
    for allocation in snapshot.allocations:
        used[allocation.pool] = used.get(allocation.pool, 0) + allocation.gpus
    hosts = [p for p in snapshot.pools.values() if p.is_spot and p.can_host(job)]
    # The pool whose history the guard reads: the job's own Spot pool, else the first that could host it.
    watched = pool if pool is not None and pool.is_spot else min(hosts, key=lambda p: p.name, default=None)
    signal = snapshot.spot.get(watched.name) if watched is not None else None
    spot_free = any(
        p.capacity_gpus - used.get(p.name, 0) >= p.demand_gpus(job)
        and (snapshot.spot.get(p.name) is None or snapshot.spot[p.name].available)
        for p in hosts
    )
    history = SpotHistory.from_signal(signal)
    running_on_spot = placement is Placement.SPOT and job.state is not JobState.ADMITTED
    spot_available = running_on_spot or spot_free
    state = job_state(job, now, placement, spot_available, signal, step_h)
    decision = _decide(state, signal, changeover_h, job.id, plans)
    out: dict[str, object] = {
        "now": placement.value,
        "advice": decision.placement.value,
        "why": decision.why.value,
        "slack_h": round(decision.slack_h, 3),
        "ahead_of_line_h": round(decision.line_h, 3),
        "summary": decision.describe(),
        "spot_history": {
            "pool": None if watched is None else watched.name,
            "spot_there": signal is None or signal.available,
            "missing_for_h": 0.0 if signal is None else round(signal.outage_s / 3600.0, 3),
            "observed_h": round(history.observed_h, 3),
            "availability": round(history.availability, 3) if history.observed_h > 0 else None,
            "outages": len(history.outages),
        },
        "planned": decision.why in PLANNED,
    }
    if plans is not None and job.id in plans.left_to_rules and plan_asked(placement, spot_available):
        out["plan_left_to_rules"] = (
            "the pass solves no plan (deadline_plans_per_pass = 0): the guard's rules decide"
            if plans.budget == 0
            else f"the pass's plan budget (deadline_plans_per_pass = {plans.budget}) went to jobs"
            " with sooner deadlines: the guard's rules decide this pass"
        )
    return out


def job_state(
    job: Job,
    now: float,
    placement: Placement,
    spot_available: bool,
    signal: SpotPoolSignal | None,
    step_h: float,
) -> GuardState:
    """A control-plane job as the guard sees it: progress from the agent's report (or the work
    done), times from its submission and deadline, the outage from the pool's signal. The job
    must have a deadline and a declared runtime."""
    deadline = job.spec.deadline_at
    expected = job.spec.expected_runtime_s
    assert deadline is not None and expected is not None
    done_s = job.elapsed_s(now) if job.progress is None else job.progress * expected
    job_h = expected / 3600.0
    return GuardState(
        job_h=job_h,
        deadline_h=max(EPS, (deadline - job.submitted_at) / 3600.0),
        elapsed_h=max(0.0, (now - job.submitted_at) / 3600.0),
        progress_h=min(job_h, max(0.0, done_s / 3600.0)),
        placement=placement,
        changeover_left_h=0.0,
        spot_available=spot_available,
        outage_h=0.0 if spot_available or signal is None else signal.outage_s / 3600.0,
        step_h=step_h,
        at_risk=signal is not None and signal.at_risk,
    )


def plan_asked(placement: Placement, spot_available: bool) -> bool:
    """Where the control plane asks the plan (rule 6): a job On-Demand with Spot there (back to
    Spot or not), or a job off On-Demand with Spot missing (wait, or On-Demand). Elsewhere the
    answer the pass needs is the rules' alone: Spot runs (only rules 1 and 7 refuse it), or a job
    On-Demand stays while Spot is missing; no plan is solved."""
    return (placement is Placement.ON_DEMAND) == spot_available


def _decide(
    state: GuardState,
    signal: SpotPoolSignal | None,
    changeover_h: float,
    job_id: str,
    plans: PassPlans | None,
) -> GuardDecision:
    """The guard's rules, then its plan from the pool's interval history when there is enough of
    it, the plan is asked (`plan_asked`; `deadline_plan.decide_from_signal`) and the pass's plan
    budget allows the job (`plans`: the pass's `PassPlans`, which also reuses its plans; None:
    no budget). The pass, the reconciler and `explain` all decide through here, so `explain`
    says what the pass does."""
    asked = plan_asked(state.placement, state.spot_available)
    return decide_from_signal(
        state,
        signal,
        GuardSettings(changeover_h=changeover_h),
        use_plan=asked and (plans is None or plans.allows(job_id)),
        solve=plan_now if plans is None else plans.plan,
    )


def _guard(
    job: Job,
    now: float,
    placement: Placement,
    changeover_h: float,
    step_h: float,
    signal: SpotPoolSignal | None,
    spot_available: bool,
    plans: PassPlans | None = None,
) -> GuardDecision | None:
    """The guard's decision for a deadline job from the job's progress (or its elapsed run time)
    and the pool's signal (its history; how long Spot has been missing); None for a job without a
    deadline or declared runtime."""
    if job.spec.deadline_at is None or job.spec.expected_runtime_s is None:
        return None
    state = job_state(job, now, placement, spot_available, signal, step_h)
    return _decide(state, signal, changeover_h, job.id, plans)


def _leaving_on_demand(
    job: Job,
    now: float,
    changeover_h: float,
    step_h: float,
    spot: SpotPoolSignal | None,
    plans: PassPlans | None = None,
) -> GuardDecision | None:
    """The guard's decision for a deadline job running On-Demand, with `spot` the target Spot
    pool's signal (Spot counts as there unless it was last seen missing); None for a job without
    a deadline or declared runtime. The one path behind `on_demand_to_spot_note` and
    `stays_on_demand`."""
    there = spot is None or spot.available
    return _guard(job, now, Placement.ON_DEMAND, changeover_h, step_h, spot, there, plans)


def on_demand_to_spot_note(
    job: Job,
    now: float,
    *,
    changeover_h: float = DEFAULT_CHANGEOVER_H,
    step_h: float = DEFAULT_STEP_H,
    spot: SpotPoolSignal | None = None,
    plans: PassPlans | None = None,
) -> str | None:
    """The guard's word on a deadline job leaving On-Demand for Spot (its slack and line), for
    the move's reason; None for a job without a deadline or declared runtime. `plans`: the
    pass's (`PassPlans`: its plan budget, and the plans it solved)."""
    decision = _leaving_on_demand(job, now, changeover_h, step_h, spot, plans)
    return None if decision is None else f"deadline guard: {decision.describe()}"


def stays_on_demand(
    job: Job,
    now: float,
    *,
    changeover_h: float = DEFAULT_CHANGEOVER_H,
    step_h: float = DEFAULT_STEP_H,
    spot: SpotPoolSignal | None = None,
    plans: PassPlans | None = None,
) -> str | None:
    """Why a deadline job running On-Demand should not move to free Spot room now (None: the
    guard lets it go, or the job has no deadline or declared runtime). `spot`: what the control
    plane has seen of the target pool; Spot counts as there unless it was last seen missing. The
    guard's hysteresis keeps the job On-Demand until it is far enough ahead of its line, and its
    safety net when no Spot loss can be absorbed any more. `plans`: the pass's (`PassPlans`)."""
    decision = _leaving_on_demand(job, now, changeover_h, step_h, spot, plans)
    if decision is None or decision.placement is Placement.SPOT:
        return None
    return f"deadline guard: {decision.describe()}"


def spot_unsafe(
    job: Job,
    now: float,
    *,
    on_spot: bool,
    changeover_h: float = DEFAULT_CHANGEOVER_H,
    step_h: float = DEFAULT_STEP_H,
    spot: SpotPoolSignal | None = None,
    plans: PassPlans | None = None,
) -> str | None:
    """Why a deadline job may not start (or stay) on Spot now, None otherwise (and for a job
    without a deadline or declared runtime, or whose deadline no longer fits even On-Demand: the
    older rules decide those):

    - the guard's safety net: a Spot loss after the next look would leave no time for an
      On-Demand restart before the deadline;
    - for a job not on Spot (`on_spot` False), with the pool last seen without capacity (`spot`):
      the guard sends it On-Demand (behind its line, or the outage longer than its slack
      affords, from the pool's history). When the guard would wait, Spot is allowed: a Spot
      launch that waits for capacity is the wait (RUNNABLE in Batch, its checkpoint kept).

    `plans`: the pass's (`PassPlans`: its plan budget, and the plans it solved); None: none.
    """
    placement = Placement.SPOT if on_spot else Placement.NONE
    there = on_spot or spot is None or spot.available
    decision = _guard(job, now, placement, changeover_h, step_h, spot, there, plans)
    if decision is None:
        return None
    if decision.why in {Why.SAFETY_NET, Why.SPOT_AT_RISK} or (
        not there and decision.placement is Placement.ON_DEMAND
    ):
        if decision.why is Why.INFEASIBLE:
            return None
        return f"deadline guard: {decision.describe()}"
    return None
