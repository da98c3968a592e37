"""Invariants on a random trace with Spot reclaims, for every policy: capacity is never exceeded,
completed jobs' useful GPU-seconds equal their trace work, and the same seed gives the same output."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from typing import Any

import pytest

from spotline.domain.models import Pool, Purchase
from spotline.sim import POLICIES, Simulation, runner, simulate
from spotline.sim.engine import PoolState
from spotline.sim.model import Phase, SimJob
from spotline.trace import Trace

from .helpers import SETTINGS, trace

# Reclaims every ~half hour per instance, so a short trace sees many.
POOLS = [
    Pool(
        name="spot",
        gpu_type="a100",
        purchase=Purchase.SPOT,
        capacity_gpus=24,
        price=0.3,
        interruption_rate_per_hour=2.0,
    ),
    Pool(name="on-demand", gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=16),
]


def random_trace(seed: int, jobs: int = 160) -> Trace:
    rng = random.Random(seed)
    rows = []
    t = 0.0
    for i in range(jobs):
        t += rng.expovariate(1 / 120.0)
        gpus = rng.choice([1, 1, 1, 2, 4, 8, 12, 16])
        rows.append(
            (
                f"j{i:03d}",
                round(t),
                rng.choice([60.0, 600.0, 1800.0, 5400.0, 14400.0]),
                gpus,
                rng.choice("abc"),
                rng.choice(["critical", "high", "high", "normal", "low", "low"]),
            )
        )
    return trace(rows)


@pytest.fixture(scope="module")
def workload() -> Trace:
    return random_trace(11)


class CheckedSimulation(Simulation):
    """Checks the pools' books after every start (the only way GPUs are taken), and that no
    multi-node job starts on Spot (AWS Batch runs none there)."""

    def start(self, job: SimJob, ps: PoolState, reason: str = "") -> None:
        assert job.nodes == 1 or not ps.is_spot, f"gang job {job.id} started on Spot"
        super().start(job, ps, reason)
        # (Another pool may hold more than its capacity for the 2 minutes that the jobs on
        # instances a shortage withdrew take to leave; no start may add to it.)
        assert ps.used <= ps.capacity
        for pool in self.pools:
            assert pool.used >= 0
            assert pool.used == sum(j.held for j in pool.running.values())


@pytest.mark.parametrize("policy", POLICIES)
def test_capacity_work_and_accounting(policy: str, workload: Trace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("spotline.sim.runner.Simulation", CheckedSimulation)
    result = simulate(workload, [policy], seed=5, settings=SETTINGS, pools=POOLS).runs[policy]
    assert result.metrics["completed"] == len(workload.jobs)
    assert result.metrics["interruptions"] > 0
    for job in result.jobs:
        assert job.phase is Phase.DONE
        assert job.useful_gpu_s == pytest.approx(job.gpus * job.work)
        assert job.lost_gpu_s >= -1e-6
        assert job.first_start is not None and job.finish is not None
        assert job.submit <= job.first_start <= job.finish
        assert job.finish - job.first_start >= job.work - 1e-6
    # The JCT floor: every job's mean run time, which no policy's average JCT goes below.
    metrics = result.metrics
    assert metrics["avg_run_s"] == pytest.approx(sum(j.work for j in result.jobs) / len(result.jobs))
    assert metrics["avg_run_s"] <= metrics["avg_jct_s"] + 1e-6
    held = sum(run_time_held(job) for job in result.jobs)
    assert held > 0
    assert result.metrics["goodput"] <= 1.0 + 1e-9
    assert 0.0 < result.metrics["gpu_utilization"] <= 1.0 + 1e-9


@pytest.mark.parametrize("policy", [*POLICIES, "kueue-fair"])
def test_capacity_and_work_with_spot_capacity_shortages(
    policy: str, workload: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Shortages (about 4 a day, half the Spot pool, 2 h on average) on top of the reclaims:
    every start still fits the pool's current capacity, and every job completes its work."""
    monkeypatch.setattr("spotline.sim.runner.Simulation", CheckedSimulation)
    settings = replace(SETTINGS, shortage_rate_per_day=4.0, shortage_mean_h=2.0)
    result = simulate(workload, [policy], seed=5, settings=settings, pools=POOLS).runs[policy]
    assert result.metrics["completed"] == len(workload.jobs)
    for job in result.jobs:
        assert job.useful_gpu_s == pytest.approx(job.gpus * job.work)


def run_time_held(job: SimJob) -> float:
    return job.useful_gpu_s + job.lost_gpu_s


def test_same_seed_same_output_and_every_policy_sees_the_same_reclaims(workload: Trace) -> None:
    first = simulate(workload, seed=5, settings=SETTINGS, pools=POOLS)
    again = simulate(workload, seed=5, settings=SETTINGS, pools=POOLS)
    assert json.dumps(first.to_json(), sort_keys=True) == json.dumps(again.to_json(), sort_keys=True)
    other = simulate(workload, seed=6, settings=SETTINGS, pools=POOLS)
    assert json.dumps(first.to_json(), sort_keys=True) != json.dumps(other.to_json(), sort_keys=True)
    # Restart costs are drawn per job from the seed: the same for every policy.
    restarts = {name: [j.restart for j in run.jobs] for name, run in first.runs.items()}
    assert all(r == restarts["fifo"] for r in restarts.values())


def test_the_reclaim_times_do_not_depend_on_the_policy(
    workload: Trace, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[str, list[float]] = {}

    class Recording(Simulation):
        def _on_reclaim(self, payload: Any, instance: int) -> None:
            seen.setdefault(self.policy.name, []).append(self.now)
            super()._on_reclaim(payload, instance)

    monkeypatch.setattr("spotline.sim.runner.Simulation", Recording)
    simulate(workload, seed=5, settings=SETTINGS, pools=POOLS)
    horizon = min(times[-1] for times in seen.values())
    common = [[t for t in times if t <= horizon] for times in seen.values()]
    assert all(times == common[0] for times in common)
    assert len(common[0]) > 5


def test_policies_in_parallel_processes_give_the_same_report(workload: Trace) -> None:
    alone = simulate(workload, seed=5, settings=SETTINGS, pools=POOLS)
    together = simulate(workload, seed=5, settings=SETTINGS, pools=POOLS, workers=2)
    assert json.dumps(alone.to_json(), sort_keys=True) == json.dumps(together.to_json(), sort_keys=True)
    assert [len(run.jobs) for run in together.runs.values()] == [len(workload.jobs)] * len(together.runs)
    # Without the jobs' records, the metrics are the same: they are computed in the workers.
    lean = simulate(workload, seed=5, settings=SETTINGS, pools=POOLS, workers=2, keep_jobs=False)
    assert json.dumps(lean.to_json(), sort_keys=True) == json.dumps(alone.to_json(), sort_keys=True)
    assert all(run.jobs == [] for run in lean.runs.values())
    assert runner._FORKED_INPUTS is None  # not kept after the runs
