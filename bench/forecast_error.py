"""How far off is `explain`'s estimated start? Measured on a trace replay in the simulator.

The Spotline policy replays a window of the Philly trace; at regular times of the replay, the
forecast (`spotline.domain.forecast`, what `GET /jobs/{id}/explain` runs) predicts the start of a
few pending jobs from what the control plane would see then (the running jobs and the queue); at
the end, each prediction is compared with when the job actually started. Jobs submitted later
and Spot interruptions are in the replay but not in the forecast, as in production.

`--runtimes exact`: every job declares its true run time (`expected_runtime_s` = the trace's
duration), the best case; `--runtimes none`: no job declares one, so the forecast assumes the
scheduler's `DEFAULT_RUNTIME_S` (1 h) for each, the worst case.

    .venv/bin/python -m bench.forecast_error --days 2 --every-h 2 --per-sample 6

Not a test: it prints the median absolute error, its quartiles, the share of "unknown", and how
often the actual start fell inside the band.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from bench.policy_bench import philly_path
from spotline.domain import ClusterSnapshot, Job, SchedulerConfig
from spotline.domain.forecast import forecast_start
from spotline.domain.planner import Admit
from spotline.sim.engine import Simulation
from spotline.sim.model import SimSettings, TeamShares, build_jobs, team_shares
from spotline.sim.pools import GPUS_PER_NODE, build_pools, spot_advice
from spotline.sim.spotline_policy import SpotlinePolicy
from spotline.trace.philly import read_philly


@dataclass
class Sample:
    job_id: str
    at: float
    predicted: float | None
    earliest: float | None
    latest: float | None


class ForecastingPolicy(SpotlinePolicy):
    """Spotline's policy, forecasting a few pending jobs' starts every `every_s`."""

    def __init__(
        self,
        config: SchedulerConfig,
        shares: TeamShares,
        settings: SimSettings,
        seed: int,
        *,
        every_s: float,
        per_sample: int,
        work: dict[str, float] | None,
        warmup_s: float = 0.0,
    ) -> None:
        super().__init__(config, shares, settings, seed)
        self.every_s = every_s
        self.per_sample = per_sample
        self.work = work  # the true run times to declare (None: declare none)
        self.samples: list[Sample] = []
        self.starts: dict[str, list[float]] = {}
        self.forecast_wall_s = 0.0
        self._next = warmup_s
        self._pick = random.Random(7)

    def declared(self, job: Job) -> Job:
        if self.work is None:
            return job
        spec = job.spec.model_copy(update={"expected_runtime_s": self.work[job.id]})
        return job.model_copy(update={"spec": spec})

    def schedule(self, now: float) -> None:
        if now >= self._next and len(self.queue):
            self._next = now + self.every_s
            self._refresh_checkpoints(now)
            self._forecast(now)
        super().schedule(now)

    def _forecast(self, now: float) -> None:
        began = time.perf_counter()
        pending = [self.declared(job) for entries in self.queue.by_class.values() for _, job in entries]
        allocations = [a.model_copy(update={"job": self.declared(a.job)}) for a in self.running.allocations()]
        snapshot = ClusterSnapshot.model_construct(
            pools=self._pools,
            allocations=tuple(allocations),
            quotas=self.quotas,
            usage_gpu_hours=self.usage.gpu_hours(now),
        )
        for job in self._pick.sample(pending, min(self.per_sample, len(pending))):
            forecast = forecast_start(
                job.id, snapshot, pending, now, self.config, random.Random(1), leave_s=120.0
            )
            self.samples.append(Sample(job.id, now, forecast.at, forecast.earliest, forecast.latest))
        self.forecast_wall_s += time.perf_counter() - began

    def _admit(self, decision: Admit, now: float) -> None:
        self.starts.setdefault(decision.job.id, []).append(now)
        super()._admit(decision, now)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", default="2017-10-16", help="first day of the Philly window (UTC)")
    parser.add_argument("--days", type=float, default=2.0)
    parser.add_argument("--gpus", type=int, default=512)
    parser.add_argument("--every-h", type=float, default=2.0, help="hours of replay between samples")
    parser.add_argument("--per-sample", type=int, default=6, help="pending jobs forecast per sample")
    parser.add_argument(
        "--warmup-h", type=float, default=24.0, help="hours of replay before the first sample"
    )
    parser.add_argument("--runtimes", choices=["exact", "none"], default="exact")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    start = datetime.fromisoformat(args.start).replace(tzinfo=UTC)
    path = philly_path()
    if path is None:
        raise SystemExit("the Philly trace is missing (bench/data/philly.csv.gz)")
    trace = read_philly(path, start, start + timedelta(days=args.days), seed=args.seed)
    settings = SimSettings()
    pools = build_pools(args.gpus, 0.75, spot_advice())
    shares = team_shares(trace.jobs, {p.name: p.capacity_gpus for p in pools})
    jobs = build_jobs(trace.jobs, settings, args.seed, GPUS_PER_NODE)
    policy = ForecastingPolicy(
        SchedulerConfig(),
        shares,
        settings,
        args.seed,
        every_s=args.every_h * 3600.0,
        per_sample=args.per_sample,
        work={j.id: j.work for j in jobs} if args.runtimes == "exact" else None,
        warmup_s=args.warmup_h * 3600.0,
    )
    began = time.perf_counter()
    Simulation(jobs, pools, policy, settings, args.seed).run()
    wall = time.perf_counter() - began

    compared: list[tuple[float, float, bool]] = []  # (error, actual wait, inside the band)
    unknown = never = 0
    for sample in policy.samples:
        actual = next((t for t in policy.starts.get(sample.job_id, []) if t >= sample.at), None)
        if actual is None:
            never += 1
            continue
        if sample.predicted is None:
            unknown += 1
            continue
        band = sample.earliest is not None and sample.latest is not None
        inside = band and sample.earliest <= actual <= sample.latest  # type: ignore[operator]
        compared.append((abs(sample.predicted - actual), actual - sample.at, bool(inside)))
    print(
        f"Philly {args.start} + {args.days:g} d ({args.warmup_h:g} h warm-up), {len(trace.jobs)} jobs,"
        f" {args.gpus} GPUs (75% Spot), seed {args.seed}, runtimes declared: {args.runtimes}"
    )
    print(
        f"forecasts: {len(policy.samples)}; compared: {len(compared)}; unknown: {unknown};"
        f" never started in the replay: {never}"
    )
    for label, subset in (
        ("all", compared),
        ("waited >= 5 min", [c for c in compared if c[1] >= 300]),
    ):
        if not subset:
            continue
        errors = [c[0] for c in subset]
        q = statistics.quantiles(errors, n=4) if len(errors) > 1 else [errors[0]] * 3
        waits = statistics.median(c[1] for c in subset)
        inside = sum(1 for c in subset if c[2])
        print(
            f"{label} ({len(subset)}; median actual wait {waits / 60:.1f} min): median absolute error"
            f" {statistics.median(errors) / 60:.1f} min (quartiles {q[0] / 60:.1f} / {q[2] / 60:.1f}),"
            f" inside the band {inside}/{len(subset)}"
        )
    print(f"wall: {wall:.0f} s (forecasts {policy.forecast_wall_s:.0f} s)")


if __name__ == "__main__":
    main()
