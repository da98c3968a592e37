"""`spotline simulate deadline`: the accounting, the peers, the exact optimum, the contract."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotline.cli import app
from spotline.domain.deadline import Placement
from spotline.sim.availability import AvailabilityTrace, load_shipped
from spotline.sim.deadline import POLICIES, JobSetup, Step, run, simulate_deadline

SPOT, OD, IDLE = Placement.SPOT, Placement.ON_DEMAND, Placement.NONE
V100 = "1-node__aws-10-26-2022__us-west-2a_v100_1"


def trace_of(counts: list[int], gap: int = 600) -> AvailabilityTrace:
    return AvailabilityTrace("t", gap, tuple(counts))


def scripted(modes: list[Placement]):  # type: ignore[no-untyped-def]
    def policy(step: Step) -> Placement:
        return modes[step.index] if step.index < len(modes) else IDLE

    return policy


def test_accounting_changeovers_cost_time_at_the_new_price_and_progress_is_kept() -> None:
    # 10-minute steps; job 0.5 h; changeover 10 min; Spot, Spot, reclaimed, On-Demand x3
    trace = trace_of([1, 1, 0, 0, 0, 0])
    setup = JobSetup(job_h=0.5, deadline_h=1.0, changeover_h=1 / 6, price_ratio=3)
    out = run(trace, setup, 0.0, scripted([SPOT, SPOT, OD, OD, OD, OD]), "s")
    # Spot: 10 min changeover + 10 min work; On-Demand: 10 min changeover + 20 min work
    assert out.met_deadline
    assert out.spot_hours == pytest.approx(2 / 6)
    assert out.on_demand_hours == pytest.approx(3 / 6)
    assert out.changeovers == 2
    assert out.cost_fraction_of_on_demand == pytest.approx((2 / 6 + 3 * 3 / 6) / (3 * 0.5))


def test_a_finished_job_pays_only_what_it_used_and_spot_needs_an_instance() -> None:
    trace = trace_of([1, 1, 1, 1])
    setup = JobSetup(job_h=0.25, deadline_h=0.6, changeover_h=0.0, price_ratio=3)
    out = run(trace, setup, 0.0, scripted([SPOT, SPOT, SPOT]), "s")
    assert out.spot_hours == pytest.approx(0.25)
    with pytest.raises(ValueError, match="no Spot capacity"):
        run(trace_of([0, 1, 1, 1]), setup, 0.0, scripted([SPOT]), "s")


def brute_force(trace: AvailabilityTrace, setup: JobSetup) -> float:
    steps = len(trace.counts)
    best = float("inf")
    for modes in itertools.product((IDLE, SPOT, OD), repeat=steps):
        if any(m is SPOT and trace.counts[i] == 0 for i, m in enumerate(modes)):
            continue
        out = run(trace, setup, 0.0, scripted(list(modes)), "b")
        if out.met_deadline:
            best = min(best, out.cost_fraction_of_on_demand)
    return best


@pytest.mark.parametrize(
    ("counts", "job_h", "changeover_h"),
    [
        ([1, 0, 1, 1, 0, 1, 1], 0.5, 1 / 6),  # changeover = one step
        ([0, 1, 1, 0, 1, 1, 1, 1], 0.75, 0.2),  # changeover = 1.2 steps (the paper's 0.2 h)
        ([1, 1, 0, 0, 1, 0, 1, 1], 0.6, 0.2),
        ([0, 0, 0, 1, 1, 1, 1, 1], 0.5, 0.1),
    ],
)
def test_the_omniscient_optimum_equals_exhaustive_search(
    counts: list[int], job_h: float, changeover_h: float
) -> None:
    trace = trace_of(counts)
    setup = JobSetup(job_h=job_h, deadline_h=len(counts) / 6, changeover_h=changeover_h, price_ratio=3)
    [best] = simulate_deadline(trace, setup, [0.0], "omniscient")
    assert best.cost_fraction_of_on_demand == pytest.approx(brute_force(trace, setup))
    assert best.spot_hours + 3 * best.on_demand_hours == pytest.approx(
        best.cost_fraction_of_on_demand * 3 * job_h
    )


def test_on_a_real_trace_every_policy_meets_the_deadline_and_none_beats_the_optimum() -> None:
    trace = load_shipped(V100)
    setup = JobSetup(job_h=48, deadline_h=60, changeover_h=0.2, price_ratio=3)
    starts = [0.0, 100.0, 333.5, 500.0]
    optimum = simulate_deadline(trace, setup, starts, "omniscient")
    for policy in POLICIES:
        for out, best in zip(simulate_deadline(trace, setup, starts, policy), optimum, strict=True):
            assert out.met_deadline, (policy, out)
            assert out.cost_fraction_of_on_demand >= best.cost_fraction_of_on_demand - 1e-9, policy
    on_demand = simulate_deadline(trace, setup, starts, "on-demand")
    assert all(o.cost_fraction_of_on_demand == pytest.approx(1 + 0.2 / 48) for o in on_demand)


def test_spotline_never_reads_a_later_step_of_the_trace() -> None:
    trace = load_shipped(V100)
    setup = JobSetup(job_h=20, deadline_h=30, changeover_h=0.2, price_ratio=3)
    start_tick = 500  # after the first refit (72 h in): the plan is in use
    seen: list[list[Placement]] = []
    cut = 60  # steps into the job: everything after it is rewritten
    for future in (0, 1):
        counts = list(trace.counts)
        for i in range(start_tick + cut, start_tick + 200):
            counts[i] = future
        changed = AvailabilityTrace(trace.name, trace.gap_seconds, tuple(counts))
        from spotline.sim.deadline import spotline

        inner = spotline(changed, setup, start_tick)
        decisions: list[Placement] = []

        def recording(step: Step, inner=inner, decisions=decisions) -> Placement:  # type: ignore[no-untyped-def]
            decisions.append(inner(step))
            return decisions[-1]

        run(changed, setup, start_tick * trace.gap_hours, recording, "spotline")
        seen.append(decisions[:cut])
    assert seen[0] == seen[1]


def test_the_cli_follows_the_contract(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    path = Path(__file__).resolve().parents[2] / "spotline" / "sim" / "data" / "availability" / f"{V100}.json"
    args = ["simulate", "deadline", "--availability", str(path), "--job-hours", "48",
            "--deadline-hours", "60", "--changeover-hours", "0.2", "--price-ratio", "3",
            "--start-hour", "0", "--start-hour", "50", "--policy", "uniform-progress",
            "--json", str(out)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    document = json.loads(out.read_text())
    results = document["results"]
    assert [r["start_hour"] for r in results] == [0.0, 50.0]
    assert [r["grid_start_hour"] for r in results] == [0.0, 50.0]  # both on the 600 s grid
    assert document["notes"] == []  # nothing snapped, no prices
    for r in results:
        assert set(r) == {"start_hour", "grid_start_hour", "policy", "cost_fraction_of_on_demand",
                          "met_deadline", "spot_hours", "on_demand_hours", "changeovers"}  # fmt: skip
        assert r["policy"] == "uniform-progress" and r["met_deadline"] is True


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--policy": "cheapest"}, "unknown policy"),
        ({"--start-hour": "0.08333333333333333"}, "halfway between two ticks"),  # 300 s on a 600 s grid
        ({"--start-hour": "640"}, "past the end"),
        ({"--job-hours": "-1"}, "--job-hours"),
        ({"--price-ratio": "0.5"}, "--price-ratio"),
        ({"--deadline-hours": "40"}, "infeasible"),
        ({"--availability": "/no/such.json"}, "no such availability trace"),
        ({"--job-hours": "abc"}, "job-hours"),
    ],
)
def test_bad_flags_exit_2_naming_what_is_wrong(tmp_path: Path, change: dict[str, str], message: str) -> None:
    path = Path(__file__).resolve().parents[2] / "spotline" / "sim" / "data" / "availability" / f"{V100}.json"
    flags = {"--availability": str(path), "--job-hours": "48", "--deadline-hours": "60",
             "--changeover-hours": "0.2", "--price-ratio": "3", "--start-hour": "0",
             "--policy": "greedy", "--json": str(tmp_path / "o.json")}  # fmt: skip
    flags.update(change)
    result = CliRunner().invoke(app, ["simulate", "deadline", *itertools.chain(*flags.items())])
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "o.json").exists()


def test_the_simulator_s_history_bookkeeping_equals_the_domain_s_summary() -> None:
    import random

    from spotline.domain.deadline import SpotHistory
    from spotline.sim.deadline import HistoryTracker

    rng = random.Random(3)
    seen = [rng.random() < 0.6 for _ in range(500)]
    tracker = HistoryTracker(1 / 6)
    for up in seen:
        tracker.observe(up)
    assert tracker.history() == SpotHistory.summarise(seen, 1 / 6)
