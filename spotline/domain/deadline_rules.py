"""The deadline guard's rules: Spot or On-Demand, all along a deadline job's life.

A job with a deadline and a declared runtime has a *slack*: the time to its deadline minus the work
it has left minus one changeover (the restart a move costs). Idle time burns slack hour for hour;
running on Spot or On-Demand keeps it; every changeover burns one changeover. With no slack left
the job must run On-Demand to the end. The guard spends the slack where it buys the most Spot:

1. **Safety net.** The job may spend the next step off On-Demand only if, were Spot to be gone at
   the next decision and no progress made, an On-Demand restart would still finish by the
   deadline: `time_left - step >= work_left + changeover + margin`. Otherwise it goes (or stays)
   On-Demand. By induction this meets every deadline that was feasible when the job started.
2. **Exploitation.** Spot while Spot runs (or a launch would succeed now).
3. **Waiting out an outage, from the pool's history.** When Spot is missing the job waits (idle,
   its checkpoint kept) for at most a *wait limit*, then moves to On-Demand. The wait limit is the
   longest wait that the slack can afford for every outage still expected before the job ends:
   with outage lengths `l` seen in the pool's history and `n` outages expected in the job's
   remaining horizon, the largest `w` with `n * (E[min(l, w)] + c * (1 + P(l > w))) <= spendable`.
   Short outages are waited out (no On-Demand hours, no extra changeover); long ones are covered
   early, while there is still slack to come back to Spot afterwards.
4. **Back to Spot, with hysteresis.** On On-Demand the job stays while Spot is missing, and
   returns to Spot when Spot is there and its progress is ahead of the line `elapsed * C / R` as
   the line will stand two changeovers later (Uniform Progress's hysteresis; tuned against a
   slack-based return, which did worse at C/R 0.95).
5. **Thin history.** With less than `min_history_h` of the pool's history the guard follows
   Uniform Progress's line instead of (3): On-Demand when idle and behind `elapsed * C / R`.
6. **The plan**, with enough history (`spotline.domain.deadline_plan`): the cheapest expected
   schedule under a model of the pool fitted on its history, in place of rules 2 to 5.
7. **A pool at risk** (a rebalance recommendation for one of its instances, recently: the
   signal's `at_risk`) is taken as Spot about to go missing: a job behind its line does not bet
   on it (On-Demand, from a placement or from Spot), and a job On-Demand does not return to it.
   A job ahead of its line stays on Spot (the recommendation has it checkpoint now).

`spotline.domain.deadline` applies them (and the plan, `spotline.domain.deadline_plan`) to the
control plane's jobs; the single-job simulator calls them directly.

The guard is pure: the control plane passes what it knows now (progress from the last checkpoint
or heartbeat, the time, where the job runs, whether a Spot launch would succeed, warnings, the
pool's history); the simulator passes the same, never a later step of a trace.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from enum import StrEnum

from spotline.domain.models import SpotPoolSignal

EPS = 1e-9
# A move's restart on AWS Batch (instance launch, image pull, checkpoint load): the paper's 0.2 h.
DEFAULT_CHANGEOVER_H = 0.2
# Time to the guard's next look at a job in the control plane (a scheduling pass's cadence).
DEFAULT_STEP_H = 5 / 60


class Placement(StrEnum):
    """Where a deadline job runs (or should run) now."""

    NONE = "none"  # not running: waiting for Spot (its checkpoint kept)
    SPOT = "spot"
    ON_DEMAND = "on-demand"


class Why(StrEnum):
    """The rule behind a guard decision (what `spotline explain` shows)."""

    DONE = "done"
    SAFETY_NET = "safety-net"
    SPOT_RUNS = "spot-runs"
    SPOT_BACK = "spot-back"
    STAY_ON_DEMAND = "stay-on-demand"
    WAIT_FOR_SPOT = "wait-for-spot"
    OUTAGE_TOO_LONG = "outage-too-long"
    BEHIND_LINE = "behind-line"
    INFEASIBLE = "infeasible"
    PLAN_SPOT = "plan-spot"
    PLAN_WAIT = "plan-wait"
    PLAN_ON_DEMAND = "plan-on-demand"
    SPOT_AT_RISK = "spot-at-risk"


# The decisions the plan made (`spotline.domain.deadline_plan`), not the rules.
PLANNED = frozenset({Why.PLAN_SPOT, Why.PLAN_WAIT, Why.PLAN_ON_DEMAND})


@dataclass(frozen=True, slots=True)
class SpotHistory:
    """What the control plane has seen of a Spot pool (its own launches, probes, other jobs).

    `outages` are the lengths (hours) of the completed spells without capacity; `spells` the
    number of spells with capacity that started in the window. Build it with `summarise`.
    """

    observed_h: float = 0.0
    available_h: float = 0.0
    outages: tuple[float, ...] = ()  # sorted ascending

    @property
    def availability(self) -> float:
        return self.available_h / self.observed_h if self.observed_h > 0 else 0.0

    @property
    def outage_rate_per_h(self) -> float:
        return len(self.outages) / self.observed_h if self.observed_h > 0 else 0.0

    @classmethod
    def from_signal(cls, signal: SpotPoolSignal | None) -> SpotHistory:
        """The history the control plane has kept of a pool (`spot_watch.PoolWatch.signal`);
        empty when it has seen nothing of the pool."""
        if signal is None:
            return cls()
        return cls(
            observed_h=signal.observed_s / 3600.0,
            available_h=signal.available_s / 3600.0,
            outages=tuple(sorted(o / 3600.0 for o in signal.outages_s)),
        )

    @classmethod
    def summarise(cls, available: list[bool] | tuple[bool, ...], step_h: float) -> SpotHistory:
        """From equally spaced observations (True: a Spot launch would have succeeded)."""
        outages: list[float] = []
        run = 0
        seen_capacity = False
        for up in available:
            if up:
                if run and seen_capacity:
                    outages.append(run * step_h)  # an outage cut by the window's start is not counted
                run = 0
                seen_capacity = True
            else:
                run += 1
        return cls(
            observed_h=len(available) * step_h,
            available_h=sum(1 for a in available if a) * step_h,
            outages=tuple(sorted(outages)),
        )


@dataclass(frozen=True, slots=True)
class GuardSettings:
    """The guard's knobs (the defaults are the tuned values; see design-notes/spot-and-deadlines.md)."""

    changeover_h: float  # the restart a move costs (launch, image, checkpoint load)
    price_ratio: float = 3.0  # On-Demand price / Spot price
    margin_h: float = 0.0  # extra time the safety net keeps (the real world's jitter)
    reserve_changeovers: float = 1.0  # slack kept back from the wait budget, in changeovers
    min_history_h: float = 24.0  # less pool history than this: Uniform Progress's line
    min_availability: float = 0.05  # floor of the history's availability when sizing the horizon
    # the plan's model (spotline.domain.deadline_plan): run lengths it tells apart; None: no plan
    plan_longest_h: float | None = 12.0


