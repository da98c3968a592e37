"""Where Spotline's replay of the whole Philly trace spends its time (not part of `make bench`).

The speed goal (the whole trace through all five policies in 120 s) is bound by Spotline's replay,
one `plan()` per scheduling pass. This replays the whole trace (seed 1) once with the simulator's
Spotline adapter instrumented, without changing what it does, and prints:

1. the passes by what started them (job finished, job left after a preemption or a Spot notice,
   arrival, periodic tick), how many of them decided anything (an admission or a preemption),
   and the time they took;
2. `plan()` alone on every `--every`-th pass (its snapshot and queue kept), timed again with a
   window of 8 to 256 jobs per class: what one pass costs as a function of how many queued jobs
   it reads.

Run: `.venv/bin/python -m bench.pass_costs [--every 500]` (about 5 minutes).
"""

from __future__ import annotations

import argparse
import collections
import pickle
import random
import time
from typing import Any

from bench.policy_bench import WHOLE_END, WHOLE_START, philly_path
from spotline.domain import Admit, Preempt, SchedulerConfig
from spotline.domain.planner import plan_with_stats
from spotline.sim import engine, simulate
from spotline.sim import spotline_policy as adapter
from spotline.trace import parse_when, read_philly

WINDOWS = (8, 32, 64, 128, 256)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=500, help="keep the inputs of every N-th pass")
    args = parser.parse_args(argv)
    if args.every <= 0:
        parser.error("--every must be a positive number of passes")

    causes: set[str] = set()
    by_cause: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0, 0.0])
    samples: list[tuple[Any, Any, float, SchedulerConfig, tuple[Any, ...]]] = []
    acted = [False]
    count = [0]

    def note(cause: str, original: Any) -> Any:
        def wrapped(self: Any, *a: Any) -> Any:
            causes.add(cause)
            return original(self, *a)

        return wrapped

    simulation = engine.Simulation
    originals = {
        "_on_finish": simulation._on_finish,
        "_on_leave": simulation._on_leave,
        "_on_reclaim": simulation._on_reclaim,
    }
    simulation._on_finish = note("finish", originals["_on_finish"])  # type: ignore[method-assign]
    simulation._on_leave = note("leave", originals["_on_leave"])  # type: ignore[method-assign]
    simulation._on_reclaim = note("spot notice", originals["_on_reclaim"])  # type: ignore[method-assign]
    on_pending, schedule, plan = (
        adapter.SpotlinePolicy.on_pending,
        adapter.SpotlinePolicy.schedule,
        adapter.plan,
    )

    def pending(self: Any, job: Any) -> bool:
        starts_pass = on_pending(self, job)
        if starts_pass and self.sim.now == job.submit:
            causes.add("arrival")
        return starts_pass

    def planned(
        snapshot: Any, queue: Any, now: float, config: SchedulerConfig, rng: random.Random, **options: Any
    ) -> Any:
        count[0] += 1
        if count[0] % args.every == 0:
            # The queue changes after the pass: keep it as it was.
            samples.append((snapshot, pickle.loads(pickle.dumps(queue)), now, config, rng.getstate()))
        decisions = plan(snapshot, queue, now, config, rng, **options)
        acted[0] = acted[0] or any(isinstance(d, Admit | Preempt) for d in decisions)
        return decisions

    def scheduled(self: Any, now: float) -> None:
        cause = "+".join(sorted(causes)) or "tick"
        causes.clear()
        acted[0] = False
        began = time.perf_counter()
        schedule(self, now)
        row = by_cause[cause]
        row[0] += 1
        row[1] += acted[0]
        row[2] += time.perf_counter() - began

    adapter.SpotlinePolicy.on_pending = pending  # type: ignore[method-assign]
    adapter.SpotlinePolicy.schedule = scheduled  # type: ignore[method-assign]
    adapter.plan = planned  # type: ignore[assignment]
    try:
        path = philly_path()
        if path is None:
            raise SystemExit("the Philly trace is missing (bench/data/philly.csv.gz or ../shared/traces)")
        trace = read_philly(path, parse_when(WHOLE_START), parse_when(WHOLE_END, end=True), 1)
        report = simulate(trace, ["spotline"], gpus=512, seed=1, trace_name="philly (whole)", workers=1)
    finally:
        for name, original in originals.items():
            setattr(simulation, name, original)
        adapter.SpotlinePolicy.on_pending = on_pending  # type: ignore[method-assign]
        adapter.SpotlinePolicy.schedule = schedule  # type: ignore[method-assign]
        adapter.plan = plan
    run = report.runs["spotline"]
    print(f"spotline, whole trace: {run.wall_s:.1f} s (instrumented), {run.passes:,} passes")
    print(f"{'started by':32} {'passes':>8} {'decided':>8} {'time (s)':>9}")
    for cause, (passes, decided, seconds) in sorted(by_cause.items(), key=lambda kv: -kv[1][0]):
        print(f"{cause:32} {int(passes):>8,} {int(decided) / passes:>8.0%} {seconds:>9.1f}")

    print(f"\nplan() on {len(samples)} passes (every {args.every}th), ms per pass by window per class:")
    for window in WINDOWS:
        total = 0.0
        for snapshot, queue, now, config, state in samples:
            rng = random.Random()
            began = time.perf_counter()
            for _ in range(3):
                rng.setstate(state)
                plan_with_stats(snapshot, queue, now, config, rng, window_per_class=window)
            total += (time.perf_counter() - began) / 3
        print(f"  window {window:>3}: {1000 * total / max(1, len(samples)):.3f} ms")


if __name__ == "__main__":
    main()
