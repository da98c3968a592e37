"""Spotline in the simulator keeps each Spot pool's history as the control plane does
(`SpotlinePolicy.observe`, `spot_watch.PoolWatch`): an interruption notice to one of its jobs
(missing), a Spot launch waiting past `spot_missing_after_s` (missing, from the threshold's end),
a Spot launch that starts (there); each pass plans from `PoolWatch.signal` (`ClusterSnapshot.spot`).

Traces tick every 1000 s (`test_spot_zones.laid_out`); restarts cost 100 s, writes 50 s."""

from __future__ import annotations

from collections.abc import Sequence

from spotline.domain.models import Pool, Purchase
from spotline.sim.engine import Simulation
from spotline.sim.model import build_jobs, team_shares
from spotline.sim.runner import make_policy
from spotline.sim.spot_zones import zone_capacities
from spotline.sim.spotline_policy import SpotlinePolicy

from .helpers import BEFORE, SETTINGS, Row, trace
from .test_spot_zones import laid_out, spot

ON_DEMAND = Pool(name="od", gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=8)


def _run(rows: Sequence[Row], pattern: Sequence[int], seed: int, pools: Sequence[Pool]) -> SpotlinePolicy:
    zone = laid_out(pattern, seed, rest=1)
    workload = trace(rows)
    shares = team_shares(workload.jobs, {p.name: p.capacity_gpus for p in pools})
    policy = make_policy("spotline", shares, SETTINGS, seed, BEFORE)
    assert isinstance(policy, SpotlinePolicy)
    sim = Simulation(
        build_jobs(workload.jobs, SETTINGS, seed, 8),
        list(pools),
        policy,
        SETTINGS,
        seed,
        zones=zone_capacities(pools, {"spot": zone}, seed),
    )
    sim.run()
    return policy


def test_a_notice_starts_an_outage_and_a_spot_start_ends_it() -> None:
    # `a` starts on Spot at 0 (there), is reclaimed at t = 2000 (missing: the notice), waits
    # while the zone has no instance (the launch-wait observation changes nothing: already
    # missing) and restarts on Spot at t = 5000 (there again): one outage, 2000..5000.
    policy = _run([("a", 0.0, 20000.0, 8, "t", "normal")], [1, 1, 0, 0, 0], seed=3, pools=[spot(1)])
    watch = policy.watches["spot"]
    assert (watch.since, watch.available, watch.outages) == (0.0, True, ((2000.0, 5000.0),))


def test_a_launch_waiting_past_the_threshold_is_an_outage_from_the_threshold_s_end() -> None:
    # No instance until t = 3000. The pass at 10 finds a job that could run on Spot: its launch
    # waits; the pass at 310 (the periodic tick) sees it past 300 s: missing from t = 310; `a`
    # starts on Spot at 3000: there.
    policy = _run([("a", 10.0, 500.0, 8, "t", "normal")], [0, 0, 0], seed=5, pools=[spot(1)])
    watch = policy.watches["spot"]
    assert (watch.since, watch.outages) == (310.0, ((310.0, 3000.0),))
    signal = policy.spot_signals(3500.0)
    assert signal["spot"].available and signal["spot"].outages_s == (2690.0,)
    assert policy._pass_snapshot(3500.0).spot == signal  # what the pass plans from


def test_nothing_is_seen_of_capacity_the_jobs_never_meet() -> None:
    # The zone loses its instance at t = 2000 and gets it back at 3000, but `a` runs On-Demand
    # (it asks for nothing else) and nothing launches on Spot: no observation, no history (the
    # pool counts as there), whatever the trace says.
    rows: list[Row] = [("a", 0.0, 5000.0, 8, "t", "critical")]
    policy = _run(rows, [1, 1, 0, 1], seed=3, pools=[spot(1), ON_DEMAND])
    assert policy.watches == {}
    assert policy._pass_snapshot(5000.0).spot == {}
