"""The deadline guard's plan: the cheapest expected schedule under a model of the Spot pool.

The omniscient optimum of "Can't Be Late" knows how long each Spot spell and each outage will last:
it skips spells too short to pay back a changeover, waits out the short outages and covers the
long ones On-Demand, and arrives at its deadline with its slack spent. An online guard cannot know
the future, but it can know the pool's past. This module fits a model of the pool to its history
(`SpotChain`: the chance that Spot, there or missing for `r` steps, is still so at the next step)
and solves the job's decision problem under it by backward induction (`DeadlinePlan.solve`): the
same dynamic programme as the omniscient policy, with the expectation over the model in place of
the known trace. The plan is a table (steps since the start, where the job runs, how long Spot has
been there or missing, work left) -> idle, Spot or On-Demand.

The plan never decides alone: the guard's safety net (`spotline.domain.deadline_rules`) runs first and
keeps every deadline that is still feasible, whatever the model says. The model is fitted once, at
the job's start, from the history the control plane has seen (never a later step). Pure: numpy
arithmetic on the arguments, no clock, no randomness.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spotline.domain.deadline_rules import (
    GuardDecision,
    GuardSettings,
    GuardState,
    Placement,
    SpotHistory,
    Why,
    decide,
)
from spotline.domain.models import SpotPoolSignal

if TYPE_CHECKING:
    import numpy as np

# numpy is imported where the plan is fitted or solved, not with the module: every Lambda
# handler imports this module (through the control plane's Spot signals), and numpy's import
# alone more than doubled their cold start (bench.cold_start: 1.6-1.8x boto3's import before,
# 2.9-3.7x with it); a handler pays it only when it plans a deadline job.

EPS = 1e-9
DEFAULT_LONGEST_H = 12.0  # run lengths the model tells apart; longer runs share one state
PRIOR_WEIGHT = 2.0  # pseudo-observations pulling a run length's odds toward its kind's average
MAX_PLAN_CELLS = 60_000_000  # steps x band x states the solver accepts
INFEASIBLE = 1e9  # the cost of a missed deadline (finite: the expectations multiply it by odds)


def run_edges(step_h: float, longest_h: float) -> tuple[int, ...]:
    """Where the run-length buckets start, in steps: 1, 2, 3, 4, 6, 8, 12, 16, ... up to `longest_h`."""
    edges = [1]
    base = 2
    while True:
        for nxt in (base, base + base // 2):
            if nxt > edges[-1] and nxt * step_h <= longest_h + EPS:
                edges.append(nxt)
        if base * step_h > longest_h:
            break
        base *= 2
    return tuple(edges)


@dataclass(frozen=True, slots=True)
class SpotChain:
    """The pool as a Markov chain over (Spot there or not, how long so), with run lengths in
    buckets (`edges`, in steps: bucket b holds runs of edges[b] to edges[b+1] - 1 steps, the last
    one every longer run).

    `up_stay[b]`: the chance that Spot, there for a run in bucket b, is still there at the next
    step; `down_stay[b]` the same for Spot missing. Fitted with `fit`.
    """

    step_h: float
    edges: tuple[int, ...]
    up_stay: tuple[float, ...]
    down_stay: tuple[float, ...]
    observed: int  # observations it was fitted on

    @property
    def buckets(self) -> int:
        return len(self.edges)

    @classmethod
    def fit(
        cls, observations: Sequence[bool], step_h: float, longest_h: float = DEFAULT_LONGEST_H
    ) -> SpotChain:
        """From equally spaced observations (True: Spot there). Each bucket's odds are shrunk
        toward its kind's average by `PRIOR_WEIGHT` observations, and kept within (0.001, 0.999)."""
        import numpy as np

        if step_h <= 0:
            raise ValueError(f"step_h must be > 0, got {step_h:g}")
        if longest_h < 0:
            raise ValueError(f"longest_h must be >= 0, got {longest_h:g}")
        edges = run_edges(step_h, longest_h)
        stay = np.zeros((2, len(edges)))
        total = np.zeros((2, len(edges)))
        run = 0
        for i in range(len(observations) - 1):
            now = observations[i]
            run = run + 1 if i > 0 and observations[i - 1] == now else 1
            kind = 0 if now else 1
            b = bisect_right(edges, run) - 1
            total[kind, b] += 1
            if observations[i + 1] == now:
                stay[kind, b] += 1
        rows: list[tuple[float, ...]] = []
        for kind in (0, 1):
            average = (stay[kind].sum() + 0.5) / (total[kind].sum() + 1.0)
            odds = (stay[kind] + PRIOR_WEIGHT * average) / (total[kind] + PRIOR_WEIGHT)
            rows.append(tuple(float(min(0.999, max(0.001, p))) for p in odds))
        return cls(step_h=step_h, edges=edges, up_stay=rows[0], down_stay=rows[1], observed=len(observations))

    def state(self, spot_available: bool, run_steps: int) -> int:
        """The chain's state index: Spot there (or missing) for `run_steps` (>= 1) steps."""
        b = bisect_right(self.edges, max(run_steps, 1)) - 1
        return b if spot_available else self.buckets + b

    def transitions(self) -> tuple[np.ndarray, np.ndarray]:
        """(to_up, to_down): the chance of each next state, split by whether Spot is there then.
        Within a bucket a run moves on to the next bucket with chance 1 / (the bucket's width)."""
        import numpy as np

        n = self.buckets
        to_up = np.zeros((2 * n, 2 * n))
        to_down = np.zeros((2 * n, 2 * n))
        for kind, stays, same, other in (
            (0, self.up_stay, to_up, to_down),
            (1, self.down_stay, to_down, to_up),
        ):
            for b, p in enumerate(stays):
                here = kind * n + b
                if b + 1 < n:
                    onward = 1.0 / (self.edges[b + 1] - self.edges[b])
                    same[here, kind * n + b + 1] += p * onward
                    same[here, here] += p * (1.0 - onward)
                else:
                    same[here, here] += p
                other[here, (1 - kind) * n] += 1.0 - p
        return to_up, to_down


