"""`make bench`, contention part (issue 29): Spotline against the competent peers where the
cluster is genuinely full, with the loss and wait accounts side by side, and the issue's goals.

Contended samples (disjoint from each other's set, as `policy_bench`'s sets are):
- evaluation: Philly's evaluation windows at fewer GPUs (load >= 1.0 over the window: 2017-10-30..
  11-12 on 384 GPUs, load 1.12; 2017-11-13..26 on 256 GPUs with another priority draw, seed 2,
  load 1.02); synthetic traces with bursty (MMPP) arrivals and log-normal run times of sigma 1.6
  at loads 0.85 and 1.2 (seeds 1, 2); and a synthetic trace where 1% of the jobs run for 7-21
  days, the others bursting over them (seed 1, load 1.0);
- tuning (what defaults may be chosen on; `CONTENDED_TUNING`): Philly 2017-10-02..05 on 512 GPUs
  with another priority draw (seed 2; the window `bench/tune.py` searches, load 1.20), the same
  synthetic shapes at seeds 101-103.

The goals compare, per sample, Spotline with the best competent peer on each metric (lost
GPU-hours with the best *preempting* peer: FIFO loses only to Spot) over the evaluation set:
`policy_bench.EVALUATION` and the contended samples; each row says in how many samples it is met
and the mean ratio. Printed beside them, per contended sample: the loss account (lost GPU-hours
by cause, preemptions per job, repeats, preemptions by class pair) and the wait account (what the
critical and high jobs in the p99 tail of their wait waited for), for Spotline and the best
preempting peer (fewest lost GPU-hours).

Run: `.venv/bin/python -m bench.contention` (`--contended-only`: the contended samples alone;
`--tuning`: the tuning set's contended counterparts instead of the evaluation set; `--steps`:
Spotline with issue 29's rules added one at a time, `STEPS`, which is how the defaults were
chosen, with `--tuning`);
`SPOTLINE_BENCH_QUICK=1`: small samples (a smoke test, not a result).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.policy_bench import runs as pb_runs
from bench.policy_bench import setup as pb
from bench.policy_bench.tables import _fmt
from spotline.domain import Priority, SchedulerConfig
from spotline.domain.config import PriorityWeights, VictimStrategy
from spotline.sim import SimSettings, simulate
from spotline.sim.accounts import LOSS_CAUSES, RESTART_LABELS, SPOT, WAIT_CAUSES
from spotline.trace import Trace
from spotline.trace.synth import synth_trace

PREEMPTING = tuple(p for p in pb.PEERS if p != "fifo")
# The policy before issue 29's rules, shown beside the defaults (docs/contention.md): critical
# preemptors stop their victims at once, the margin alone decides who may preempt whom, classes
# are not strict, victims by least lost work.
BEFORE = SchedulerConfig(
    stop_at_once_within_write=False,
    preempt_lower_class_only=False,
    weights=PriorityWeights(strict_class_order=False),
    strategy=VictimStrategy.LEAST_LOST_WORK,
    preempt_for_class_head_only=frozenset(),
    hold_for_blocked_gang=False,
    gang_hold_backfill=False,
    gang_hold_after_s=0.0,
    move_to_spot_min_remaining_s=0.0,
    move_to_spot_weighs_history=False,
)
VARIANT = "spotline, before issue 29"
# Issue 29's rules, one added at a time (`--steps`, on the tuning set's contended counterparts:
# what the defaults were chosen on), and the alternatives measured beside them.
_WITHIN_WRITE = {"stop_at_once_within_write": True}
_CLASSES = {
    **_WITHIN_WRITE,
    "preempt_lower_class_only": True,
    "weights": PriorityWeights(strict_class_order=True),
}
# The first rules' defaults (the first session's choice, bench/data/contention_tuning.json).
FIRST = BEFORE.model_copy(update={**_CLASSES, "strategy": VictimStrategy.LOWEST_CLASS_LEAST_LOST_WORK})
# The second session's rules, added one at a time to FIRST (bench/data/contention_tuning_2.json).
# (measured under the advisor-band Spot model then, without the pools' history: the moves by the
# remaining-time threshold alone)
_SPOT_MOVES = {"move_to_spot_min_remaining_s": 86400.0, "move_to_spot_weighs_history": False}
_GANG = {**_SPOT_MOVES, "hold_for_blocked_gang": True}
_HEAD_NORMAL = {**_GANG, "preempt_for_class_head_only": frozenset({Priority.NORMAL})}
# The third session's (bench/retune_spot_traces.py, bench/data/contention_tuning_3.json): under
# the trace-driven Spot model, with the pools' history fed to the pass, the second rules' moves
# and gang hold decided again (each on the head rule for the normal class).
_HEAD = {"preempt_for_class_head_only": frozenset({Priority.NORMAL})}
_WEIGHED = {"move_to_spot_weighs_history": True}
SPOT_TRACE_STEPS: dict[str, SchedulerConfig] = {
    name: FIRST.model_copy(update={**_HEAD, **moves, "hold_for_blocked_gang": hold})
    for hold in (False, True)
    for name, moves in (
        (
            f"moves weigh the pool's history (a day left at least), {'' if hold else 'no '}gang hold",
            {**_WEIGHED, "move_to_spot_min_remaining_s": 86400.0},
        ),
        (
            f"moves weigh the pool's history (6 h left at least), {'' if hold else 'no '}gang hold",
            {**_WEIGHED, "move_to_spot_min_remaining_s": 21600.0},
        ),
        (
            f"moves by the remaining time alone (a day), {'' if hold else 'no '}gang hold",
            {"move_to_spot_weighs_history": False, "move_to_spot_min_remaining_s": 86400.0},
        ),
        (f"no moves, {'' if hold else 'no '}gang hold", {"move_to_spot_min_remaining_s": 0.0}),
    )
}
# The fourth session's (bench/retune_gang_backfill.py, bench/data/contention_tuning_4.json): the
# gang hold made backfill-aware (`gang_hold_backfill`), beside the third rules' defaults and their
# plain gang hold (the third record's peers are reused).
_THIRD = SPOT_TRACE_STEPS["moves weigh the pool's history (6 h left at least), no gang hold"]
GANG_BACKFILL_STEPS: dict[str, SchedulerConfig] = {
    "the third rules' defaults (no gang hold)": _THIRD,
    "gang hold": _THIRD.model_copy(update={"hold_for_blocked_gang": True}),
    "gang hold, backfill by declared run time": _THIRD.model_copy(
        update={"hold_for_blocked_gang": True, "gang_hold_backfill": True}
    ),
    **{
        f"gang hold after {label}, backfill by declared run time": _THIRD.model_copy(
            update={"hold_for_blocked_gang": True, "gang_hold_backfill": True, "gang_hold_after_s": after}
        )
        for label, after in (("15 min", 900.0), ("1 h", 3600.0))
    },
}
STEPS: dict[str, SchedulerConfig] = {
    "before issue 29": BEFORE,
    "+ critical victims checkpoint beyond their write": BEFORE.model_copy(update=_WITHIN_WRITE),
    "+ preemption by class, strict class order": BEFORE.model_copy(update=_CLASSES),
    "+ victims lowest class first (the first defaults)": FIRST,
    "alternative: lowest class, then least cost": BEFORE.model_copy(
        update={**_CLASSES, "strategy": VictimStrategy.LOWEST_CLASS_LEAST_COST}
    ),
    "alternative: the first defaults, lower classes wait below a blocked one": FIRST.model_copy(
        update={"preempt_below_blocked_class": True}
    ),
    "alternative: the first defaults, protection 300 s": FIRST.model_copy(
        update={"protection_period_s": 300.0}
    ),
    "alternative: the first defaults, only the head of each class preempts": FIRST.model_copy(
        update={"preempt_for_class_head_only": frozenset(Priority)}
    ),
    "alternative: the first defaults, only the head of the normal class preempts": FIRST.model_copy(
        update={"preempt_for_class_head_only": frozenset({Priority.NORMAL})}
    ),
    "alternative: the first defaults, free GPUs held for the top blocked gang": FIRST.model_copy(
        update={"hold_for_blocked_gang": True}
    ),
    "alternative: the first defaults, head of the normal class, gang hold": FIRST.model_copy(
        update={"preempt_for_class_head_only": frozenset({Priority.NORMAL}), "hold_for_blocked_gang": True}
    ),
    "alternative: the first defaults, no protection for jobs ahead of a gang or critical job": (
        FIRST.model_copy(update={"protect_backfill": False})
    ),
    "alternative: the first defaults, moves to Spot with 6 h left": FIRST.model_copy(
        update={"move_to_spot_min_remaining_s": 21600.0}
    ),
    "alternative: the first defaults, head of the normal class, moves with 6 h left": FIRST.model_copy(
        update={
            "preempt_for_class_head_only": frozenset({Priority.NORMAL}),
            "move_to_spot_min_remaining_s": 21600.0,
        }
    ),
    "+ moves to Spot with a day left": FIRST.model_copy(update=_SPOT_MOVES),
    "+ free GPUs held for the top blocked gang": FIRST.model_copy(update=_GANG),
    "+ only the head of the normal class preempts (the defaults)": FIRST.model_copy(update=_HEAD_NORMAL),
    "alternative: the defaults with the head of every class": FIRST.model_copy(
        update={**_HEAD_NORMAL, "preempt_for_class_head_only": frozenset(Priority)}
    ),
    "alternative: moves and gang hold, no protection for jobs ahead of a gang or critical job": (
        FIRST.model_copy(update={**_GANG, "protect_backfill": False})
    ),
    **{f"spot traces: {name}": config for name, config in SPOT_TRACE_STEPS.items()},
}


@dataclass(frozen=True)
class Contended:
    """A contended sample: a Philly window on fewer GPUs, or a synthetic trace of a shape."""

    kind: str  # "philly" | "bursty" | "long"
    seed: int
    gpus: int
    start: str = ""
    end: str = ""
    jobs: int = 0
    load: float = 0.0
    sigma: float = 1.6
    long_share: float = 0.0

    @property
    def label(self) -> str:
        if self.kind == "philly":
            return f"philly {self.start}..{self.end} s{self.seed} on {self.gpus} GPUs"
        shape = f"long-running {self.long_share:.0%}" if self.long_share else "bursty"
        size = f"{self.jobs} jobs load {self.load:g} s{self.seed} on {self.gpus} GPUs"
        return f"{shape} sigma {self.sigma:g} {size}"

    def trace(self) -> Trace:
        if self.kind == "philly":
            return pb.load(pb.Sample("philly", self.seed, self.start, self.end, gpus=self.gpus))
        jobs = synth_trace(
            self.jobs, self.load, self.gpus, self.seed, sigma=self.sigma, long_share=self.long_share
        )
        return Trace(jobs=jobs, source=self.label)


def _bursty(seed: int, load: float, jobs: int = 4000, gpus: int = 256) -> Contended:
    return Contended("bursty", seed, gpus, jobs=jobs, load=load)


def _long(seed: int, jobs: int = 4000, gpus: int = 256) -> Contended:
    return Contended("long", seed, gpus, jobs=jobs, load=1.0, long_share=0.01)


CONTENDED_EVALUATION: tuple[Contended, ...] = (
    Contended("philly", 1, 384, "2017-10-30", "2017-11-12"),
    Contended("philly", 2, 256, "2017-11-13", "2017-11-26"),
    _bursty(1, 0.85),
    _bursty(2, 1.2),
    _long(1),
)
CONTENDED_TUNING: tuple[Contended, ...] = (
    Contended("philly", 2, 512, "2017-10-02", "2017-10-05"),
    _bursty(101, 0.85),
    _bursty(102, 1.2),
    _long(103),
)
if pb.QUICK:
    CONTENDED_EVALUATION = (_bursty(1, 1.2, 600, 64), _long(1, 600, 64))
    CONTENDED_TUNING = (_bursty(101, 1.2, 600, 64),)


def available(samples: Sequence[Contended]) -> list[Contended]:
    return [s for s in samples if s.kind != "philly" or pb.philly_path() is not None]


def run_contended(
    sample: Contended,
    policies: Sequence[str] = pb.EVAL_POLICIES,
    config: SchedulerConfig | None = None,
    settings: SimSettings | None = None,
    workers: int | None = None,
) -> dict[str, dict[str, Any]]:
    report = simulate(
        sample.trace(),
        list(policies),
        gpus=sample.gpus,
        seed=sample.seed,
        config=config,
        settings=settings,
        trace_name=sample.label,
        workers=pb_runs.WORKERS if workers is None else workers,
        keep_jobs=False,
    )
    runs: dict[str, dict[str, Any]] = report.to_json()["policies"]
    return runs


# --- the goals ------------------------------------------------------------------------------


def _urgent_wait(m: dict[str, Any]) -> float:
    """The worse of the critical and high p99 waits (with requeues)."""
    waits = m["wait_p99_s_by_priority"]
    return max(float(waits["critical"]), float(waits["high"]))


@dataclass(frozen=True)
class Goal:
    label: str
    value: Callable[[dict[str, Any]], float]
    lower_is_better: bool
    target: float
    peers: tuple[str, ...] = pb.PEERS
    absolute: float | None = None  # also met at or under this (waits: 5 minutes)


GOALS: tuple[Goal, ...] = (
    Goal(
        "lost GPU-hours <= 0.7x the best preempting peer",
        lambda m: m["lost_gpu_hours"],
        True,
        0.7,
        PREEMPTING,
    ),
    Goal("critical and high p99 wait <= 1.1x or <= 5 min", _urgent_wait, True, 1.1, absolute=300.0),
    Goal("average JCT <= 1.0x", lambda m: m["avg_jct_s"], True, 1.0),
    Goal("low-class average JCT <= 1.2x", lambda m: m["avg_jct_s_by_priority"]["low"], True, 1.2),
    Goal("cost per useful GPU-hour <= 1.0x", lambda m: m["cost_per_useful_gpu_hour"], True, 1.0),
    Goal("Jain's fairness >= 0.97x", lambda m: m["jain_fairness"], False, 0.97),
    # Worst team's finish-time fairness rho: lower is better, read as best peer / ours (>= 0.97).
    Goal(
        "finish-time fairness (worst team) >= 0.97x",
        lambda m: 1.0 / m["ftf_max"] if m["ftf_max"] else 0.0,
        False,
        0.97,
    ),
)


def best_peer(goal: Goal, runs: dict[str, dict[str, Any]]) -> tuple[str, float]:
    values = {p: goal.value(runs[p]) for p in goal.peers if p in runs}
    name = (min if goal.lower_is_better else max)(values, key=lambda p: values[p])
    return name, values[name]


def judge(goal: Goal, runs: dict[str, dict[str, Any]]) -> tuple[float, bool, str]:
    """(ours / best peer's, met, how) in one sample."""
    ours = goal.value(runs["spotline"])
    peer, theirs = best_peer(goal, runs)
    if goal.absolute is not None and ours <= goal.absolute:
        return (ours / theirs if theirs else 1.0), True, f"{ours / 60:.1f} min"
    ratio = (1.0 if ours == 0 else math.inf) if theirs == 0 else ours / theirs
    met = ratio <= goal.target if goal.lower_is_better else ratio >= goal.target
    return ratio, met, f"x{ratio:.3f} vs {peer}"


def goal_rows(per_sample: Sequence[dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for goal in GOALS:
        outcomes = [judge(goal, runs) for runs in per_sample]
        mean, half = pb.interval([r for r, _, _ in outcomes])
        rows.append(
            {
                "goal": goal.label,
                "mean_ratio": mean,
                "ci95": half,
                "met_in_samples": sum(met for _, met, _ in outcomes),
                "samples": len(outcomes),
                "per_sample": [how for _, _, how in outcomes],
            }
        )
    return rows


def with_variant(runs: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The runs with the policy before issue 29 in Spotline's place."""
    return {**runs, "spotline": runs[VARIANT]}


def print_goals(
    title: str, labels: Sequence[str], per_sample: Sequence[dict[str, dict[str, Any]]], console: Console
) -> None:
    table = Table(title=title)
    for column in ("goal", "mean ratio ± CI", "met in samples", "met", *labels):
        table.add_column(column)
    for row in goal_rows(per_sample):
        met = row["met_in_samples"] == row["samples"]
        table.add_row(
            row["goal"],
            _fmt(row["mean_ratio"], row["ci95"], digits=3),
            f"{row['met_in_samples']}/{row['samples']}",
            "met" if met else "NOT met",
            *row["per_sample"],
        )
    console.print(table)


# --- the accounts -----------------------------------------------------------------------------


def best_preempting(runs: dict[str, dict[str, Any]]) -> str:
    """The preempting peer that lost the fewest GPU-hours in this sample."""
    return min((p for p in PREEMPTING if p in runs), key=lambda p: runs[p]["lost_gpu_hours"])


def spot_loss(run: dict[str, Any]) -> float:
    """GPU-hours a run lost to Spot interruptions, with the restarts after them."""
    by_cause = run["loss_account"]["lost_gpu_hours_by_cause"]
    spot = LOSS_CAUSES[SPOT]
    return float(by_cause.get(spot, 0.0)) + float(by_cause.get(RESTART_LABELS[SPOT], 0.0))


@dataclass(frozen=True)
class LossBudget:
    """What Spot leaves of the lost-work goal in one sample: the goal's budget (the target times
    the best preempting peer's loss), the least any peer or Spotline lost to Spot in the sample,
    and the rest, which is all a policy with that little Spot loss may lose to preemptions and
    still meet the goal. Each preemption costs a write and a restart whoever schedules, so a budget near 0
    (or below it) says the goal is out of reach of the queue's order, whatever it preempts."""

    peer: str
    budget: float
    least_spot: float
    least_spot_policy: str
    peer_preemption_loss: float

    @property
    def left_for_preemptions(self) -> float:
        return self.budget - self.least_spot


def loss_budget(runs: dict[str, dict[str, Any]]) -> LossBudget:
    goal = GOALS[0]
    peer = best_preempting(runs)
    budget = goal.target * float(runs[peer]["lost_gpu_hours"])
    # The peers and the Spotline judged, not the earlier variant some tables run beside them.
    policy = min((p for p in (*pb.PEERS, "spotline") if p in runs), key=lambda p: spot_loss(runs[p]))
    return LossBudget(
        peer=peer,
        budget=budget,
        least_spot=spot_loss(runs[policy]),
        least_spot_policy=policy,
        peer_preemption_loss=float(runs[peer]["lost_gpu_hours"]) - spot_loss(runs[peer]),
    )


def print_accounts(label: str, runs: dict[str, dict[str, Any]], console: Console) -> None:
    peer = best_preempting(runs)
    names = ("spotline", peer)
    table = Table(title=f"Loss account: {label} (spotline vs {peer}, the preempting peer that lost least)")
    table.add_column("GPU-hours lost by cause")
    for name in names:
        table.add_column(name, justify="right")
    for cause in (*LOSS_CAUSES.values(), *RESTART_LABELS.values()):
        values = [runs[n]["loss_account"]["lost_gpu_hours_by_cause"].get(cause, 0.0) for n in names]
        if any(values):
            table.add_row(cause, *(f"{v:.1f}" for v in values))
    table.add_row("all (lost_gpu_hours)", *(f"{runs[n]['lost_gpu_hours']:.1f}" for n in names))
    table.add_row(
        "of which Spot / preemptions (each with its restarts)",
        *(f"{spot_loss(runs[n]):.1f} / {runs[n]['lost_gpu_hours'] - spot_loss(runs[n]):.1f}" for n in names),
    )
    table.add_row("preemptions", *(str(runs[n]["preemptions"]) for n in names))
    table.add_row(
        "jobs preempted 0 / 1 / 2 / 3-5 / 6-10 / >10 times",
        *(" / ".join(str(v) for v in runs[n]["loss_account"]["preemptions_per_job"].values()) for n in names),
    )
    table.add_row(
        "repeat preemptions (within 600 s + 1 h)",
        *(str(runs[n]["loss_account"]["repeat_preemptions"]) for n in names),
    )
    for pair in sorted({k for n in names for k in runs[n]["loss_account"]["preemptions_by_class"]}):
        table.add_row(
            f"preemptions {pair}",
            *(str(runs[n]["loss_account"]["preemptions_by_class"].get(pair, 0)) for n in names),
        )
    if all("gang_account" in runs[n] for n in names):
        table.add_row(
            "multi-node jobs' p99 / max wait (min)",
            *(
                f"{runs[n]['gang_account']['multi_node_wait_p99_s'] / 60:.0f} /"
                f" {runs[n]['gang_account']['multi_node_wait_max_s'] / 60:.0f}"
                for n in names
            ),
        )
        table.add_row(
            "single-node On-Demand starts while a gang waits (their GPUs)",
            *(
                f"{runs[n]['gang_account']['single_node_on_demand_starts_while_a_gang_waits']}"
                f" ({runs[n]['gang_account']['their_gpus']})"
                for n in names
            ),
        )
    budget = loss_budget(runs)
    table.caption = (
        f"Lost-work goal ({GOALS[0].target:g}x {budget.peer}'s loss): {budget.budget:.1f} GPU-h; the least"
        f" any policy lost to Spot here: {budget.least_spot:.1f} ({budget.least_spot_policy}); left for"
        f" preemptions at that Spot loss: {budget.left_for_preemptions:.1f}, against"
        f" {budget.peer_preemption_loss:.1f} for {budget.peer}'s preemptions"
    )
    console.print(table)
    waits = Table(
        title=f"Wait account: {label}: what the p99 tail of each class waited for (share of its wait)"
    )
    waits.add_column("cause")
    for cls in ("critical", "high"):
        for name in names:
            account = runs[name]["wait_account"][cls]
            waits.add_column(
                f"{cls} {name} (p99 {account['p99_wait_s'] / 60:.1f} min, {account['tail_jobs']} jobs)",
                justify="right",
            )
    for cause in WAIT_CAUSES:
        cells = [
            f"{runs[n]['wait_account'][cls]['tail_wait_share_by_cause'][cause]:.0%}"
            for cls in ("critical", "high")
            for n in names
        ]
        waits.add_row(cause, *cells)
    console.print(waits)


def run_steps(samples: Sequence[Contended], console: Console) -> dict[str, Any]:
    """Spotline with each of `STEPS` on `samples` (the peers once per sample, for the ratios):
    per sample and step, lost GPU-hours (and / the best preempting peer's), the critical and the
    high p99 wait, average and low-class JCT."""
    table = Table(title="Issue 29's rules one at a time (Spotline; ratios to the best peer in the sample)")
    columns = ("sample", "configuration", "lost GPU-h", "crit / high p99 wait (min)", "avg / low JCT (h)")
    for column in columns:
        table.add_column(column)
    saved: dict[str, Any] = {}
    for sample in samples:
        peers = run_contended(sample, pb.PEERS)
        lost_goal, wait_goal = GOALS[0], GOALS[1]
        saved[sample.label] = {}
        for name, config in STEPS.items():
            m = run_contended(sample, ["spotline"], config=config, workers=1)["spotline"]
            runs = {**peers, "spotline": m}
            saved[sample.label][name] = m
            lost_ratio = judge(lost_goal, runs)[0]
            wait = m["wait_p99_s_by_priority"]
            jct = m["avg_jct_s_by_priority"]
            table.add_row(
                sample.label,
                name,
                f"{m['lost_gpu_hours']:.1f} (x{lost_ratio:.2f})",
                f"{wait['critical'] / 60:.1f} / {wait['high'] / 60:.1f} ({judge(wait_goal, runs)[2]})",
                f"{m['avg_jct_s'] / 3600:.2f} / {jct['low'] / 3600:.2f}",
            )
    console.print(table)
    return saved


def steps_record(saved: dict[str, Any]) -> dict[str, Any]:
    """What `--steps --json` writes (bench/data/contention_tuning.json): per sample and step, the
    figures the choice read, and the step the defaults are."""
    chosen = next(name for name, config in STEPS.items() if config == SchedulerConfig())
    rows = {
        sample: {
            name: {
                "lost_gpu_hours": m["lost_gpu_hours"],
                "preemptions": m["preemptions"],
                "wait_p99_s_by_priority": m["wait_p99_s_by_priority"],
                "avg_jct_s": m["avg_jct_s"],
                "avg_jct_s_by_priority": m["avg_jct_s_by_priority"],
                "cost_per_useful_gpu_hour": m["cost_per_useful_gpu_hour"],
            }
            for name, m in steps.items()
        }
        for sample, steps in saved.items()
    }
    return {"command": "python -m bench.contention --tuning --steps", "defaults": chosen, "samples": rows}


def _saved_runs(path: Path | None) -> dict[str, dict[str, dict[str, Any]]]:
    """The evaluation's runs policy_bench saved, by sample label (none without a file, or with
    an unreadable one: then every sample is simulated here). The same simulations, since a run
    is deterministic wherever it runs (`policy_bench.runs.run_many`)."""
    if path is None:
        return {}
    try:
        saved: dict[str, dict[str, dict[str, Any]]] = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        print(f"(--evaluation-runs {path}: {error}; simulating the evaluation set again)", flush=True)
        return {}
    return {label: runs for label, runs in saved.items() if set(pb.EVAL_POLICIES) <= set(runs)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.contention", description=__doc__.split("\n")[0])
    parser.add_argument("--contended-only", action="store_true", help="the contended samples alone")
    parser.add_argument("--tuning", action="store_true", help="the tuning set's contended counterparts")
    parser.add_argument("--synthetic-only", action="store_true", help="leave the Philly samples out")
    parser.add_argument("--json", type=Path, default=None, help="write the contended samples' metrics here")
    parser.add_argument(
        "--steps", action="store_true", help="Spotline with issue 29's rules in turn (with --tuning)"
    )
    parser.add_argument(
        "--evaluation-runs",
        type=Path,
        default=None,
        metavar="FILE",
        help="the evaluation set's runs as `bench.policy_bench --save-evaluation FILE` wrote them"
        " (`make bench`: simulated once, for both); samples missing there are simulated",
    )
    args = parser.parse_args(argv)
    console = Console(width=max(Console().width, 200))
    began = time.perf_counter()
    contended = available(CONTENDED_TUNING if args.tuning else CONTENDED_EVALUATION)
    per_contended = []
    if args.synthetic_only:
        contended = [s for s in contended if s.kind != "philly"]
    if args.steps:
        steps = run_steps(contended, console)
        if args.json is not None:
            args.json.write_text(json.dumps(steps_record(steps), indent=1) + "\n")
        console.print(f"contention bench (steps): {time.perf_counter() - began:.0f} s wall")
        return 0
    saved: dict[str, Any] = {}
    for sample in contended:
        runs = run_contended(sample)
        runs[VARIANT] = run_contended(sample, ["spotline"], config=BEFORE, workers=1)["spotline"]
        per_contended.append(runs)
        saved[sample.label] = runs
        print_accounts(sample.label, runs, console)
        print_accounts(f"{sample.label}, {VARIANT}", with_variant(runs), console)
    labels = [s.label for s in contended]
    print_goals("Goals on the contended samples (issue 29)", labels, per_contended, console)
    print_goals(f"The same goals, {VARIANT}", labels, [with_variant(r) for r in per_contended], console)
    if args.json is not None:
        args.json.write_text(json.dumps(saved))
    if not args.contended_only and not args.tuning:
        plain = pb.available(pb.EVALUATION)
        done = _saved_runs(args.evaluation_runs)
        per_plain = [done.get(s.label) or pb_runs.run_sample(s, pb.EVAL_POLICIES) for s in plain]
        print_goals(
            "Goals on the whole evaluation set (policy_bench's samples and the contended ones)",
            [s.label for s in plain] + labels,
            per_plain + per_contended,
            console,
        )
    console.print(f"contention bench: {time.perf_counter() - began:.0f} s wall")
    return 0


if __name__ == "__main__":
    sys.exit(main())