@dataclass(frozen=True, slots=True)
class GuardState:
    """A deadline job now, as the control plane knows it."""

    job_h: float  # declared runtime (C)
    deadline_h: float  # from the job's start to its deadline (R)
    elapsed_h: float  # since the job's start
    progress_h: float  # work done, from the last checkpoint or heartbeat
    placement: Placement  # where it runs now
    changeover_left_h: float  # what remains of the current restart (0 once it makes progress)
    spot_available: bool  # Spot runs (no warning) or a launch would succeed now
    outage_h: float  # how long Spot has been missing (0 when it is there)
    step_h: float  # time to the next decision
    at_risk: bool = False  # the Spot pool is at risk (a recent rebalance recommendation)


@dataclass(frozen=True, slots=True)
class GuardDecision:
    placement: Placement
    why: Why
    slack_h: float  # time left - work left - one changeover
    line_h: float  # progress minus Uniform Progress's line (elapsed * C / R): + ahead, - behind
    wait_limit_h: float | None = None  # the outage wait the slack affords (rule 3), when computed

    def describe(self) -> str:
        ahead = f"{span(abs(self.line_h))} {'ahead of' if self.line_h >= 0 else 'behind'} its line"
        reasons = {
            Why.DONE: "work done",
            Why.SAFETY_NET: "On-Demand to the end: the slack left no longer covers a Spot loss",
            Why.SPOT_RUNS: "Spot: capacity is there and the deadline stays safe",
            Why.SPOT_BACK: "back to Spot: far enough ahead to absorb a reclaim",
            Why.STAY_ON_DEMAND: "stays On-Demand: not far enough ahead to return to Spot",
            Why.WAIT_FOR_SPOT: "waits for Spot: the slack affords this outage",
            Why.OUTAGE_TOO_LONG: "On-Demand: Spot has been missing longer than the slack affords",
            Why.BEHIND_LINE: "On-Demand: behind its line with little pool history",
            Why.INFEASIBLE: "On-Demand: the deadline can no longer be met, finishing as early as possible",
            Why.PLAN_SPOT: "Spot: the cheapest expected schedule under the pool's history",
            Why.PLAN_WAIT: "waits for Spot: the cheapest expected schedule under the pool's history",
            Why.PLAN_ON_DEMAND: "On-Demand: the cheapest expected schedule under the pool's history",
            Why.SPOT_AT_RISK: "On-Demand: the Spot pool is at risk (a rebalance recommendation)",
        }
        limit = f", waits at most {span(self.wait_limit_h)}" if self.wait_limit_h is not None else ""
        return f"{reasons[self.why]} (slack {span(self.slack_h)}, {ahead}{limit})"


def span(hours: float) -> str:
    """A duration for people: hours, or seconds under a tenth of an hour (a local demo's scale)."""
    if abs(hours) >= 0.1 or hours == float("inf"):
        return f"{hours:.2f} h"
    return f"{hours * 3600:.0f} s"


