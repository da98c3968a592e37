"""The single-job Spot-under-deadline benchmark of "Can't Be Late" (NSDI '24), reproduced.

One job of C hours of work must finish within R hours of its start. Each step of the availability
trace (its `gap_seconds`) the job is idle, on Spot (only while the trace has an instance) or on
On-Demand. Every switch into a running state costs D hours without progress, billed at the new
state's price. Spot costs 1 per hour, On-Demand K. Progress is kept across moves (checkpoints);
a job that finishes mid-step pays only for what it used (the Thrifty rule). Cost is reported as a
fraction of K * C, the all-On-Demand cost without changeovers.

Policies (`POLICIES`):
- `on-demand`: On-Demand from the start.
- `greedy`: Spot whenever there is an instance, idle otherwise, and On-Demand to the end once the
  safety net fires (the paper's Exploitation + Safety Net, section 3.4).
- `uniform-progress`: the paper's policy (section 5.2) with hysteresis and the safety net.
- `omniscient`: the exact optimum over the discretised trace (dynamic programming; it knows the
  whole trace).
- `spotline`: the production deadline guard, `spotline.domain.deadline_plan.decide_planned` (the
  guard's rules with its plan), fed only what the control plane could know at that moment: the
  trace before the start (the pool's history) and, at each step, whether a Spot launch succeeds
  now (never a later step).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spotline.domain.deadline import (
    GuardSettings,
    GuardState,
    Placement,
    SpotHistory,
)
from spotline.domain.deadline_plan import DeadlinePlan, SpotChain, decide_planned
from spotline.sim.availability import AvailabilityTrace

POLICIES = ("spotline", "greedy", "uniform-progress", "omniscient", "on-demand")
EPS = 1e-9
HISTORY_WINDOW_H = 7 * 24.0  # the pool history the guard is given: the week before now
REFIT_H = 3 * 24.0  # how often the guard's plan refits its model of the pool (at multiples of this)
MAX_DP_CELLS = 200_000_000  # ticks * progress units that can still finish * states; beyond it, refused


@dataclass(frozen=True, slots=True)
class JobSetup:
    job_h: float  # C
    deadline_h: float  # R
    changeover_h: float  # D
    price_ratio: float  # K

    def check(self) -> None:
        for flag, value in (
            ("--job-hours", self.job_h),
            ("--deadline-hours", self.deadline_h),
            ("--changeover-hours", self.changeover_h),
            ("--price-ratio", self.price_ratio),
        ):
            if not math.isfinite(value):
                raise ValueError(f"{flag} must be a finite number, got {value:g}")
        if not self.job_h > 0:
            raise ValueError(f"--job-hours must be > 0, got {self.job_h:g}")
        if not self.deadline_h > 0:
            raise ValueError(f"--deadline-hours must be > 0, got {self.deadline_h:g}")
        if self.changeover_h < 0:
            raise ValueError(f"--changeover-hours must be >= 0, got {self.changeover_h:g}")
        if not self.price_ratio >= 1:
            raise ValueError(f"--price-ratio must be >= 1 (On-Demand / Spot), got {self.price_ratio:g}")
        if self.job_h + self.changeover_h > self.deadline_h + EPS:
            raise ValueError(
                f"infeasible job: --job-hours {self.job_h:g} + --changeover-hours {self.changeover_h:g}"
                f" exceed --deadline-hours {self.deadline_h:g}"
            )


@dataclass(frozen=True, slots=True)
class Outcome:
    start_hour: float
    policy: str
    cost_fraction_of_on_demand: float
    met_deadline: bool
    spot_hours: float
    on_demand_hours: float
    changeovers: int

    def to_json(self) -> dict[str, Any]:
        return {
            "start_hour": self.start_hour,
            "policy": self.policy,
            "cost_fraction_of_on_demand": round(self.cost_fraction_of_on_demand, 6),
            "met_deadline": self.met_deadline,
            "spot_hours": round(self.spot_hours, 6),
            "on_demand_hours": round(self.on_demand_hours, 6),
            "changeovers": self.changeovers,
        }


@dataclass(frozen=True, slots=True)
class Step:
    """What a policy sees at a step boundary (nothing of the trace's future)."""

    index: int  # steps since the job's start
    elapsed_h: float
    step_h: float  # length of this step (the last one may be cut by the deadline)
    progress_h: float
    mode: Placement
    changeover_left_h: float
    spot_available: bool
    outage_h: float  # how long Spot has been missing at the step boundaries seen (0 when there)


Policy = Callable[[Step], Placement]


def grid_tick(trace: AvailabilityTrace, start_hour: float) -> int:
    """The tick nearest a start hour. A start within half a tick of a tick boundary (published
    start hours are rounded, e.g. 134.117 h on a 195 s grid) is snapped to it; one exactly halfway
    between two boundaries is refused, since neither is nearer."""
    if not (math.isfinite(start_hour) and start_hour >= 0):
        raise ValueError(f"--start-hour must be a finite number >= 0, got {start_hour:g}")
    ticks = start_hour * 3600.0 / trace.gap_seconds
    tick = round(ticks)
    if abs(ticks - tick) >= 0.5 - 1e-9:
        raise ValueError(
            f"--start-hour {start_hour:g} lies halfway between two ticks of the trace's"
            f" {trace.gap_seconds} s grid ({math.floor(ticks) * trace.gap_hours:g} h and"
            f" {math.ceil(ticks) * trace.gap_hours:g} h); give one of them"
        )
    return tick


def snap_note(trace: AvailabilityTrace, start_hour: float) -> str | None:
    """What snapping a start to the grid did, or None for a start on the grid (to 1e-6 ticks)."""
    tick = grid_tick(trace, start_hour)
    off_s = start_hour * 3600.0 - tick * trace.gap_seconds
    if abs(off_s) <= 1e-6 * trace.gap_seconds:
        return None
    return (
        f"--start-hour {start_hour:g} is not on the trace's {trace.gap_seconds} s grid: snapped to"
        f" {tick * trace.gap_hours:.6g} h (tick {tick},"
        f" {abs(off_s):.1f} s {'earlier' if off_s > 0 else 'later'})"
    )


def first_tick(trace: AvailabilityTrace, setup: JobSetup, start_hour: float) -> int:
    """The tick a start hour falls on (snapped to the grid within half a tick, `grid_tick`);
    refuses a start whose window runs past the trace's end."""
    tick = grid_tick(trace, start_hour)
    if tick * trace.gap_hours + setup.deadline_h > trace.hours + EPS:
        raise ValueError(
            f"--start-hour {start_hour:g} + --deadline-hours {setup.deadline_h:g} run past the end of"
            f" {trace.name} ({trace.hours:g} h)"
        )
    return tick


def step_lengths(trace: AvailabilityTrace, setup: JobSetup) -> list[float]:
    gap = trace.gap_hours
    full = math.floor(setup.deadline_h / gap + EPS)
    lengths = [gap] * full
    rest = setup.deadline_h - full * gap
    if rest > EPS:
        lengths.append(rest)
    return lengths


def run(trace: AvailabilityTrace, setup: JobSetup, start_hour: float, policy: Policy, name: str) -> Outcome:
    """Replay one start through a policy, step by step."""
    s0 = first_tick(trace, setup, start_hour)
    progress = 0.0
    mode = Placement.NONE
    overhead = 0.0
    spot_h = od_h = 0.0
    changeovers = 0
    outage = 0.0
    elapsed = 0.0
    done = False
    for k, length in enumerate(step_lengths(trace, setup)):
        has_spot = trace.counts[s0 + k] > 0
        if mode is Placement.SPOT and not has_spot:
            mode, overhead = Placement.NONE, 0.0  # reclaimed: the checkpoint is kept
        choice = policy(
            Step(k, elapsed, length, progress, mode, overhead, has_spot, 0.0 if has_spot else outage)
        )
        if choice is Placement.SPOT and not has_spot:
            raise ValueError(f"policy {name} chose Spot at step {k} with no Spot capacity")
        if choice is not mode:
            if choice is not Placement.NONE:
                overhead = setup.changeover_h
                changeovers += 1
            else:
                overhead = 0.0
            mode = choice
        if mode is not Placement.NONE:
            need = overhead + (setup.job_h - progress)
            used = min(length, need)
            if mode is Placement.SPOT:
                spot_h += used
            else:
                od_h += used
            progress += max(0.0, used - overhead)
            overhead = max(0.0, overhead - used)
            if used >= need - EPS:
                progress, done = setup.job_h, True
        outage = 0.0 if has_spot else outage + length
        elapsed += length
        if done:
            break
    cost = (spot_h + setup.price_ratio * od_h) / (setup.price_ratio * setup.job_h)
    return Outcome(start_hour, name, cost, done, spot_h, od_h, changeovers)


# --- the peers -----------------------------------------------------------------------------------


def _need_ticks(work_h: float, extra_h: float, step_h: float) -> int:
    return math.ceil((work_h + extra_h) / step_h - EPS)


def greedy(setup: JobSetup, gap_h: float) -> Policy:
    """Exploitation + Safety Net: Spot when there, idle otherwise, On-Demand to the end at the
    last safe moment (the paper's rule, R(t) < C(t) + 2d, checked on the step grid)."""
    committed = False

    def policy(step: Step) -> Placement:
        nonlocal committed
        work = setup.job_h - step.progress_h
        if work <= EPS:
            return Placement.NONE
        left = math.floor((setup.deadline_h - step.elapsed_h) / gap_h + EPS)
        if committed or _need_ticks(work, 2 * setup.changeover_h, gap_h) >= left:
            # on Spot, keep riding it while one restart still fits after the next step
            riding = step.mode is Placement.SPOT and step.spot_available and not committed
            if riding and _need_ticks(work, setup.changeover_h, gap_h) < left:
                return Placement.SPOT
            committed = True
            return Placement.ON_DEMAND
        return Placement.SPOT if step.spot_available else Placement.NONE

    return policy


def uniform_progress(setup: JobSetup, gap_h: float) -> Policy:
    """Uniform Progress with hysteresis and the safety net (the paper's section 5.2 rules)."""
    c, r, d = setup.job_h, setup.deadline_h, setup.changeover_h
    net = False

    def policy(step: Step) -> Placement:
        nonlocal net
        work = c - step.progress_h
        if work <= EPS:  # Thrifty
            return Placement.NONE
        left = math.floor((r - step.elapsed_h) / gap_h + EPS)
        if net or _need_ticks(work, 2 * d, gap_h) >= left:  # Safety Net: On-Demand to the end
            net = True
            return Placement.ON_DEMAND
        if step.mode is Placement.ON_DEMAND and step.progress_h < (step.elapsed_h + 2 * d) * c / r - EPS:
            return Placement.ON_DEMAND  # Hysteresis
        if step.spot_available:  # Taking Risks (and Exploitation: stay until reclaimed)
            return Placement.SPOT
        if step.progress_h < step.elapsed_h * c / r - EPS:  # behind the line: catch up On-Demand
            return Placement.ON_DEMAND
        return Placement.NONE

    return policy


def on_demand(setup: JobSetup) -> Policy:
    def policy(step: Step) -> Placement:
        return Placement.NONE if step.progress_h >= setup.job_h - EPS else Placement.ON_DEMAND

    return policy


def spotline(
    trace: AvailabilityTrace,
    setup: JobSetup,
    start_tick: int,
    settings: GuardSettings | None = None,
    plans: dict[int, DeadlinePlan | None] | None = None,
) -> Policy:
    """The deadline guard, told only the pool's past and whether Spot is there now.

    Its history is the week of the trace before the start, then each step's observation once it is
    made (whether a Spot launch succeeds now); never a later step. Its plan
    (`spotline.domain.deadline_plan`) is fitted to the week before the last refit (the pool's
    model is refitted every `REFIT_H`) and shared by the starts until the next one through
    `plans`, keyed by the refit's tick.
    """
    guard = settings or GuardSettings(changeover_h=setup.changeover_h, price_ratio=setup.price_ratio)
    gap = trace.gap_hours
    window = int(HISTORY_WINDOW_H / gap)
    tracker = HistoryTracker(gap)
    for n in trace.counts[max(0, start_tick - window) : start_tick]:
        tracker.observe(n > 0)
    plan = day_plan(trace, setup, start_tick, guard, {} if plans is None else plans)

    def policy(step: Step) -> Placement:
        tracker.observe(step.spot_available)
        state = GuardState(
            job_h=setup.job_h,
            deadline_h=setup.deadline_h,
            elapsed_h=step.elapsed_h,
            progress_h=step.progress_h,
            placement=step.mode,
            changeover_left_h=step.changeover_left_h,
            spot_available=step.spot_available,
            outage_h=tracker.outage_h,
            step_h=step.step_h,
        )
        return decide_planned(state, tracker.history(), guard, plan, tracker.run).placement

    return policy


def day_plan(
    trace: AvailabilityTrace,
    setup: JobSetup,
    start_tick: int,
    guard: GuardSettings,
    plans: dict[int, DeadlinePlan | None],
) -> DeadlinePlan | None:
    """The plan for a job starting at `start_tick`: fitted to the week before the last refit
    (every `REFIT_H` from the trace's start); None with less than `min_history_h` of history, or
    when the plan's grid is too large."""
    gap = trace.gap_hours
    period = max(1, round(REFIT_H / gap))
    refit = (start_tick // period) * period
    if refit not in plans:
        seen = [n > 0 for n in trace.counts[max(0, refit - int(HISTORY_WINDOW_H / gap)) : refit]]
        plan: DeadlinePlan | None = None
        if guard.plan_longest_h is not None and len(seen) * gap >= guard.min_history_h:
            try:
                plan = DeadlinePlan.solve(
                    SpotChain.fit(seen, gap, guard.plan_longest_h),
                    setup.job_h,
                    setup.deadline_h,
                    setup.changeover_h,
                    setup.price_ratio,
                )
            except ValueError:
                plan = None  # too fine a grid for this job: the guard's own rules
        plans[refit] = plan
    return plans[refit]


class HistoryTracker:
    """A pool's history kept up to date one observation at a time (the simulator's bookkeeping;
    the control plane builds the same SpotHistory with SpotHistory.summarise)."""

    def __init__(self, step_h: float) -> None:
        self.step_h = step_h
        self.observed = 0
        self.available = 0
        self.outages: list[float] = []
        self.missing = 0  # consecutive observations without capacity, up to now
        self.run = 0  # consecutive observations alike (with or without capacity), up to now
        self._last: bool | None = None
        self.seen_capacity = False
        self._summary: SpotHistory | None = None

    def observe(self, up: bool) -> None:
        self.observed += 1
        self.run = self.run + 1 if up == self._last else 1
        self._last = up
        if up:
            self.available += 1
            if self.missing and self.seen_capacity:
                bisect.insort(self.outages, self.missing * self.step_h)
            self.missing = 0
            self.seen_capacity = True
        else:
            self.missing += 1
        self._summary = None

    @property
    def outage_h(self) -> float:
        """How long Spot has been missing, from the first observation without it (0 when there)."""
        return max(0, self.missing - 1) * self.step_h

    def history(self) -> SpotHistory:
        if self._summary is None:
            self._summary = SpotHistory(
                observed_h=self.observed * self.step_h,
                available_h=self.available * self.step_h,
                outages=tuple(self.outages),
            )
        return self._summary


# --- the omniscient optimum ----------------------------------------------------------------------


def omniscient(trace: AvailabilityTrace, setup: JobSetup, starts: Sequence[float]) -> list[Outcome]:
    """The cheapest schedule that knows the whole trace, by dynamic programming, for each start.

    Decisions are made at the trace's step boundaries (as every policy's are). Progress is counted
    in units of gcd(gap, changeover) seconds, so every full step's progress is a whole number of
    units: the optimum is exact on that grid. State: (mode; steps since the last switch, capped
    once the changeover is paid off; progress). Each cell keeps its cheapest cost, with the Spot
    hours and changeovers of that cheapest path. All starts are solved together (one row each).
    """
    first = [first_tick(trace, setup, s) for s in starts]
    gap_s = trace.gap_seconds
    change_s = setup.changeover_h * 3600.0
    if abs(change_s - round(change_s)) > 1e-6:
        raise ValueError("--changeover-hours must be a whole number of seconds for the omniscient policy")
    change = round(change_s)
    unit = math.gcd(gap_s, change) if change else gap_s
    job_s = setup.job_h * 3600.0
    deadline_s = setup.deadline_h * 3600.0
    units = math.ceil(job_s / unit - 1e-9)  # progress cells 0 .. units-1 (not yet done)
    phases = math.ceil(change / gap_s) if change else 0  # phase j: changeover left max(0, change - j*gap)
    lengths = step_lengths(trace, setup)
    n_states = 1 + 2 * (phases + 1)  # 0 idle; 1 + j Spot phase j; 2 + phases + j On-Demand phase j
    rows = len(starts)
    band = min(units, math.floor((deadline_s - job_s) / unit) + 2)  # progress that can still finish
    if len(lengths) * band * n_states > MAX_DP_CELLS:
        raise ValueError(
            "the omniscient policy's grid is too fine for these flags (job hours / gcd of the trace's gap"
            " and the changeover); use a changeover of whole minutes"
        )
    k_price = setup.price_ratio
    counts = np.asarray(trace.counts)
    cost = np.full((n_states, rows, units), np.inf)
    spot = np.zeros((n_states, rows, units))
    switches = np.zeros((n_states, rows, units))
    # the next step's cells, reused step after step: only the costs a step can write are reset
    # (a Spot total or switch count is read only beside a finite cost)
    new_cost, new_spot, new_sw = np.full_like(cost, np.inf), np.zeros_like(spot), np.zeros_like(switches)
    cost[0, :, 0] = 0.0
    best_cost = np.full(rows, np.inf)
    best_spot = np.zeros(rows)
    best_switches = np.zeros(rows)
    positions = np.arange(units)
    starts_at = np.asarray(first)

    def split(source: int) -> tuple[int, int]:
        if source == 0:
            return 0, 0
        return (1, source - 1) if source <= 1 + phases else (2, source - 2 - phases)

    def state(mode: int, phase: int) -> int:
        return 0 if mode == 0 else (1 + phase if mode == 1 else 2 + phases + phase)

    for k, length_h in enumerate(lengths):
        length = length_h * 3600.0
        last = k == len(lengths) - 1
        has_spot = counts[starts_at + k] > 0
        hi = min(units, int((k + 1) * gap_s // unit) + 1)  # progress reachable so far
        # progress below `lo` cannot finish by the deadline: those cells are skipped (exactly)
        lo = min(hi, max(0, math.floor((job_s - (deadline_s - k * gap_s)) / unit)))
        new_cost[:, :, lo : min(units, int((k + 2) * gap_s // unit) + 1)] = np.inf

        def offer(
            target: int,
            shift: int,
            c: np.ndarray,
            s: np.ndarray,
            w: np.ndarray,
            hi: int = hi,
            lo: int = lo,
            new_cost: np.ndarray = new_cost,
            new_spot: np.ndarray = new_spot,
            new_sw: np.ndarray = new_sw,
        ) -> None:
            # c, s and w hold progress lo, lo + 1, ...; they land `shift` units further on
            top = min(units, hi + shift)
            width = min(top - lo - shift, c.shape[1])
            if width <= 0:
                return
            at = slice(lo + shift, lo + shift + width)
            dest = new_cost[target, :, at]
            src = c[:, :width]
            better = src < dest
            if not better.any():
                return
            np.copyto(dest, src, where=better)
            np.copyto(new_spot[target, :, at], s[:, :width], where=better)
            np.copyto(new_sw[target, :, at], w[:, :width], where=better)

        for source in range(n_states):
            c_src = cost[source, :, lo:hi]
            if not np.isfinite(c_src).any():
                continue
            s_src, w_src = spot[source, :, lo:hi], switches[source, :, lo:hi]
            mode, phase = split(source)
            if not last:
                offer(0, 0, c_src, s_src, w_src)  # idle
            for target_mode in (1, 2):
                same = target_mode == mode
                j = phase if same else 0
                left = max(0.0, change - j * gap_s)
                price = 1.0 if target_mode == 1 else k_price
                c_run = np.where(has_spot[:, None], c_src, np.inf) if target_mode == 1 else c_src
                w_run = w_src if same else w_src + 1
                # finishing in this step: pay only the changeover left and the work left
                finish_from = max(lo, math.ceil((job_s - (length - left)) / unit - 1e-9))
                if finish_from < hi:
                    used_h = (left + job_s - positions[finish_from:hi] * unit) / 3600.0
                    totals = c_run[:, finish_from - lo : hi - lo] + price * used_h
                    pick = np.argmin(totals, axis=1)
                    row_ix = np.arange(rows)
                    value = totals[row_ix, pick]
                    better = value < best_cost - 1e-12
                    if better.any():
                        spot_total = s_src[row_ix, finish_from - lo + pick] + (
                            used_h[pick] if target_mode == 1 else 0.0
                        )
                        best_cost = np.where(better, value, best_cost)
                        best_spot = np.where(better, spot_total, best_spot)
                        chosen = w_run[row_ix, finish_from - lo + pick]
                        best_switches = np.where(better, chosen, best_switches)
                if last:
                    continue
                stay = min(hi, finish_from) - lo
                if stay <= 0:
                    continue
                shift = round(max(0.0, length - left) / unit)
                spot_add = length_h if target_mode == 1 else 0.0
                offer(
                    state(target_mode, min(j + 1, phases)),
                    shift,
                    c_run[:, :stay] + price * length_h,
                    s_src[:, :stay] + spot_add,
                    w_run[:, :stay],
                )
        cost, spot, switches, new_cost, new_spot, new_sw = new_cost, new_spot, new_sw, cost, spot, switches
    outcomes = []
    for row, start in enumerate(starts):
        total = float(best_cost[row])
        if not math.isfinite(total):
            outcomes.append(Outcome(start, "omniscient", math.inf, False, 0.0, 0.0, 0))
            continue
        spot_h = float(best_spot[row])
        outcomes.append(
            Outcome(
                start,
                "omniscient",
                total / (k_price * setup.job_h),
                True,
                spot_h,
                (total - spot_h) / k_price,
                int(best_switches[row]),
            )
        )
    return outcomes


def simulate_deadline(
    trace: AvailabilityTrace,
    setup: JobSetup,
    starts: Sequence[float],
    policy: str,
    settings: GuardSettings | None = None,
) -> list[Outcome]:
    """One outcome per start hour, for one policy."""
    setup.check()
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} (one of {', '.join(POLICIES)})")
    ticks = [first_tick(trace, setup, s) for s in starts]  # every start checked before any work
    if policy == "omniscient":
        return omniscient(trace, setup, starts)
    outcomes = []
    plans: dict[int, DeadlinePlan | None] = {}  # the spotline policy's daily plans, by refit tick
    for start, tick in zip(starts, ticks, strict=True):
        chosen: Policy
        if policy == "greedy":
            chosen = greedy(setup, trace.gap_hours)
        elif policy == "uniform-progress":
            chosen = uniform_progress(setup, trace.gap_hours)
        elif policy == "on-demand":
            chosen = on_demand(setup)
        else:
            chosen = spotline(trace, setup, tick, settings, plans)
        outcomes.append(run(trace, setup, start, chosen, policy))
    return outcomes
