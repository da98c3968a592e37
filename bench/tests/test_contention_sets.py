"""The contended sets (`bench.contention`): the frozen evaluation set, disjoint from the tuning
set, each sample over its seeds, judged on the mean over them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import contention as c
from bench import goals
from spotline.trace import parse_when


def test_the_evaluation_set_is_the_frozen_file_with_three_seeds_per_sample() -> None:
    listed = json.loads(c.EVALUATION_FILE.read_text())["samples"]
    loaded = c.load_set(c.EVALUATION_FILE)
    assert len(loaded) == len(listed) == 5
    for entry, sample in zip(listed, loaded, strict=True):
        assert [m.seed for m in sample.members] == entry["seeds"]
        assert len(entry["seeds"]) >= 3
        assert {m.kind for m in sample.members} == {entry["kind"]}


def test_the_evaluation_set_shares_no_window_and_no_seed_with_the_tuning_set() -> None:
    tuning = [m for s in c.CONTENDED_TUNING for m in s.members]
    evaluation = [m for s in c.load_set(c.EVALUATION_FILE) for m in s.members]
    for e in (m for m in evaluation if m.kind == "philly"):
        for t in (m for m in tuning if m.kind == "philly"):
            apart = parse_when(e.end, end=True) <= parse_when(t.start) or parse_when(
                t.end, end=True
            ) <= parse_when(e.start)
            assert apart, (e.label, t.label)
    reduced = [m for s in c.TUNING_REDUCED for m in s.members]
    synthetic = {m.seed for m in [*tuning, *reduced] if m.kind != "philly"}
    assert not synthetic & {m.seed for m in evaluation if m.kind != "philly"}


def test_the_reduced_tuning_set_is_its_synthetic_shapes_over_three_seeds() -> None:
    shapes = {
        (m.kind, m.load, m.long_share) for s in c.CONTENDED_TUNING for m in s.members if m.kind != "philly"
    }
    assert {(m.kind, m.load, m.long_share) for s in c.TUNING_REDUCED for m in s.members} == shapes
    assert all(len(s.members) == 3 and s.members[0].jobs == 2000 for s in c.TUNING_REDUCED)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--reduced"], "--reduced: only with --tuning"),
        (["--tuning", "--policy", "nope"], "--policy: unknown nope"),
        (["--tuning", "--policy", "fifo"], "at least one preempting peer"),
    ],
)
def test_the_bench_refuses_flags_it_cannot_run(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        c.main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_a_set_file_with_an_unknown_kind_is_refused(tmp_path: Any) -> None:
    path = tmp_path / "set.json"
    path.write_text(json.dumps({"samples": [{"kind": "poisson", "gpus": 8, "seeds": [1]}]}))
    with pytest.raises(ValueError, match="unknown sample kind 'poisson'"):
        c.load_set(path)


def _run(churn: float, wait: float = 60.0) -> dict[str, Any]:
    return {
        "preemption_churn_per_1k_useful_gpu_h": churn,
        "wait_p99_s_by_priority": {"critical": wait, "high": wait},
        "loss_account": {"preemptions_by_class": {"high>low": churn}},
    }


def test_a_sample_is_judged_on_the_mean_over_its_seeds_with_the_ci_of_the_ratio() -> None:
    seeds = [
        {"slurm": _run(10.0), "kueue-lp": _run(20.0), "spotline": _run(6.0)},
        {"slurm": _run(18.0), "kueue-lp": _run(10.0), "spotline": _run(10.0)},
    ]
    mean = c.mean_runs(seeds)
    assert mean["slurm"]["preemption_churn_per_1k_useful_gpu_h"] == 14.0
    assert mean["spotline"]["loss_account"]["preemptions_by_class"] == {"high>low": 8.0}
    goal = next(g for g in goals.GOALS if g.label.startswith("preemption churn"))
    cell = c.seeded_goal(goal, seeds)
    # Means: 8 against slurm's 14 (kueue-lp's 15); the ratios per seed against slurm: 0.6, 10/18.
    assert cell["ratio"] == pytest.approx(8 / 14)
    assert cell["met"]
    assert cell["ci95"] == pytest.approx(goals.interval([0.6, 10 / 18])[1])
    assert cell["how"].startswith("x0.571 ± ") and cell["how"].endswith(" vs slurm")


def test_seeded_runs_come_back_per_seed_in_order() -> None:
    sample = c.Seeded(tuple(c._bursty(seed, 1.2, 80, 16) for seed in (1, 2)))
    per_seed = c.run_seeded(sample, ["fifo", "spotline"])
    for member, runs in zip(sample.members, per_seed, strict=True):
        assert list(runs) == ["fifo", "spotline"]
        assert runs == c.run_contended(member, ["fifo", "spotline"], workers=1)