def slack_h(state: GuardState, settings: GuardSettings) -> float:
    """Time left, minus work left, minus one changeover."""
    return state.deadline_h - state.elapsed_h - (state.job_h - state.progress_h) - settings.changeover_h


def line_h(state: GuardState) -> float:
    """Progress against Uniform Progress's line: + ahead, - behind (hours of work)."""
    return state.progress_h - state.elapsed_h * state.job_h / state.deadline_h


def wait_limit_h(spendable_h: float, horizon_h: float, history: SpotHistory, changeover_h: float) -> float:
    """The longest outage wait the slack affords for every outage expected in the horizon.

    `n = horizon * outage rate` outages are expected; waiting up to `w` costs each outage
    `min(l, w)` of idle time plus a restart, and one more changeover when it is covered with
    On-Demand (`l > w`). Returns the largest `w` with `n * cost(w) <= spendable` (inf when every
    outage seen can be waited out, 0 when not even the restarts fit).
    """
    lengths = history.outages
    if not lengths:
        return float("inf") if spendable_h >= 0 else 0.0
    count = len(lengths)
    expected = 1.0 + history.outage_rate_per_h * horizon_h  # the outage under way, and those to come

    def cost(w: float) -> float:
        shorter = bisect_left(lengths, w)  # outages with l < w
        longer = count - bisect_right(lengths, w)  # l > w
        waited = (sum(lengths[:shorter]) + w * (count - shorter)) / count
        return expected * (waited + changeover_h * (1.0 + longer / count))

    if cost(0.0) > spendable_h:
        return 0.0
    if cost(lengths[-1]) <= spendable_h:
        return float("inf")
    low, high = 0.0, lengths[-1]
    for _ in range(40):  # cost is nondecreasing in w: bisect to well under a minute
        mid = (low + high) / 2
        if cost(mid) <= spendable_h:
            low = mid
        else:
            high = mid
    return low


def decide(state: GuardState, history: SpotHistory, settings: GuardSettings) -> GuardDecision:
    """Spot, On-Demand or wait, for the next step of a deadline job (see the module's rules)."""
    c = settings.changeover_h
    work_left = state.job_h - state.progress_h
    time_left = state.deadline_h - state.elapsed_h
    slack = slack_h(state, settings)
    line = line_h(state)

    def decision(placement: Placement, why: Why, limit: float | None = None) -> GuardDecision:
        return GuardDecision(placement, why, slack, line, limit)

    if work_left <= EPS:
        return decision(Placement.NONE, Why.DONE)
    on_demand = state.placement is Placement.ON_DEMAND
    if on_demand and state.changeover_left_h + work_left > time_left + EPS:
        return decision(Placement.ON_DEMAND, Why.INFEASIBLE)
    if not on_demand and c + work_left > time_left + EPS:
        return decision(Placement.ON_DEMAND, Why.INFEASIBLE)
    # 1. Safety net: off On-Demand for one more step only if an On-Demand restart after it still fits.
    if time_left - state.step_h < work_left + c + settings.margin_h - EPS:
        return decision(Placement.ON_DEMAND, Why.SAFETY_NET)
    reserve = settings.reserve_changeovers * c + state.step_h + settings.margin_h
    thin = history.observed_h < settings.min_history_h
    if on_demand:
        if not state.spot_available:
            return decision(Placement.ON_DEMAND, Why.STAY_ON_DEMAND)
        if state.at_risk:  # 7. not back to a pool at risk
            return decision(Placement.ON_DEMAND, Why.SPOT_AT_RISK)
        # 4. Hysteresis: back to Spot once ahead of the line as it will be two changeovers on
        later = (state.elapsed_h + 2 * c) * state.job_h / state.deadline_h
        if state.progress_h < later - EPS:
            return decision(Placement.ON_DEMAND, Why.STAY_ON_DEMAND)
        return decision(Placement.SPOT, Why.SPOT_BACK)
    # 2. Exploitation (7. a pool at risk: not while behind the line).
    if state.spot_available:
        if state.at_risk and line < -EPS:
            return decision(Placement.ON_DEMAND, Why.SPOT_AT_RISK)
        return decision(Placement.SPOT, Why.SPOT_RUNS)
    # Spot is missing and the job is not On-Demand.
    if thin:
        if line < -EPS:
            return decision(Placement.ON_DEMAND, Why.BEHIND_LINE)
        return decision(Placement.NONE, Why.WAIT_FOR_SPOT)
    # 3. Wait out the outage while the slack affords it.
    availability = max(history.availability, settings.min_availability)
    horizon = min(time_left, work_left / availability)
    spendable = slack - reserve + state.outage_h  # the outage's wait so far is part of this one's budget
    limit = wait_limit_h(spendable, horizon, history, c)
    if state.outage_h + state.step_h <= limit + EPS:
        return decision(Placement.NONE, Why.WAIT_FOR_SPOT, limit)
    return decision(Placement.ON_DEMAND, Why.OUTAGE_TOO_LONG, limit)