def grid_units(
    step_h: float, buckets: int, job_h: float, deadline_h: float, changeover_h: float, max_cells: int
) -> tuple[int, int, int, int, int] | None:
    """The plan's grid for a job (`DeadlinePlan.solve`), from the chain's run-length `buckets`:
    (progress unit in seconds, units per step, per changeover, per job, a changeover's phases)
    for the finest unit whose grid (steps x band x modes x chain states) fits `max_cells`; None
    when none does. A coarser unit rounds the changeover up to whole units: the plan then counts
    a changeover a little long."""
    step_s = round(step_h * 3600.0)
    change_s = round(changeover_h * 3600.0)
    steps = math.floor(deadline_h / step_h + EPS)
    finest = math.gcd(step_s, change_s) if change_s else step_s
    for per_step in sorted({step_s // finest, 12, 10, 6, 5, 4, 3, 2, 1}, reverse=True):
        if step_s % per_step or per_step > step_s // finest:
            continue
        unit_s = step_s // per_step
        change_u = math.ceil(change_s / unit_s - 1e-9)
        job_u = math.ceil(job_h * 3600.0 / unit_s - 1e-9)
        phases = math.ceil(change_u / per_step) if change_u else 0
        n_modes = 1 + 2 * (phases + 1)
        band = max(0, min(job_u, steps * per_step - job_u)) + 1
        if steps * band * n_modes * 2 * buckets <= max_cells:
            return unit_s, per_step, change_u, job_u, phases
    return None


@dataclass(frozen=True, slots=True)
class DeadlinePlan:
    """The solved plan: `choose` reads the action for a state; None outside what was solved."""

    step_h: float
    unit_h: float  # progress is counted in these units (gcd of the step and the changeover)
    job_h: float
    job_units: int
    steps: int  # whole steps from the start to the deadline
    phases: int  # steps a changeover lasts (rounded up)
    changeover_h: float
    chain: SpotChain
    lows: tuple[int, ...]  # per step: the least work left (units) solved
    actions: tuple[np.ndarray, ...] = field(repr=False)  # per step: int8 [mode state, chain state, work]

    @classmethod
    def solve(
        cls,
        chain: SpotChain,
        job_h: float,
        deadline_h: float,
        changeover_h: float,
        price_ratio: float,
        max_cells: int = MAX_PLAN_CELLS,
    ) -> DeadlinePlan:
        """Backward induction over the job's steps: each state's cheapest expected cost to finish
        by the deadline (Spot 1 per hour, On-Demand `price_ratio`, each switch into a running state
        `changeover_h` without progress at the new state's price; a reclaim when the chain says Spot
        is gone). Raises ValueError when the grid would be larger than `max_cells`."""
        import numpy as np

        steps = math.floor(deadline_h / chain.step_h + EPS)
        n_chain = 2 * chain.buckets
        grid = grid_units(chain.step_h, chain.buckets, job_h, deadline_h, changeover_h, max_cells)
        if grid is None:
            raise ValueError("the deadline plan's grid is too large for this job and step")
        unit_s, step_u, change_u, job_u, phases = grid
        n_modes = 1 + 2 * (phases + 1)  # 0 idle; 1 + j Spot at phase j; 2 + phases + j On-Demand
        unit_h = unit_s / 3600.0
        to_up, to_down = chain.transitions()
        spot_there = np.arange(n_chain) < chain.buckets

        def spot_mode(j: int) -> int:
            return 1 + j

        def od_mode(j: int) -> int:
            return 2 + phases + j

        value = np.full((n_modes, n_chain, job_u + 1), INFEASIBLE)
        value[:, :, 0] = 0.0
        lows: list[int] = [0] * steps
        actions: list[np.ndarray] = [np.zeros(0, dtype=np.int8)] * steps
        for t in range(steps - 1, -1, -1):
            lo = max(1, job_u - t * step_u)
            hi = min(job_u, (steps - t) * step_u)
            new = np.full_like(value, INFEASIBLE)
            new[:, :, 0] = 0.0
            lows[t] = lo
            if hi < lo:
                actions[t] = np.zeros((n_modes, n_chain, 0), dtype=np.int8)
                value = new
                continue
            work = np.arange(lo, hi + 1)

            def expect(
                up_mode: int, down_mode: int, shift: int, v: np.ndarray = value, work: np.ndarray = work
            ) -> np.ndarray:
                after = np.maximum(work - shift, 0)
                result: np.ndarray = to_up @ v[up_mode][:, after] + to_down @ v[down_mode][:, after]
                return result

            q_none = expect(0, 0, 0)

            def run(
                price: float, j: int, up_mode: int, down_mode: int, work: np.ndarray = work
            ) -> np.ndarray:
                over = max(0, change_u - j * step_u)
                progress = max(0, step_u - over)
                q = price * chain.step_h + expect(up_mode, down_mode, progress)
                finish = work + over <= step_u
                if finish.any():
                    q[:, finish] = price * (over + work[finish]) * unit_h
                return q

            q_spot = []
            q_od = []
            for j in range(phases + 1):
                nxt = min(j + 1, phases)
                spot_q = run(1.0, j, spot_mode(nxt), 0)
                spot_q[~spot_there, :] = INFEASIBLE
                q_spot.append(spot_q)
                q_od.append(run(price_ratio, j, od_mode(nxt), od_mode(nxt)))
            table = np.zeros((n_modes, n_chain, hi - lo + 1), dtype=np.int8)
            for mode in range(n_modes):
                spot_j = mode - 1 if 1 <= mode <= 1 + phases else 0
                od_j = mode - 2 - phases if mode >= 2 + phases else 0
                stacked = np.stack((q_none, q_spot[spot_j], q_od[od_j]))
                pick = np.argmin(stacked, axis=0)
                table[mode] = pick
                new[mode][:, lo : hi + 1] = np.take_along_axis(stacked, pick[None], axis=0)[0]
            actions[t] = table
            value = new
        return cls(
            step_h=chain.step_h,
            unit_h=unit_h,
            job_h=job_h,
            job_units=job_u,
            steps=steps,
            phases=phases,
            changeover_h=changeover_h,
            chain=chain,
            lows=tuple(lows),
            actions=tuple(actions),
        )

    def choose(
        self,
        elapsed_h: float,
        progress_h: float,
        placement: Placement,
        changeover_left_h: float,
        spot_available: bool,
        run_steps: int,
    ) -> Placement | None:
        """The plan's action for a state (None when the state lies outside the solved grid)."""
        t = round(elapsed_h / self.step_h)
        if abs(t * self.step_h - elapsed_h) > 1e-6 or not 0 <= t < self.steps:
            return None
        work = math.ceil((self.job_h - progress_h) / self.unit_h - 1e-6)
        if work <= 0:
            return Placement.NONE
        table = self.actions[t]
        index = work - self.lows[t]
        if not 0 <= index < table.shape[2]:
            return None
        if placement is Placement.NONE:
            mode = 0
        else:
            left = max(0.0, changeover_left_h)
            # phase j has max(0, D - j * step) of its changeover left
            phase = self.phases
            if left > EPS:
                phase = max(0, min(self.phases - 1, round((self.changeover_h - left) / self.step_h)))
            mode = 1 + phase if placement is Placement.SPOT else 2 + self.phases + phase
        pick = int(table[mode, self.chain.state(spot_available, run_steps), index])
        return (Placement.NONE, Placement.SPOT, Placement.ON_DEMAND)[pick]


PLAN_WHY = {
    Placement.SPOT: Why.PLAN_SPOT,
    Placement.NONE: Why.PLAN_WAIT,
    Placement.ON_DEMAND: Why.PLAN_ON_DEMAND,
}
# The guard's rules that a plan never overrides: the deadline comes first, and a pool at risk
# (the plan's model of the pool knows nothing of a rebalance recommendation).
FIRM = frozenset({Why.DONE, Why.INFEASIBLE, Why.SAFETY_NET, Why.SPOT_AT_RISK})


def decide_planned(
    state: GuardState,
    history: SpotHistory,
    settings: GuardSettings,
    plan: DeadlinePlan | None,
    run_steps: int,
) -> GuardDecision:
    """The guard with a plan: its safety net (and done / infeasible) first, then the plan's action
    for the state; the guard's own rules where there is no plan or the state lies outside it.
    `run_steps`: how many steps (this one included) Spot has been there, or missing, in a row."""
    guarded = decide(state, history, settings)
    if plan is None or guarded.why in FIRM:
        return guarded
    action = plan.choose(
        state.elapsed_h,
        state.progress_h,
        state.placement,
        state.changeover_left_h,
        state.spot_available,
        run_steps,
    )
    return _with_action(guarded, action, state)


def _with_action(guarded: GuardDecision, action: Placement | None, state: GuardState) -> GuardDecision:
    if action is None or (action is Placement.SPOT and not state.spot_available):
        return guarded
    return GuardDecision(action, PLAN_WHY[action], guarded.slack_h, guarded.line_h, guarded.wait_limit_h)


# --- the plan in the control plane: from the pool's interval history --------------------------

# The plan's step in the control plane: the 10 minutes of the traces it was tuned on (a pass
# runs more often; the plan's grid need not follow it).
PLAN_STEP_H = 1 / 6
# The history the plan is fitted on: the week before now (the single-job benchmark's window).
PLAN_WINDOW_H = 7 * 24.0
# The largest grid a pass solves for one job (the benchmark's MAX_PLAN_CELLS / 15): about 0.3 s
# of a loaded 2-core machine at most (design-notes/spot-and-deadlines.md); a larger job's grid is
# coarsened to fit, and beyond that the guard's rules decide.
PLAN_NOW_MAX_CELLS = 4_000_000
TOLERANCE_S = 1e-6


def observations(signal: SpotPoolSignal, step_h: float, window_h: float = PLAN_WINDOW_H) -> list[bool]:
    """The pool's history as equally spaced observations, oldest first: one every `step_h` before
    the pass (`n * step` ago down to `1 * step` ago; `n` whole steps of the history observed,
    within `window_h`), each True unless it falls in a completed outage (`[began, ended)` in time,
    `signal.spans_s`) or in the outage under way. What `SpotChain.fit` takes, from the past alone:
    a trace piecewise constant over `step_h` and its interval history give the same list."""
    import numpy as np

    if step_h <= 0:
        raise ValueError(f"step_h must be > 0, got {step_h:g}")
    step_s = step_h * 3600.0
    n = math.floor(min(signal.observed_s, window_h * 3600.0) / step_s + EPS)
    if n <= 0:
        return []
    ago = np.arange(n, 0, -1) * step_s
    missing = np.zeros(n, dtype=bool)
    for began, ended in signal.spans_s:
        missing |= (ago > ended + TOLERANCE_S) & (ago <= began + TOLERANCE_S)
    if not signal.available:
        missing |= ago <= signal.outage_s + TOLERANCE_S
    return [not m for m in missing.tolist()]


def run_steps(signal: SpotPoolSignal | None, spot_available: bool, step_h: float) -> int:
    """How many steps (now included) Spot has been there, or missing, in a row: from the pass's
    signal (the outage under way, or the end of the last outage); 1 when now differs from it."""
    if signal is None or signal.available != spot_available:
        return 1
    if not signal.available:
        since_s = signal.outage_s
    else:
        since_s = signal.spans_s[-1][1] if signal.spans_s else signal.observed_s
    return 1 + math.floor(since_s / (step_h * 3600.0) + EPS)


def plan_now(
    state: GuardState, signal: SpotPoolSignal, settings: GuardSettings, step_h: float = PLAN_STEP_H
) -> DeadlinePlan | None:
    """The plan for what is left of the job, from now: its model fitted on the pool's history
    before now (`observations`), solved for the work left and the time left. The dynamic programme
    is the same at every step (the model does not change with time), so its action now is the
    one a plan solved at the job's start would take in this state, with the latest history. None
    without enough history (`settings.min_history_h`), with the plan switched off, or when the
    grid would be too large. (`fitted_chain`, then `solve_now`; a pass reuses both within it:
    `deadline_budget.PassPlans`.)"""
    chain = fitted_chain(signal, settings, step_h)
    return None if chain is None else solve_now(state, chain, settings, step_h)


def fitted_chain(
    signal: SpotPoolSignal, settings: GuardSettings, step_h: float = PLAN_STEP_H
) -> SpotChain | None:
    """The pool's model for the plan, fitted on its history before now (`observations`); None
    with the plan switched off, a signal that does not place its outages in time, or less
    history than `settings.min_history_h`."""
    if settings.plan_longest_h is None or len(signal.spans_s) < len(signal.outages_s):
        return None  # switched off, or a signal that does not place its outages in time
    seen = observations(signal, step_h)
    if len(seen) * step_h < settings.min_history_h - EPS:
        return None
    return SpotChain.fit(seen, step_h, settings.plan_longest_h)


def solve_now(
    state: GuardState, chain: SpotChain, settings: GuardSettings, step_h: float = PLAN_STEP_H
) -> DeadlinePlan | None:
    """The plan under `chain` for the work left and the time left (None when nothing is left to
    plan, or the grid would be larger than `PLAN_NOW_MAX_CELLS`)."""
    work_left = state.job_h - state.progress_h
    time_left = state.deadline_h - state.elapsed_h
    if work_left <= EPS or time_left < step_h:
        return None
    try:
        return DeadlinePlan.solve(
            chain, work_left, time_left, settings.changeover_h, settings.price_ratio, PLAN_NOW_MAX_CELLS
        )
    except ValueError:
        return None  # too large a grid for this job: the guard's own rules


def plan_fits(
    work_left_h: float, time_left_h: float, settings: GuardSettings, step_h: float = PLAN_STEP_H
) -> bool:
    """Whether `solve_now` would solve a plan for this work and time left (the grid within
    `PLAN_NOW_MAX_CELLS`, something left to plan, the plan switched on); cheap: no model fitted."""
    if settings.plan_longest_h is None or work_left_h <= EPS or time_left_h < step_h:
        return False
    buckets = len(run_edges(step_h, settings.plan_longest_h))
    fits = grid_units(step_h, buckets, work_left_h, time_left_h, settings.changeover_h, PLAN_NOW_MAX_CELLS)
    return fits is not None


PlanSolver = Callable[[GuardState, SpotPoolSignal, GuardSettings, float], "DeadlinePlan | None"]


def decide_from_signal(
    state: GuardState,
    signal: SpotPoolSignal | None,
    settings: GuardSettings,
    *,
    use_plan: bool = True,
    step_h: float = PLAN_STEP_H,
    solve: PlanSolver = plan_now,
) -> GuardDecision:
    """The guard as the control plane runs it, from a pass's signal of the pool (its history):
    the rules first (the safety net, done and infeasible are final), then, with enough history,
    the plan's action for now (`plan_now`); the rules where there is no plan (`use_plan` False:
    the caller needs only the rules, and the plan is not solved). `solve`: where the plan comes
    from (`plan_now`, or a pass's `deadline_budget.PassPlans.plan`, which reuses plans)."""
    guarded = decide(state, SpotHistory.from_signal(signal), settings)
    if not use_plan or signal is None or guarded.why in FIRM:
        return guarded
    plan = solve(state, signal, settings, step_h)
    if plan is None:
        return guarded
    action = plan.choose(
        0.0,
        0.0,
        state.placement,
        state.changeover_left_h,
        state.spot_available,
        run_steps(signal, state.spot_available, step_h),
    )
    return _with_action(guarded, action, state)
