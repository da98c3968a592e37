"""Trace-driven Spot pools (`spot_zones.py`, the default Spot model), hand-computed on small pools.

Every restart costs 100 s, a checkpoint write 50 s (`SETTINGS`); a trace's start tick comes from
the seed (`start_tick`), so each test lays its capacity pattern out from that tick."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotline.cli import app
from spotline.domain.models import Pool, Purchase
from spotline.sim import simulate
from spotline.sim.availability import AvailabilityTrace, load_shipped
from spotline.sim.engine import PoolState, Simulation
from spotline.sim.model import build_jobs, team_shares
from spotline.sim.pools import build_pools, spot_advice
from spotline.sim.runner import make_policy
from spotline.sim.spot_zones import (
    DEFAULT_ZONE_TRACES,
    SpotModel,
    ZoneCapacity,
    start_tick,
    zone_capacities,
    zone_pools,
)

from .helpers import SETTINGS, by_id, trace

GAP = 1000
LENGTH = 40


def laid_out(pattern: Sequence[int], seed: int, rest: int, name: str = "zone") -> AvailabilityTrace:
    """A trace whose ticks from the seed's start tick are `pattern`, then `rest`."""
    first = start_tick(seed, [AvailabilityTrace(name, GAP, (0,) * LENGTH)])
    counts = [rest] * LENGTH
    for j, n in enumerate(pattern):
        counts[(first + j) % LENGTH] = n
    return AvailabilityTrace(name, GAP, tuple(counts))


def spot(instances: int, name: str = "spot") -> Pool:
    return Pool(name=name, gpu_type="a100", purchase=Purchase.SPOT, capacity_gpus=8 * instances, price=0.3)


@pytest.mark.parametrize("policy", ["fifo", "kueue", "slurm", "spotline"])
def test_capacity_follows_the_trace_drops_reclaim_the_last_instances_with_notice(policy: str) -> None:
    # Four 8-GPU jobs fill a 4-instance zone. The trace shows 4 instances for two ticks, then 1
    # (t = 2000: the three last in packing order, b, c, d, get the notice, checkpoint in 50 s and
    # leave; a is untouched), then 0 (t = 4000: a gets it), then 4 again (t = 6000: all restart,
    # 100 s each, from what they kept).
    seed = 3
    work = 20000.0
    zone = laid_out([4, 4, 1, 1, 0, 0], seed, rest=4)
    rows = [(j, float(i), work, 8, "t", "normal") for i, j in enumerate("abcd")]
    result = simulate(
        trace(rows), [policy], seed=seed, settings=SETTINGS, pools=[spot(4)], availability={"spot": zone}
    ).runs[policy]
    jobs = by_id(result)
    assert [jobs[j].interruptions for j in "abcd"] == [1, 1, 1, 1]
    assert jobs["a"].finish == pytest.approx(6000.0 + 100.0 + (work - 4000.0))
    for i, j in enumerate("bcd", start=1):
        kept = 2000.0 - i
        assert jobs[j].finish == pytest.approx(6000.0 + 100.0 + (work - kept))
        assert jobs[j].queued_s == pytest.approx(6000.0 - 2050.0)
    assert result.metrics["interruptions"] == 4


def test_a_drop_reclaims_exactly_the_instances_beyond_capacity() -> None:
    # 4 instances -> 2 at t = 1000: c and d (the last two in start order) leave, a and b run on.
    seed = 7
    zone = laid_out([4, 2], seed, rest=2)
    rows = [(j, float(i), 5000.0, 8, "t", "normal") for i, j in enumerate("abcd")]
    run = simulate(
        trace(rows), ["fifo"], seed=seed, settings=SETTINGS, pools=[spot(4)], availability={"spot": zone}
    ).runs["fifo"]
    jobs = by_id(run)
    assert [jobs[j].interruptions for j in "abcd"] == [0, 0, 1, 1]
    assert jobs["a"].finish == pytest.approx(5000.0)
    assert jobs["b"].finish == pytest.approx(5001.0)
    # c and d wait for a and b's instances (capacity stays 2).
    assert min(jobs["c"].finish or 0.0, jobs["d"].finish or 0.0) > 5001.0


