"""The contended benches' loss metrics and the peer setups added for them, on hand-computed
scenarios: moves apart from preemptions, churn and priced loss; Kueue's LowerPriority reclaim,
Slurm's PreemptExemptTime, SkyPilot with and without fallback, AWS Batch's fair share."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotline.domain.models import Pool, Purchase
from spotline.sim import simulate
from spotline.sim.model import PeerKnobs

from .helpers import SETTINGS, before, by_id, run, trace, waits
from .test_policies import AT_ONCE

SPOT_POOLS = [
    Pool(name="spot", gpu_type="a100", purchase=Purchase.SPOT, capacity_gpus=8, price=0.3),
    Pool(name="on-demand", gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=8),
]


def test_preemption_churn_and_priced_loss_of_a_stop_for_another_job() -> None:
    metrics = run(AT_ONCE, "spotline").metrics
    # j1 loses 60 s of work and a 100 s restart on 8 GPUs (1,280 GPU-s) for j2, against 20,000
    # useful GPU-s (j1 2,000 s and j2 500 s on 8 GPUs), all On-Demand.
    assert metrics["preemption_churn_per_1k_useful_gpu_h"] == pytest.approx(1000 * 1280 / 20000)
    assert metrics["priced_loss_on_demand_gpu_h"] == pytest.approx(1280 / 3600)
    assert metrics["move_loss_gpu_hours"] == 0.0
    assert metrics["spot_waste_per_1k_spot_gpu_h"] == 0.0
    assert (metrics["preemptions"], metrics["moves"]) == (1, 0)


def test_a_move_to_spot_is_reported_apart_from_preemptions() -> None:
    rows = [("short", 0.0, 3600.0, 8, "a", "normal"), ("long", 60.0, 36000.0, 8, "a", "normal")]
    config = before(move_to_spot_min_remaining_s=3600.0)
    report = simulate(trace(rows), ["spotline"], settings=SETTINGS, config=config, pools=SPOT_POOLS)
    metrics = report.runs["spotline"].metrics
    # `long` writes 50 s On-Demand (price 1.0), then restarts 100 s on Spot (price 0.3), 8 GPUs.
    assert (metrics["preemptions"], metrics["moves"]) == (0, 1)
    assert metrics["move_loss_gpu_hours"] == pytest.approx(8 * 150 / 3600)
    assert metrics["preemption_churn_per_1k_useful_gpu_h"] == 0.0
    assert metrics["priced_loss_on_demand_gpu_h"] == pytest.approx((8 * 50 + 8 * 100 * 0.3) / 3600)
    assert metrics["loss_account"]["preemptions_per_job"]["0"] == 2
    assert metrics["spot_gpu_hours"] > 0 and metrics["on_demand_gpu_hours"] > 0


# Team b's high job borrows all 8 GPUs (its nominal quota is 4: the teams' GPU-seconds are equal);
# team a's normal job, under its quota, arrives after it.
COHORT = [("b1", 0.0, 1000.0, 8, "b", "high"), ("a1", 10.0, 2000.0, 4, "a", "normal")]


def test_kueue_reclaims_any_borrowed_workload_but_lower_priority_reclaims_only_lower_ones() -> None:
    classic = run(COHORT, "kueue-classic")
    assert by_id(classic)["b1"].preemptions == 1  # reclaimWithinCohort Any
    lower = run(COHORT, "kueue-lp")
    assert by_id(lower)["b1"].preemptions == 0  # LowerPriority: b1 is high, a1 normal
    assert waits(lower)["a1"] == pytest.approx(990.0)


LONG_LOW = [("j1", 0.0, 3000.0, 8, "a", "low"), ("j2", 10.0, 500.0, 8, "a", "high")]


def test_slurm_preempt_exempt_time_keeps_a_young_job_running() -> None:
    plain = run(LONG_LOW, "slurm")
    assert waits(plain)["j2"] == pytest.approx(50.0)  # j1 checkpoints (50 s) at once
    settings = replace(SETTINGS, peers=PeerKnobs(slurm_preempt_exempt_s=1800.0))
    exempt = run(LONG_LOW, "slurm-exempt", settings=settings)
    # j1 is exempt until 1,800 s; the pass after that (the 300 s tick at 1,810) preempts it.
    assert waits(exempt)["j2"] == pytest.approx(1810.0 + 50.0 - 10.0)
    assert by_id(exempt)["j1"].preemptions == 1


SPOT_FULL = [("j1", 0.0, 5000.0, 8, "a", "normal"), ("j2", 10.0, 500.0, 8, "a", "normal")]


@pytest.mark.parametrize(
    ("policy", "wait", "pool"), [("skypilot", 600.0, 1), ("skypilot-recovery", 4990.0, 0)]
)
def test_skypilot_falls_back_after_its_wait_and_pure_recovery_waits_for_spot(
    policy: str, wait: float, pool: int
) -> None:
    settings = replace(SETTINGS, peers=PeerKnobs(skypilot_fallback_s=600.0))
    report = simulate(trace(SPOT_FULL), [policy], settings=settings, pools=SPOT_POOLS)
    j2 = by_id(report.runs[policy])["j2"]
    assert j2.first_start is not None and j2.first_start - j2.submit == pytest.approx(wait)
    assert j2.pool == pool


# Team a submits three jobs that fill the cluster in turn, team b one after them.
SHARES = [
    ("a1", 0.0, 1000.0, 8, "a", "normal"),
    ("a2", 1.0, 1000.0, 8, "a", "normal"),
    ("a3", 2.0, 1000.0, 8, "a", "normal"),
    ("b1", 3.0, 1000.0, 8, "b", "normal"),
]


def test_batch_fair_share_dispatches_the_share_that_used_least_first() -> None:
    fifo = run(SHARES, "fifo")
    assert waits(fifo)["b1"] == pytest.approx(3000.0 - 3.0)
    fair = run(
        SHARES, "batch-fair-share", settings=replace(SETTINGS, peers=PeerKnobs(batch_share_decay_s=3600.0))
    )
    # After a1, team a's decayed usage is above b's (none): b1 goes before a2.
    assert waits(fair)["b1"] == pytest.approx(1000.0 - 3.0)
    assert by_id(fair)["a2"].first_start == pytest.approx(2000.0)


def test_batch_fair_share_without_decay_compares_the_gpus_held_now() -> None:
    fair = run(
        SHARES, "batch-fair-share", settings=replace(SETTINGS, peers=PeerKnobs(batch_share_decay_s=0.0))
    )
    # At 1,000 and 2,000 s neither team holds a GPU: a tie (broken by the share's name), so a2,
    # then a3 go first: without memory of usage, fair share dispatches as FIFO does here.
    assert by_id(fair)["a2"].first_start == pytest.approx(1000.0)
    assert waits(fair)["b1"] == pytest.approx(3000.0 - 3.0)
