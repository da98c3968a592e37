"""The deadline guard's plan in a scheduling pass: what a pass costs with many deadline jobs that
ask it, and how many plans it solves.

Two passes on a snapshot whose Spot pool has 14 days of flapping history (`PoolWatch` fed a
deterministic pattern of spells and outages of 10 minutes to 3 hours):

- **spot-missing**: Spot missing now (for 30 minutes), N pending deadline jobs (8 GPUs, 10-48 h
  declared, deadlines 1.2-3x their runtime after submission, submitted up to 6 h ago): each asks
  the plan in placement (`placement.spot_refusal`), and again when admitted On-Demand (the
  admission's "not Spot" reason); a 256-GPU On-Demand pool admits 32 of them.
- **spot-back**: Spot there, N deadline jobs running On-Demand and the Spot pool empty:
  `moves.moves_to_spot` asks the plan for each with at least `move_to_spot_min_remaining_s` (a
  day) left (may it return to Spot?).

And `explain`'s start forecast for the spot-missing job with the latest deadline (it replays the
pass three times, one per run-time scale).

For N in 50 and 200, each pass is timed `--repeat` times (median ms per pass), with the plan
(at `deadline_plans_per_pass`'s default, and unbounded), and without it (budget 0: the guard's
rules alone); the plans solved per pass are counted by wrapping `DeadlinePlan.solve` (a job whose
grid is beyond `PLAN_NOW_MAX_CELLS` raises before solving, in ~2 ms, and is not counted).

    .venv/bin/python -m bench.plan_pass_deadlines [--jobs 50,200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from spotline.domain import (
    Allocation,
    ClusterSnapshot,
    Job,
    JobSpec,
    JobState,
    Pool,
    Priority,
    Purchase,
    SchedulerConfig,
    SortedQueue,
    deadline_plan,
    plan,
)
from spotline.domain.forecast import forecast_start
from spotline.domain.models import SpotPoolSignal
from spotline.domain.spot_watch import PoolWatch

NOW = 1_704_067_200.0  # 2024-01-01T00:00:00Z
H = 3600.0
STEP_S = 600.0  # the history's observations: every 10 minutes
SPOT = "a100-spot"
ON_DEMAND = "a100-on-demand"


def history(now: float, *, missing_for_s: float) -> SpotPoolSignal:
    """14 days of a flapping pool (spells and outages of 1 to 18 steps of 10 minutes, from a
    fixed linear congruential sequence), ending with Spot missing for `missing_for_s` (or there,
    when 0)."""
    steps = int(14 * 24 * H / STEP_S)
    seen: list[bool] = []
    up, x = True, 12345
    while len(seen) < steps:
        x = (x * 1103515245 + 12345) % 2**31
        seen += [up] * (1 + x % 18)
        up = not up
    seen = seen[:steps]
    tail = int(missing_for_s // STEP_S)
    seen = seen[: steps - tail] + [False] * tail if tail else [*seen[:-1], True]
    start = now - steps * STEP_S
    watch = PoolWatch.first(seen[0], start)
    for i, available in enumerate(seen[1:], start=1):
        watch = watch.observe(available, start + i * STEP_S) or watch
    return watch.signal(now)


def deadline_job(i: int, rng: random.Random, *, state: JobState = JobState.PENDING) -> Job:
    runtime = rng.uniform(10, 48) * H
    submitted = NOW - rng.uniform(0, 6) * H
    deadline = submitted + runtime * rng.uniform(1.2, 3.0)
    spec = JobSpec(
        name=f"d{i}",
        priority=Priority.NORMAL,
        gpus=8,
        image="spotline/train:latest",
        command=["python", "train.py"],
        deadline=datetime.fromtimestamp(deadline, tz=UTC),
        expected_runtime_s=runtime,
    )
    fields: dict[str, Any] = {}
    if state is JobState.RUNNING:
        fields = {"state": state, "started_at": submitted + 600.0, "progress": 0.1}
    return Job(id=f"d{i:04d}", team="a", spec=spec, submitted_at=submitted, enqueued_at=submitted, **fields)


def scenario(name: str, n: int) -> tuple[ClusterSnapshot, list[Job]]:
    rng = random.Random(n)
    spot = Pool(
        name=SPOT,
        gpu_type="a100",
        purchase=Purchase.SPOT,
        capacity_gpus=8 * 2 * n,
        gpus_per_node=8,
        price=0.35,
    )
    if name == "spot-missing":
        od = Pool(
            name=ON_DEMAND, gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=256, gpus_per_node=8
        )
        signal = history(NOW, missing_for_s=1800.0)
        pending = [deadline_job(i, rng) for i in range(n)]
        return ClusterSnapshot.build([spot, od], spot={SPOT: signal}), pending
    od = Pool(
        name=ON_DEMAND, gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=8 * n, gpus_per_node=8
    )
    signal = history(NOW, missing_for_s=0.0)
    running = [deadline_job(i, rng, state=JobState.RUNNING) for i in range(n)]
    allocations = [Allocation(job=j.with_changes(pool=ON_DEMAND), pool=ON_DEMAND, gpus=8) for j in running]
    return ClusterSnapshot.build([spot, od], allocations, spot={SPOT: signal}), []


def counting_solves() -> tuple[list[int], Callable[[], None]]:
    """Counts the plans solved (`DeadlinePlan.solve` calls that return: a grid beyond the cap
    raises before solving); returns the counter and an undo."""
    original = deadline_plan.DeadlinePlan.solve
    count = [0]

    def solve(*args: Any, **kwargs: Any) -> deadline_plan.DeadlinePlan:
        solved = original(*args, **kwargs)  # a grid too large raises: not counted
        count[0] += 1
        return solved

    deadline_plan.DeadlinePlan.solve = solve  # type: ignore[method-assign]

    def undo() -> None:
        deadline_plan.DeadlinePlan.solve = original  # type: ignore[method-assign]

    return count, undo


def settings(budget: int | str | None) -> SchedulerConfig:
    # the policy's defaults, but for the protection period and the preemption delay: the pass's
    # moves see every running job
    base: dict[str, Any] = {"protection_period_s": 0.0, "preemption_delay_s": 0.0}
    if budget in {"default", "patched"}:
        return SchedulerConfig(**base)
    if "deadline_plans_per_pass" not in SchedulerConfig.model_fields:
        if budget is not None:
            raise SystemExit("this commit has no deadline_plans_per_pass: run with --before")
        return SchedulerConfig(**base)
    return SchedulerConfig(**base, deadline_plans_per_pass=budget)


def measure(name: str, n: int, budget: int | str | None, repeat: int) -> tuple[float, int, int]:
    """(median ms per pass, plans solved per pass, decisions) for one scenario and budget."""
    snapshot, pending = scenario(name, n)
    queue = SortedQueue.of(pending)
    config = settings(budget)
    count, undo = counting_solves()
    planner = deadline_plan.plan_now
    if budget == "patched":  # a commit without the budget: no plan, by patching it out
        deadline_plan.plan_now = lambda *args, **kwargs: None
    times: list[float] = []
    solves: list[int] = []
    decided = 0
    try:
        for _ in range(repeat):
            count[0] = 0
            started = time.perf_counter()
            decisions = plan(snapshot, queue, NOW, config, random.Random(0))
            times.append((time.perf_counter() - started) * 1000.0)
            solves.append(count[0])
            decided = len(decisions)
    finally:
        undo()
        deadline_plan.plan_now = planner
    return statistics.median(times), max(solves), decided


def measure_forecast(n: int, budget: int | str | None) -> tuple[float, int]:
    """(seconds, plans solved) of `explain`'s start forecast (`forecast.forecast_start`: three
    replays of the pass, one per run-time scale) for the latest deadline of spot-missing's N."""
    snapshot, pending = scenario("spot-missing", n)
    target = max(pending, key=lambda j: (j.spec.deadline_at or 0.0, j.id)).id
    count, undo = counting_solves()
    planner = deadline_plan.plan_now
    if budget == "patched":
        deadline_plan.plan_now = lambda *args, **kwargs: None
    try:
        started = time.perf_counter()
        forecast_start(target, snapshot, pending, NOW, settings(budget), random.Random(0))
        return time.perf_counter() - started, count[0]
    finally:
        undo()
        deadline_plan.plan_now = planner


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default="50,200", help="deadline jobs per pass, comma-separated")
    parser.add_argument("--repeat", type=int, default=3, help="passes timed per row (median)")
    parser.add_argument("--before", action="store_true", help="a commit without deadline_plans_per_pass")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.jobs.split(",") if s]
    if args.before and "deadline_plans_per_pass" in SchedulerConfig.model_fields:
        raise SystemExit("--before is for a commit without deadline_plans_per_pass (its plan is patched out)")
    budgets: list[tuple[str, int | str | None]] = [("plan, unbounded", None), ("no plan", "patched")]
    if not args.before:
        budgets = [("plan, default budget", "default"), ("plan, unbounded", None), ("no plan (budget 0)", 0)]
    print("| pass | deadline jobs | plan | ms per pass (median) | plans solved | decisions |")
    print("|---|---:|---|---:|---:|---:|")
    for name in ("spot-missing", "spot-back"):
        for n in sizes:
            for label, budget in budgets:
                ms, solved, decided = measure(name, n, budget, args.repeat)
                print(f"| {name} | {n} | {label} | {ms:,.0f} | {solved} | {decided} |", flush=True)
    print()
    print("| explain's start forecast, spot-missing | deadline jobs | plan | seconds | plans solved |")
    print("|---|---:|---|---:|---:|")
    for n in sizes:
        for label, budget in budgets:
            seconds, solved = measure_forecast(n, budget)
            print(f"| latest deadline | {n} | {label} | {seconds:.1f} | {solved} |", flush=True)


if __name__ == "__main__":
    main()