@pytest.mark.parametrize("policy", ["fifo", "spotline"])
def test_a_spot_launch_waits_while_capacity_is_zero(policy: str) -> None:
    # No instance for the first three ticks: the job (Spot only, nothing else runs or arrives)
    # starts when the trace shows one, at t = 3000, and the run does not end before.
    seed = 5
    zone = laid_out([0, 0, 0], seed, rest=1)
    run = simulate(
        trace([("a", 10.0, 500.0, 8, "t", "normal")]),
        [policy],
        seed=seed,
        settings=SETTINGS,
        pools=[spot(1)],
        availability={"spot": zone},
    ).runs[policy]
    job = by_id(run)["a"]
    assert job.first_start == pytest.approx(3000.0)
    assert job.finish == pytest.approx(3500.0)


class Recording(Simulation):
    """Records every Spot pool's capacity whenever it changes."""

    seen: list[tuple[float, str, int]]

    def _on_capacity(self, payload: tuple[PoolState, ZoneCapacity], tick: int) -> None:
        super()._on_capacity(payload, tick)
        self.seen.append((self.now, payload[0].name, payload[0].capacity))


def _capacity_history(policy: str, seed: int) -> list[tuple[float, str, int]]:
    pools, traces = zone_pools(96, 0.5, spot_advice(), [load_shipped(n) for n in DEFAULT_ZONE_TRACES])
    rows = [(f"j{i}", i * 600.0, 30000.0, 8, f"t{i % 2}", "normal") for i in range(40)]
    workload = trace(rows)
    shares = team_shares(workload.jobs, {p.name: p.capacity_gpus for p in pools})
    sim = Recording(
        build_jobs(workload.jobs, SETTINGS, seed, 8),
        pools,
        make_policy(policy, shares, SETTINGS, seed),
        SETTINGS,
        seed,
        zones=zone_capacities(pools, traces, seed),
    )
    sim.seen = []
    sim.run()
    return sim.seen


def test_every_policy_sees_the_same_capacity_and_the_seed_moves_the_start() -> None:
    histories = {p: _capacity_history(p, seed=2) for p in ("fifo", "kueue", "spotline")}
    shortest = min(len(h) for h in histories.values())
    assert shortest > 5
    first = histories["fifo"][:shortest]
    assert all(h[:shortest] == first for h in histories.values())
    assert _capacity_history("fifo", seed=9)[:shortest] != first


def test_a_zone_maps_the_trace_by_share_rounding_down() -> None:
    zone = ZoneCapacity(
        AvailabilityTrace("z", 300, (16, 8, 7, 0)), instances=2, gpus_per_node=8, first_tick=0
    )
    assert [zone.gpus_at_tick(t) for t in range(5)] == [16, 8, 0, 0, 16]
    assert zone.next_change(0) == 1 and zone.next_change(2) == 4


def test_the_default_cluster_has_one_spot_pool_per_zone() -> None:
    pools, traces = zone_pools(512, 0.75, spot_advice(), [load_shipped(n) for n in DEFAULT_ZONE_TRACES])
    names = [p.name for p in pools]
    assert names == [
        "p4d.24xlarge-spot-us-east-2b",
        "p4d.24xlarge-spot-us-west-2a",
        "p4d.24xlarge-spot-us-west-2c",
        "p4d.24xlarge-on-demand",
    ]
    assert [p.capacity_gpus for p in pools] == [128, 128, 128, 128]
    assert set(traces) == set(names[:3])
    assert all(p.interruption_rate_per_hour == 0.0 for p in pools)


