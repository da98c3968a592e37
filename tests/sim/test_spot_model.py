"""The Spot model's capacity shortages, hand-computed on one pool of two instances."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from spotline.domain.models import Pool, Purchase
from spotline.sim import simulate

from .helpers import SETTINGS, by_id, trace

SPOT = Pool(name="spot", gpu_type="a100", purchase=Purchase.SPOT, capacity_gpus=16, price=0.3)
SHORTAGES = replace(SETTINGS, shortage_rate_per_day=2.0, shortage_mean_h=1.0)


def _first_shortage(seed: int) -> tuple[float, float]:
    """When the engine's seeded process starts the pool's first shortage, and how long it
    lasts (the engine draws the start, then at the start the duration)."""
    rng = random.Random(f"spotline-sim:{seed}:shortage:spot")
    start = rng.expovariate(2.0 / 86400.0)
    return start, rng.expovariate(1.0 / 3600.0)


@pytest.mark.parametrize("policy", ["spotline", "fifo", "kueue", "slurm"])
def test_a_shortage_withdraws_half_the_pool_its_jobs_leave_and_wait_for_the_capacity(policy: str) -> None:
    # Two 8-GPU jobs fill the two instances; the shortage withdraws one instance (the last in
    # packing order: "b", started second). "b" checkpoints inside the notice (50 s write), leaves,
    # and cannot start again until the shortage ends (no launch finds capacity meanwhile); then it
    # restarts (100 s) and runs what it had left. "a" is not touched.
    # Seed 4: the shortage starts at 5,580 s and lasts 3,515 s; the next one is 23,734 s later.
    seed = 4
    start, duration = _first_shortage(seed)
    work = start + duration + 5000.0
    rows = [("a", 0.0, work, 8, "t", "normal"), ("b", 1.0, work, 8, "t", "normal")]
    result = simulate(trace(rows), [policy], seed=seed, settings=SHORTAGES, pools=[SPOT]).runs[policy]
    jobs = by_id(result)
    assert jobs["a"].interruptions == 0
    assert jobs["a"].finish == pytest.approx(work)
    b = jobs["b"]
    assert b.interruptions == 1
    kept = start - 1.0
    assert b.finish == pytest.approx(start + duration + 100.0 + (work - kept))
    assert b.queued_s == pytest.approx(start + duration - (start + 50.0))


def test_without_shortages_nothing_is_withdrawn() -> None:
    rows = [("a", 0.0, 50000.0, 8, "t", "normal"), ("b", 1.0, 50000.0, 8, "t", "normal")]
    result = simulate(trace(rows), ["spotline"], seed=2, settings=SETTINGS, pools=[SPOT]).runs["spotline"]
    assert result.metrics["interruptions"] == 0


def test_a_kueue_preemptor_whose_victims_cover_it_proceeds_while_a_shortage_overcommits_the_pool() -> None:
    # Regression: while the jobs on withdrawn instances leave, the pool's free GPUs are below 0;
    # a Kueue preemptor whose victims cover its whole demand counts on none of them and must not
    # be refused (it was, with "counts on 0 free GPUs, ... has -2", in this trace).
    from spotline.sim.pools import build_pools, spot_advice
    from spotline.trace import Trace
    from spotline.trace.synth import synth_trace

    workload = Trace(jobs=synth_trace(1200, 0.85, 128, 4), source="synth")
    advice = spot_advice()
    pools = build_pools(128, 0.75, advice)
    settings = replace(SETTINGS, shortage_rate_per_day=1.0, shortage_share=0.5, shortage_mean_h=4.0)
    settings = replace(settings, checkpoint_interval_s=1800.0, checkpoint_write_s=60.0)
    result = simulate(workload, ["kueue-classic"], seed=4, settings=settings, pools=pools).runs[
        "kueue-classic"
    ]
    assert result.metrics["completed"] == 1200


def test_the_next_checkpoint_is_always_after_now_despite_rounding() -> None:
    # Regression: here `t - origin` rounds to just below 19 intervals while origin + 19 intervals
    # rounds back to `t`; the next checkpoint came out equal to `t`, and the Spotline adapter,
    # which re-arms its checkpoint timer at the next checkpoint after now, looped forever
    # (`make bench`'s churn sweep hung at "high churn + shortages").
    from spotline.domain.models import Priority
    from spotline.sim.model import SimJob

    start, overhead = 43756.20746753772, 128.41077979099006
    job = SimJob(
        idx=0,
        id="x",
        submit=0.0,
        work=1e9,
        gpus=1,
        nodes=1,
        team="t",
        priority=Priority.LOW,
        rank=0,
        deadline=None,
        spot_ok=True,
        gpu_type=None,
        interval=1800.0,
        write=60.0,
        restart=overhead,
        run_start=start,
        run_overhead=overhead,
    )
    t = start + overhead + 60.0 + 19 * 1800.0
    assert t == 78144.6182473287
    assert job.next_checkpoint_at(t) > t
