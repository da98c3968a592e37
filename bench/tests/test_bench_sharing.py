"""`make bench` simulates the evaluation set once: the policy part saves its runs
(`--save-evaluation`) and the contention part's whole-set goals read them (`--evaluation-runs`)
instead of simulating the same samples again; the whole-Philly speed run is `make bench-speed`'s
alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import bench.policy_bench.__main__ as pb_main
from bench import contention
from bench.policy_bench import runs as pb
from bench.policy_bench.setup import EVAL_POLICIES, Sample

SMALL = pb.Sample("synth", 7, jobs=150, load=1.0, gpus=32)


def test_saved_runs_are_the_runs_a_new_simulation_gives(tmp_path: Path) -> None:
    runs = pb.run_sample(SMALL, EVAL_POLICIES, workers=1)
    path = tmp_path / "evaluation-runs.json"
    path.write_text(json.dumps({SMALL.label: runs}))
    assert contention._saved_runs(path) == {SMALL.label: pb.run_sample(SMALL, EVAL_POLICIES, workers=1)}


def test_a_missing_or_partial_save_is_simulated_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert contention._saved_runs(None) == {}
    assert contention._saved_runs(tmp_path / "none.json") == {}
    assert "simulating the evaluation set again" in capsys.readouterr().out
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"a": {p: {} for p in EVAL_POLICIES}, "b": {"spotline": {}}}))
    assert set(contention._saved_runs(partial)) == {"a"}  # "b" lacks the peers: simulated again


def _quiet_policy_bench(monkeypatch: pytest.MonkeyPatch, per_sample: list[dict[str, Any]]) -> list[str]:
    called: list[str] = []
    evaluation = {"samples": ["s1", "s2"], "per_sample": per_sample}
    monkeypatch.setattr(pb_main, "available", lambda samples: list(samples))
    monkeypatch.setattr(pb_main, "evaluate", lambda samples: called.append("evaluate") or evaluation)
    for name in ("print_evaluation", "print_rows", "over_samples", "slurm_sensitivity", "churn"):
        monkeypatch.setattr(pb_main, name, lambda *_, name=name, **__: called.append(name))
    monkeypatch.setattr(pb_main, "ablations", lambda *_: called.append("ablations") or ({}, []))
    monkeypatch.setattr(pb_main, "print_churn", lambda *_: {})
    monkeypatch.setattr(pb_main, "speed", lambda *_: called.append("speed"))
    return called


def test_the_policy_part_saves_its_evaluation_and_leaves_the_speed_run_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    per_sample = [{"spotline": {"jobs": 1}}, {"spotline": {"jobs": 2}}]
    called = _quiet_policy_bench(monkeypatch, per_sample)
    out = tmp_path / "saved.json"
    pb_main.main(["--save-evaluation", str(out)])
    assert json.loads(out.read_text()) == {"s1": per_sample[0], "s2": per_sample[1]}
    assert "evaluate" in called and "speed" not in called


def test_the_speed_run_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    called = _quiet_policy_bench(monkeypatch, [])
    monkeypatch.setattr(pb_main, "QUICK", False)
    monkeypatch.setattr(pb_main, "REDUCED", False)
    pb_main.main(["--speed"])
    assert called == ["speed"]


def test_a_peer_in_a_preemption_cycle_is_left_out_of_the_ablations_best_peer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One peer's hard-kill run never ends (a preemption cycle): the ablations name it and pick
    # the best peer among the others, instead of waiting on it for ever.
    from spotline.sim import PreemptionCycle
    from spotline.sim.model import VictimStop

    def one(run: Any) -> dict[str, Any]:
        _, policy, settings, _, _ = run
        if policy == "kueue-bwc" and settings.victim_stop is VictimStop.HARD_KILL:
            raise PreemptionCycle("kueue-bwc: j was preempted 10000 times in a row")
        # the metrics the best peer reads; "kueue-bwc" would be the best on each
        value = 0.0 if policy == "kueue-bwc" else float(len(policy))
        metrics = {"avg_jct_s": value, "lost_gpu_hours": value, "cost_per_useful_gpu_hour": value}
        return {"policy": policy, **metrics}

    monkeypatch.setattr(pb, "_run_one", one)
    monkeypatch.setattr(pb, "WORKERS", 1)
    monkeypatch.setattr(
        pb, "best_peer", lambda metric, runs: min(runs.items(), key=lambda kv: kv[1]["avg_jct_s"])
    )
    rows, cycles = pb.ablations(Sample("synth", 1, jobs=10, load=1.0, gpus=8))
    assert len(cycles) == 1 and "victims hard-kill: kueue-bwc: j was preempted" in cycles[0]
    hard = rows["best peer per metric, hard-kill"]
    assert {run["policy"] for run in hard.values()} != {"kueue-bwc"}
    assert all(run["policy"] == "kueue-bwc" for run in rows["best peer per metric, checkpoint"].values())