@pytest.mark.parametrize(("gpus", "share"), [(512, 0.75), (64, 0.5), (40, 0.0)])
def test_both_spot_models_build_the_same_on_demand_pool(gpus: int, share: float) -> None:
    advice = spot_advice()
    zoned, _ = zone_pools(gpus, share, advice, [load_shipped(DEFAULT_ZONE_TRACES[0])])
    [on_demand] = [p for p in build_pools(gpus, share, advice) if p.purchase is Purchase.ON_DEMAND]
    assert zoned[-1] == on_demand
    for bad in ((0, share), (gpus, 1.5)):
        with pytest.raises(ValueError, match=r"at least one GPU|spot fraction") as zoned_error:
            zone_pools(*bad, advice, [load_shipped(DEFAULT_ZONE_TRACES[0])])
        with pytest.raises(ValueError) as single_error:
            build_pools(*bad, advice)
        assert str(zoned_error.value) == str(single_error.value)


def test_the_advisor_scenario_still_reclaims_at_the_band_rate() -> None:
    # One Spot pool of fixed size, Poisson reclaims at a high rate: interruptions happen, and
    # the trace model (default) is a different run.
    rows = [(f"j{i}", i * 60.0, 40000.0, 8, "t", "normal") for i in range(12)]
    fast = spot_advice()
    advisor = simulate(
        trace(rows),
        ["fifo"],
        gpus=128,
        spot_fraction=0.75,
        seed=1,
        settings=SETTINGS,
        spot_model=SpotModel.ADVISOR,
        advice=fast,
    ).runs["fifo"]
    default = simulate(trace(rows), ["fifo"], gpus=128, spot_fraction=0.75, seed=1, settings=SETTINGS).runs[
        "fifo"
    ]
    assert advisor.metrics["completed"] == default.metrics["completed"] == 12
    assert advisor.metrics["cost_per_useful_gpu_hour"] != default.metrics["cost_per_useful_gpu_hour"]


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "t.csv"
    path.write_text(
        "job_id,submit_s,duration_s,gpus,team,priority\n"
        + "".join(f"j{i},{i * 60},3600,8,t,normal\n" for i in range(6))
    )
    return path


def test_cli_takes_availability_files_and_names_a_bad_one(tmp_path: Path) -> None:
    runner = CliRunner()
    good = tmp_path / "z.json"
    good.write_text('{"metadata": {"gap_seconds": 600}, "data": [0, 1, 1, 0]}')
    bad = tmp_path / "bad.json"
    bad.write_text('{"metadata": {"gap_seconds": 600}, "data": [1, -2]}')
    out = tmp_path / "out.json"
    args = ["simulate", "--trace", str(_csv(tmp_path)), "--gpus", "32", "--policy", "fifo", "--workers", "1"]
    result = runner.invoke(app, [*args, "--spot-availability", str(good), "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["policies"]["fifo"]["completed"] == 6
    result = runner.invoke(app, [*args, "--spot-availability", str(good), "--spot-availability", str(bad)])
    assert result.exit_code == 2
    assert "bad.json: data[1] must be a whole number of instances >= 0" in result.output
    result = runner.invoke(app, [*args, "--spot-model", "advisor", "--spot-availability", str(good)])
    assert result.exit_code == 2
    result = runner.invoke(app, [*args, "--spot-model", "advisor"])
    assert result.exit_code == 0, result.output


def test_cli_gives_a_seeded_share_of_jobs_a_deadline(tmp_path: Path) -> None:
    # Six one-hour jobs a minute apart on one On-Demand instance run one after another: job 4
    # finishes at 4 h, after any deadline of at most 3 x its hour from its submission (3 min), so
    # with every job given a deadline some miss; without the share no job has one.
    runner = CliRunner()
    out = tmp_path / "out.json"
    args = ["simulate", "--trace", str(_csv(tmp_path)), "--gpus", "8", "--spot-fraction", "0"]
    args += ["--policy", "fifo", "--workers", "1", "--json", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["policies"]["fifo"]["deadline_miss_rate"] == 0.0
    result = runner.invoke(app, [*args, "--deadline-share", "1"])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["policies"]["fifo"]["deadline_miss_rate"] >= 3 / 6
    assert runner.invoke(app, [*args, "--deadline-share", "1.5"]).exit_code == 2
