"""The Spot peers (`peers/spot_peers.py`) and the seeded deadline share, hand-computed.

Every restart costs 100 s, a checkpoint write 50 s (`SETTINGS`); Spot zones follow traces laid
out from the seed's start tick (`test_spot_zones.laid_out`, 1000 s ticks)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from spotline.domain.models import Pool, Priority, Purchase
from spotline.sim import simulate
from spotline.sim.availability import AvailabilityTrace
from spotline.sim.model import build_jobs
from spotline.sim.peers import FALLBACK_AFTER_S
from spotline.trace import Trace, TraceJob

from .helpers import SETTINGS, by_id, trace
from .test_spot_zones import laid_out, spot

ON_DEMAND = Pool(name="od", gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=8)


def _run(
    rows: list[tuple[str, float, float, int, str, str]],
    policy: str,
    zones: dict[str, AvailabilityTrace],
    seed: int,
    deadlines: dict[str, float] | None = None,
) -> dict[str, object]:
    workload = trace(rows)
    if deadlines:
        workload = Trace(
            jobs=[replace(j, deadline_s=deadlines.get(j.job_id)) for j in workload.jobs],
            source="test",
        )
    pools = [spot(1, name) for name in zones] + [ON_DEMAND]
    run = simulate(workload, [policy], seed=seed, settings=SETTINGS, pools=pools, availability=zones)
    return dict(by_id(run.runs[policy]))


def _pool_of(job: object) -> int:
    return job.pool  # type: ignore[attr-defined,no-any-return]


def test_all_on_demand_never_uses_spot_and_waits_for_the_quota() -> None:
    seed = 1
    zones = {"spot-a": laid_out([1, 1, 1, 1], seed, rest=1)}
    jobs = _run(
        [("a", 0.0, 1000.0, 8, "t", "normal"), ("b", 1.0, 1000.0, 8, "t", "normal")], "on-demand", zones, seed
    )
    assert all(_pool_of(j) == 1 for j in jobs.values())  # the On-Demand pool
    assert jobs["b"].first_start == pytest.approx(1000.0)  # type: ignore[attr-defined]


def test_batch_goes_to_spot_when_it_fits_else_on_demand() -> None:
    seed = 1
    zones = {"spot-a": laid_out([1, 1, 1, 1], seed, rest=1)}
    jobs = _run(
        [("a", 0.0, 900.0, 8, "t", "normal"), ("b", 1.0, 900.0, 8, "t", "normal")],
        "batch-spot-first",
        zones,
        seed,
    )
    assert _pool_of(jobs["a"]) == 0 and _pool_of(jobs["b"]) == 1
    assert jobs["b"].first_start == pytest.approx(1.0)  # type: ignore[attr-defined]


def test_skypilot_fails_over_to_a_zone_with_capacity_then_falls_back_to_on_demand() -> None:
    seed = 2
    # Zone a is empty for 4 ticks, zone b has one instance: job x takes b (failover); job y finds
    # no Spot anywhere and falls back to On-Demand FALLBACK_AFTER_S after its submission.
    zones = {"spot-a": laid_out([0, 0, 0, 0], seed, rest=1), "spot-b": laid_out([1, 1, 1, 1], seed, rest=1)}
    rows = [("x", 0.0, 3000.0, 8, "t", "normal"), ("y", 10.0, 3000.0, 8, "t", "normal")]
    jobs = _run(rows, "skypilot", zones, seed)
    assert _pool_of(jobs["x"]) == 1
    assert _pool_of(jobs["y"]) == 2
    assert jobs["y"].first_start == pytest.approx(10.0 + FALLBACK_AFTER_S)  # type: ignore[attr-defined]


def test_uniform_progress_waits_while_ahead_and_uses_on_demand_when_behind_or_at_the_net() -> None:
    seed = 3
    zones = {"spot-a": laid_out([0] * 10, seed, rest=1)}
    # "slack": 1000 s of work, deadline at 10,000 s: ahead of its line at once (it has done 0 of
    # 0 due), so it waits for Spot; behind the line as soon as time passes (progress 0 below
    # elapsed x C / R > 0) at the next pass (the 300 s tick): On-Demand then, once "tight" has
    # left it (t = 1000).
    # "tight": deadline 1,200 s for 1,000 s of work: 1,000 + 2 x 150 >= 1,200 - 0: the safety
    # net fires at submission, On-Demand at once (it takes the pool first).
    rows = [("tight", 0.0, 1000.0, 8, "t", "normal"), ("slack", 0.0, 1000.0, 8, "t", "normal")]
    jobs = _run(rows, "uniform-progress", zones, seed, deadlines={"tight": 1200.0, "slack": 10000.0})
    assert _pool_of(jobs["tight"]) == 1 and jobs["tight"].first_start == pytest.approx(0.0)  # type: ignore[attr-defined]
    assert _pool_of(jobs["slack"]) == 1
    assert jobs["slack"].first_start == pytest.approx(1000.0)  # type: ignore[attr-defined]


def test_the_deadline_share_is_seeded_and_within_the_slack() -> None:
    workload = [
        TraceJob(
            job_id=f"j{i}",
            submit_s=i * 10.0,
            duration_s=1000.0 + i,
            gpus=1,
            team="t",
            priority=Priority.NORMAL,
            line=i + 2,
        )
        for i in range(400)
    ]
    with_share = replace(SETTINGS, deadline_share=0.25)
    first = build_jobs(workload, with_share, 7, 8)
    again = build_jobs(workload, with_share, 7, 8)
    other = build_jobs(workload, with_share, 8, 8)
    given = [j for j in first if j.deadline is not None]
    assert [j.deadline for j in first] == [j.deadline for j in again]
    assert [j.deadline for j in first] != [j.deadline for j in other]
    assert 70 <= len(given) <= 130
    assert all(1.2 <= (j.deadline - j.submit) / j.work <= 3.0 for j in given)  # type: ignore[operator]
    assert all(j.deadline is None for j in build_jobs(workload, SETTINGS, 7, 8))
    with pytest.raises(ValueError, match="deadline share"):
        build_jobs(workload, replace(SETTINGS, deadline_share=1.5), 7, 8)
