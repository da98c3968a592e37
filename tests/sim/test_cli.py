"""`spotline trace convert` and `spotline simulate` end to end, through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotline.cli import app

from .test_trace import PHILLY

runner = CliRunner()

# Beyond the contract: n per class, slowdown, finish-time fairness (README: simulator metrics).
EXTRA_KEYS = {
    "jobs_by_priority",
    "completed_by_priority",
    "slowdown_p50",
    "slowdown_p99",
    "avg_run_s",
    "ftf_max",
    "ftf_jain",
    "cost_by_team",
    "loss_account",
    "wait_account",
    "gang_account",
    "moves",
    "preemption_churn_per_1k_useful_gpu_h",
    "move_loss_gpu_hours",
    "spot_waste_per_1k_spot_gpu_h",
    "spot_gpu_hours",
    "on_demand_gpu_hours",
    "priced_loss_on_demand_gpu_h",
    "lost_gpu_hours_since_checkpoint",
}
POLICY_KEYS = {
    "jobs",
    "completed",
    "avg_jct_s",
    "p99_jct_s",
    "avg_jct_s_by_priority",
    "wait_p99_s_by_priority",
    "gpu_utilization",
    "goodput",
    "lost_gpu_hours",
    "preemptions",
    "interruptions",
    "cost_per_useful_gpu_hour",
    "jain_fairness",
    "deadline_miss_rate",
}
CLASSES = {"critical", "high", "normal", "low"}


def test_convert_then_simulate_writes_the_contract(tmp_path: Path) -> None:
    philly = tmp_path / "philly.csv"
    philly.write_text(PHILLY)
    trace = tmp_path / "trace.csv"
    result = runner.invoke(
        app,
        [
            "trace",
            "convert",
            "--from",
            "philly",
            str(philly),
            str(trace),
            "--start",
            "2017-10-02",
            "--end",
            "2017-10-03",
            "--seed",
            "4",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "wrote 3 jobs" in result.output
    assert trace.read_text().splitlines()[0] == "job_id,submit_s,duration_s,gpus,team,priority"

    out, decisions, plots = tmp_path / "out.json", tmp_path / "decisions.jsonl", tmp_path / "plots"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace),
            "--gpus",
            "32",
            "--spot-fraction",
            "0.5",
            "--json",
            str(out),
            "--decisions",
            str(decisions),
            "--plot",
            str(plots),
            "--seed",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "spotline" in result.output and "events/s" in result.output
    report = json.loads(out.read_text())
    assert set(report) == {"trace", "gpus", "seed", "policies"}
    assert (report["gpus"], report["seed"]) == (32, 2)
    assert list(report["policies"]) == ["fifo", "priority-random", "kueue", "slurm", "spotline"]
    for metrics in report["policies"].values():
        assert set(metrics) == POLICY_KEYS | EXTRA_KEYS
        assert set(metrics["jobs_by_priority"]) == set(metrics["completed_by_priority"]) == CLASSES
        assert set(metrics["avg_jct_s_by_priority"]) == CLASSES
        assert set(metrics["wait_p99_s_by_priority"]) == CLASSES
        assert metrics["completed"] == metrics["jobs"] == 3
    records = [json.loads(line) for line in decisions.read_text().splitlines()]
    assert records and all(
        set(r) == {"policy", "t", "action", "job_id", "pool", "victims", "reason"} for r in records
    )
    assert {r["action"] for r in records} >= {"admit", "finish"}
    assert {r["policy"] for r in records} == set(report["policies"])
    assert sorted(p.name for p in plots.iterdir()) == [
        "lost_gpu_hours.png",
        "queued.png",
        "utilization.png",
        "wait_cdf.png",
    ]


def test_a_job_that_no_pool_can_host_is_an_error_naming_it(tmp_path: Path) -> None:
    # A 16-GPU job needs two 8-GPU nodes, and a multi-node job runs only On-Demand (AWS Batch
    # runs none on Spot): 8 On-Demand GPUs cannot host it, whatever the policy.
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,team,priority\na,0,60,8,t,low\nbig,5,60,16,t,low\n")
    decisions = tmp_path / "d.jsonl"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace),
            "--gpus",
            "32",
            "--spot-fraction",
            "0.75",
            "--decisions",
            str(decisions),
        ],
    )
    assert result.exit_code == 2
    assert "big (16 GPUs on 2 node(s))" in result.output and "On-Demand" in result.output
    assert not decisions.exists()


def test_simulate_one_policy_and_spotline_decides_through_the_domain(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,team,priority\na,0,3600,8,t,low\nb,5,60,8,t,critical\n")
    decisions = tmp_path / "d.jsonl"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(trace),
            "--gpus",
            "8",
            "--spot-fraction",
            "0",
            "--policy",
            "spotline",
            "--decisions",
            str(decisions),
        ],
    )
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in decisions.read_text().splitlines()]
    admits = [r for r in records if r["action"] == "admit"]
    # The reasons are spotline.domain.plan's own words.
    assert admits[0]["reason"] == "admitted to p4d.24xlarge-on-demand: 8 of 8 free GPUs"
    preempts = [r for r in records if r["action"] == "preempt"]
    assert preempts and preempts[0]["job_id"] == "b" and preempts[0]["victims"] == ["a"]


@pytest.mark.parametrize("move_to_spot", ["0", "3600"])
def test_simulate_moves_a_long_job_to_spot_only_when_asked(tmp_path: Path, move_to_spot: str) -> None:
    # `short` fills the Spot half for an hour; `long` starts On-Demand and may move once it ends.
    # (A Spot pool of fixed size: the advisor scenario, so no trace takes the Spot instance.)
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,submit_s,duration_s,gpus,team,priority\nshort,0,3600,8,t,normal\nlong,60,36000,8,t,normal\n"
    )
    decisions = tmp_path / "d.jsonl"
    options = ["--move-to-spot", move_to_spot]
    args = [
        "simulate",
        "--trace",
        str(trace),
        "--gpus",
        "16",
        "--spot-fraction",
        "0.5",
        "--policy",
        "spotline",
        "--spot-model",
        "advisor",
    ]
    result = runner.invoke(app, [*args, "--decisions", str(decisions), *options])
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in decisions.read_text().splitlines()]
    moves = [r for r in records if r["action"] == "preempt" and r["victims"] == [r["job_id"]]]
    assert [m["job_id"] for m in moves] == (["long"] if move_to_spot != "0" else [])


def test_a_negative_move_to_spot_is_refused(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,team,priority\na,0,60,8,t,low\n")
    result = runner.invoke(app, ["simulate", "--trace", str(trace), "--move-to-spot", "-1"])
    assert result.exit_code == 2 and "--move-to-spot" in result.output


def test_a_bad_trace_is_an_error_naming_the_line_and_field(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,team,priority\na,0,600,1,t,low\nb,5,-60,1,t,high\n")
    result = runner.invoke(app, ["simulate", "--trace", str(trace)])
    assert result.exit_code == 2
    assert "line 3, field 'duration_s': must be positive, got -60" in result.output


def test_unsorted_trace_warns_and_runs(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,team,priority\na,50,60,1,t,low\nb,5,60,1,t,high\n")
    result = runner.invoke(app, ["simulate", "--trace", str(trace), "--policy", "fifo", "--gpus", "8"])
    assert result.exit_code == 0, result.output
    assert "line 3: submit_s 5 is earlier than line 2's 50" in result.output


def test_unknown_policy_and_format_are_refused(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,team,priority\na,0,60,1,t,low\n")
    result = runner.invoke(app, ["simulate", "--trace", str(trace), "--policy", "yarn"])
    assert result.exit_code != 0
    result = runner.invoke(
        app, ["trace", "convert", "--from", "alibaba", str(trace), str(tmp_path / "o.csv")]
    )
    assert result.exit_code != 0


def test_a_policy_in_a_preemption_cycle_is_an_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (The cycle itself: tests/sim/test_preemption_cycle.py; here, what the user sees.)
    from spotline.cli import simulate as command
    from spotline.sim import PreemptionCycle

    def cycling(*args: object, **kwargs: object) -> None:
        raise PreemptionCycle("kueue-bwc: j was preempted 10000 times in a row before making any progress")

    monkeypatch.setattr(command, "simulate", cycling)
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_s,duration_s,gpus,team,priority\na,0,60,8,t,low\n")
    decisions = tmp_path / "d.jsonl"
    result = runner.invoke(
        app, ["simulate", "--trace", str(trace), "--policy", "kueue-bwc", "--decisions", str(decisions)]
    )
    assert result.exit_code == 1
    assert "kueue-bwc: j was preempted 10000 times" in result.output and "--policy" in result.output
    assert not decisions.exists()
