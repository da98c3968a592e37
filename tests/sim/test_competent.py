"""The competent peers: per-class placement, Kueue's preemption per flavor and its
setups, Slurm's time limits and reservations, and the metrics a reviewer expects."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from spotline.domain.models import Pool, Purchase
from spotline.sim import simulate
from spotline.sim.metrics import finish_time_fairness, isolated_jct
from spotline.sim.model import build_jobs
from spotline.sim.peers import ESTIMATE_MODELS, EstimateModel
from spotline.sim.peers.slurm import _Profile
from spotline.trace import read_trace
from spotline.trace.synth import synth_trace

from .helpers import HARD_KILL, SETTINGS, by_id, trace

TWO_POOLS = [
    Pool(name="spot", gpu_type="a100", purchase=Purchase.SPOT, capacity_gpus=8, price=0.3),
    Pool(name="on-demand", gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=8),
]


@pytest.mark.parametrize("policy", ["fifo", "priority-random", "kueue", "slurm"])
def test_competent_peers_route_critical_work_to_on_demand(policy: str) -> None:
    rows = [("c", 0.0, 100.0, 4, "a", "critical"), ("h", 1.0, 100.0, 4, "a", "high")]
    competent = simulate(trace(rows), [policy], settings=SETTINGS, pools=TWO_POOLS).runs[policy]
    hard = simulate(trace(rows), [policy], settings=HARD_KILL, pools=TWO_POOLS).runs[policy]
    assert [TWO_POOLS[j.pool].name for j in competent.jobs] == ["on-demand", "spot"]
    assert [TWO_POOLS[j.pool].name for j in hard.jobs] == ["spot", "spot"]


def test_kueue_simulates_preemption_per_flavor_and_skips_a_flavor_without_candidates() -> None:
    # h1 (high) fills the Spot flavor, l1 (low) the On-Demand one. h2 (high) fits nowhere; the
    # Spot flavor has no lower-priority candidate, so Kueue tries the next flavor and preempts l1
    # there (before per-flavor simulation, only the first flavor within nominal quota was tried).
    rows = [
        ("h1", 0.0, 5000.0, 8, "a", "high"),
        ("l1", 1.0, 5000.0, 8, "a", "low"),
        ("h2", 10.0, 500.0, 8, "a", "high"),
    ]
    for name in ("kueue-classic", "kueue-bwc", "kueue-fair"):
        run = simulate(trace(rows), [name], settings=SETTINGS, pools=TWO_POOLS).runs[name]
        jobs = by_id(run)
        assert jobs["l1"].preemptions == 1, name
        # l1 writes its checkpoint (50 s); h2 starts on its GPUs when the write is done.
        assert jobs["h2"].first_start == 60.0, name
        assert TWO_POOLS[jobs["h2"].pool].name == "on-demand", name


def test_kueue_borrow_within_cohort_lets_a_borrowing_queue_take_lower_priority_borrowed_gpus() -> None:
    # Two teams with equal work, so 4 nominal GPUs each on an 8-GPU On-Demand cluster. Team b's
    # low job borrows all 8; team a's high job needs 8, more than a's nominal quota: classic Kueue
    # may not preempt (it would borrow), borrowWithinCohort may (the victim is lower priority).
    rows = [
        ("b-low", 0.0, 3000.0, 8, "b", "low"),
        ("a-high", 10.0, 3000.0, 8, "a", "high"),
    ]
    runs = simulate(
        trace(rows), ["kueue-classic", "kueue-bwc"], gpus=8, spot_fraction=0.0, settings=SETTINGS
    ).runs
    assert by_id(runs["kueue-classic"])["a-high"].first_start == 3000.0
    assert by_id(runs["kueue-bwc"])["a-high"].first_start == 60.0  # after b-low's 50 s write
    assert by_id(runs["kueue-bwc"])["b-low"].preemptions == 1


def _under_quota_rows(
    borrower_class: str, preemptor_class: str
) -> list[tuple[str, float, float, int, str, str]]:
    # Equal work (24,000 GPU-s each), so 4 nominal GPUs each on 8 On-Demand GPUs. Team b borrows:
    # six 1-GPU jobs; team a runs one low 2-GPU job, under its quota. Then a asks for 4 GPUs.
    return [
        *[(f"b{i}", float(i), 4000.0, 1, "b", borrower_class) for i in range(6)],
        ("a-low", 6.0, 4000.0, 2, "a", "low"),
        ("a-new", 10.0, 4000.0, 4, "a", preemptor_class),
    ]


@pytest.mark.parametrize("setup", ["kueue-classic", "kueue-bwc"])
@pytest.mark.parametrize(("borrower", "preemptor"), [("low", "high"), ("high", "normal")])
def test_kueue_reclaims_for_a_queue_under_its_nominal_quota_whatever_the_request(
    setup: str, borrower: str, preemptor: str
) -> None:
    # Kueue's getTargets asks whether the queue is under its nominal quota now (2 of 4 GPUs), not
    # whether its usage plus the request (2 + 4) fits it. Under it, every candidate is tried
    # without borrowing: b's most recent borrowed jobs (any priority: reclaimWithinCohort Any)
    # until b no longer borrows, then a's own lower-priority job, so a ends within its quota.
    # (The model asked the second question before, and a-new waited for b's jobs to end.)
    run = simulate(
        trace(_under_quota_rows(borrower, preemptor)), [setup], gpus=8, spot_fraction=0.0, settings=SETTINGS
    ).runs[setup]
    jobs = by_id(run)
    assert {j.id for j in run.jobs if j.preemptions} == {"b4", "b5", "a-low"}
    assert jobs["a-new"].first_start == 60.0  # after the victims' 50 s writes


def test_kueue_borrow_within_cohort_may_not_borrow_once_it_takes_a_higher_priority_workload() -> None:
    # Quotas 4 (a), 2 (b), 2 (c) of 8 On-Demand GPUs (GPU-seconds 16,000, 8,000, 8,000). c's job
    # ends at 1000, when b starts borrowing 3 GPUs with five high jobs and a runs 3 (under its 4).
    # At 1500 a asks for 2 more, which would make it borrow. Under its quota, borrowWithinCohort
    # may take b's borrowed jobs of any priority, but taking one of priority at least a-new's
    # forbids borrowing (minimalPreemptions' allowBorrowingBelowPriority), and a-new cannot fit
    # within a's quota: no preemption, a-new waits for b's jobs to end at 2600. (Borrowing
    # allowed throughout, it would preempt two of b's jobs and start at 1550.)
    rows = [
        ("c0", 0.0, 1000.0, 8, "c", "low"),
        *[(f"b{i}", 1000.0, 1600.0, 1, "b", "high") for i in range(5)],
        ("a-run", 1000.0, 4000.0, 3, "a", "normal"),
        ("a-new", 1500.0, 2000.0, 2, "a", "normal"),
    ]
    run = simulate(trace(rows), ["kueue-bwc"], gpus=8, spot_fraction=0.0, settings=SETTINGS).runs["kueue-bwc"]
    jobs = by_id(run)
    assert jobs["b0"].first_start == 1000.0 and jobs["a-run"].first_start == 1000.0
    assert run.metrics["preemptions"] == 0
    assert jobs["a-new"].first_start == 2600.0


def test_slurm_time_limits_round_up_to_the_usual_values() -> None:
    oracle, rounded = ESTIMATE_MODELS["oracle"], ESTIMATE_MODELS["round"]
    assert oracle.limit("j", 1234.0, 1) == 1234.0
    assert rounded.limit("j", 1234.0, 1) == 3600.0
    assert rounded.limit("j", 5 * 3600.0, 1) == 8 * 3600.0
    assert rounded.limit("j", 50 * 3600.0, 1) == 72 * 3600.0
    assert rounded.limit("j", 100 * 3600.0, 1) == 5 * 24 * 3600.0  # beyond 72 h: whole days
    uniform = EstimateModel("uniform")
    limits = [uniform.limit(f"j{i}", 1800.0, 1) for i in range(200)]
    assert all(limit >= 3600.0 for limit in limits)
    assert len(set(limits)) > 3  # the over-estimate factor spreads them over the ladder
    assert limits == [uniform.limit(f"j{i}", 1800.0, 1) for i in range(200)]  # seeded per job
    with pytest.raises(ValueError, match="unknown estimate model"):
        EstimateModel("psychic").limit("j", 1.0, 1)


def test_backfill_profile_finds_the_earliest_hole_and_holds_reservations() -> None:
    # 2 GPUs free now, 4 more at t=100, 2 more at t=300.
    profile = _Profile(0.0, 2, [(100.0, 4), (300.0, 2)])
    assert profile.earliest(2, 1000.0) == 0.0
    assert profile.earliest(6, 50.0) == 100.0
    assert profile.earliest(8, 10.0) == 300.0
    profile.take(100.0, 500.0, 6)  # a reservation of 6 GPUs over [100, 600)
    assert profile.earliest(1, 50.0) == 0.0  # before the reservation: 2 free
    assert profile.earliest(1, 200.0) == 300.0  # [100, 300) is full, [300, 600) has 2
    assert profile.earliest(3, 10.0) == 600.0


def test_slurm_keeps_reservations_for_several_blocked_jobs() -> None:
    # Time limits rounded up (`round`): j0 holds 6 of 8 GPUs, limit 1 h. j1 (4 GPUs, limit 1 h)
    # and j2 (4 GPUs, limit 2 h) cannot start: backfill reserves [3600, 7200) for j1 and
    # [3600, 10800) for j2. j3 (2 GPUs, limit 1 h) fits on the 2 free GPUs now, but would hold
    # them past 3600, when both reservations need all 8: it waits. With one reservation (j1's
    # alone) it would have started at the backfill cycle at t=40.
    rows = [
        ("j0", 0.0, 3000.0, 6, "a", "high"),
        ("j1", 10.0, 1000.0, 4, "a", "high"),
        ("j2", 20.0, 5000.0, 4, "a", "high"),
        ("j3", 30.0, 400.0, 2, "a", "high"),
    ]
    for depth, j3 in ((4, 4000.0), (1, 40.0)):
        knobs = replace(SETTINGS.slurm, bf_reservations=depth)
        settings = replace(SETTINGS, slurm_estimates="round", slurm=knobs)
        run = simulate(trace(rows), ["slurm"], gpus=8, spot_fraction=0.0, settings=settings).runs["slurm"]
        starts = {j.id: j.first_start for j in run.jobs}
        # j0 ends at 3000 (before its limit): j1 and j2 start; j3 when j1 ends (or at once,
        # behind one reservation).
        assert starts == {"j0": 0.0, "j1": 3000.0, "j2": 3000.0, "j3": j3}


def test_isolated_jct_runs_each_team_first_come_first_served_on_its_entitlement() -> None:
    rows = [
        ("a1", 0.0, 100.0, 4, "a", "high"),
        ("a2", 0.0, 100.0, 4, "a", "high"),
        ("a3", 10.0, 50.0, 2, "a", "low"),
        ("b1", 0.0, 100.0, 8, "b", "low"),
    ]
    jobs = build_jobs(trace(rows).jobs, SETTINGS, 1, 8)
    alone = isolated_jct(jobs, {"a": 4, "b": 4})
    # a1 runs 0-100, a2 100-200, a3 200-250 (first come first served on 4 GPUs); b1 needs 8
    # but b's entitlement is 4: it gets its own GPUs and runs at once.
    assert alone == [100.0, 200.0, 240.0, 100.0]
    for job, finish in zip(jobs, [100.0, 200.0, 250.0, 300.0], strict=True):
        job.finish = finish
    worst, jain = finish_time_fairness(jobs, alone)
    assert worst == pytest.approx(3.0)  # team b: 300 s against 100 s alone
    assert 0.0 < jain < 1.0


def test_synth_is_seeded_and_hits_its_load(tmp_path: object) -> None:
    first = synth_trace(2000, 0.85, 128, 7)
    assert first == synth_trace(2000, 0.85, 128, 7)
    assert first != synth_trace(2000, 0.85, 128, 8)
    work = sum(j.duration_s * j.gpus for j in first)
    assert work / (first[-1].submit_s * 128) == pytest.approx(0.85, rel=0.01)
    assert len({j.team for j in first}) == 6
    assert {j.priority.value for j in first} == {"critical", "high", "normal", "low"}
    assert max(j.gpus for j in first) <= 16  # an eighth of the cluster
    assert any(j.deadline_s is not None for j in first)
    assert all(a.submit_s <= b.submit_s for a, b in itertools.pairwise(first))
    # Heavy tail: the mean run time is several times the median.
    runs = sorted(j.duration_s for j in first)
    assert sum(runs) / len(runs) > 3 * runs[len(runs) // 2]
    with pytest.raises(ValueError, match="--load"):
        synth_trace(10, float("nan"), 8, 1)


def test_trace_synth_cli_writes_a_trace_simulate_reads(tmp_path: pytest.TempPathFactory) -> None:
    from pathlib import Path

    from typer.testing import CliRunner

    from spotline.cli import app

    out = Path(str(tmp_path)) / "synth.csv"
    args = ["trace", "synth", "--jobs", "300", "--load", "1.1", "--gpus", "64", "--seed", "3", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert len(read_trace(out).jobs) == 300
    bad = CliRunner().invoke(app, ["trace", "synth", "--jobs", "0", str(out)])
    assert bad.exit_code == 2 and "--jobs" in bad.output


def test_simulate_cli_takes_victim_stop_kueue_setups_and_estimate_models(
    tmp_path: pytest.TempPathFactory,
) -> None:
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from spotline.cli import app
    from spotline.trace import write_trace

    rows = [("j1", 0.0, 1000.0, 8, "a", "low"), ("j2", 10.0, 500.0, 8, "b", "critical")]
    path = Path(str(tmp_path)) / "t.csv"
    write_trace(trace(rows).jobs, path)
    out = Path(str(tmp_path)) / "out.json"
    base = ["simulate", "--trace", str(path), "--gpus", "8", "--spot-fraction", "0", "--workers", "1"]
    result = CliRunner().invoke(
        app,
        [
            *base,
            "--policy",
            "kueue-bwc",
            "--policy",
            "slurm",
            "--victim-stop",
            "hard-kill",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert list(report["policies"]) == ["kueue-bwc", "slurm"]
    # Hard kill: j2 takes j1's GPUs at once, in both.
    assert all(m["wait_p99_s_by_priority"]["critical"] == 0.0 for m in report["policies"].values())
    bad = CliRunner().invoke(app, [*base, "--slurm-estimates", "psychic"])
    assert bad.exit_code == 2 and "psychic" in bad.output


def test_spotline_runs_the_shortest_declared_job_first_when_jobs_declare_run_times() -> None:
    # One 8-GPU node, held by j0 for an hour. j1 (10 h) and j2 (30 min), both low, of one team,
    # wait behind it; j1 arrived first. Declaring run times (`round`: 12 h and 1 h) puts j2 first;
    # declaring none leaves the older j1 first.
    rows = [
        ("j0", 0.0, 3600.0, 8, "a", "low"),
        ("j1", 10.0, 36000.0, 8, "a", "low"),
        ("j2", 20.0, 1800.0, 8, "a", "low"),
    ]
    starts = {}
    for declared in (True, False):
        settings = replace(SETTINGS, slurm_estimates="round", spotline_declared_runtimes=declared)
        run = simulate(trace(rows), ["spotline"], gpus=8, spot_fraction=0.0, settings=settings).runs[
            "spotline"
        ]
        starts[declared] = {j.id: j.first_start for j in run.jobs}
    assert starts[True]["j2"] < starts[True]["j1"]
    assert starts[False]["j1"] < starts[False]["j2"]


def test_simulate_cli_takes_no_declared_runtimes_and_a_bad_estimate_model_is_named(
    tmp_path: pytest.TempPathFactory,
) -> None:
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    from spotline.cli import app
    from spotline.trace import write_trace

    rows = [("j0", 0.0, 3600.0, 8, "a", "low"), ("j1", 10.0, 36000.0, 8, "a", "low")]
    path = Path(str(tmp_path)) / "t.csv"
    write_trace(trace(rows).jobs, path)
    out = Path(str(tmp_path)) / "out.json"
    base = ["simulate", "--trace", str(path), "--gpus", "8", "--spot-fraction", "0", "--policy", "spotline"]
    result = CliRunner().invoke(app, [*base, "--no-declared-runtimes", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads(out.read_text())["policies"]["spotline"]["completed"] == 2
    # The simulator's API names an unknown model for Spotline alone too (it reads it to declare).
    settings = replace(SETTINGS, slurm_estimates="psychic")
    with pytest.raises(ValueError, match="psychic"):
        simulate(trace(rows), ["spotline"], gpus=8, spot_fraction=0.0, settings=settings)
