"""`spotline tune`: candidates, the Pareto front, the holdout's guard, the history's cluster file,
and the command end to end on a small synthetic trace (typer's CliRunner)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spotline.cli import app
from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Pool, Priority, Purchase
from spotline.sim.availability import AvailabilityTrace
from spotline.sim.history import (
    History,
    HistoryError,
    ObservedCapacity,
    cluster_document,
    cluster_path,
    holdout_cut,
    read_history,
    split,
)
from spotline.sim.tune import (
    GOAL_METRICS,
    GOALS_BY_KEY,
    MAX_REGRESSION,
    SEARCH_SPACE,
    TuneError,
    apply_diff,
    change,
    cluster_for,
    dominates,
    draw_candidates,
    flatten,
    holdout_verdict,
    nested,
    paired_gain,
    race,
    setting_value,
    summarize,
    tune,
)
from spotline.trace import Trace, TraceJob, write_trace
from spotline.trace.synth import synth_trace

runner = CliRunner()
DAY = 86400.0


def _job(i: int, submit: float, gpus: int = 8, priority: str = "normal", team: str = "a") -> TraceJob:
    return TraceJob(f"j{i}", submit, 3600.0, gpus, team, Priority(priority))


def _means(**changes: float) -> dict[str, float]:
    base = {g.key: 1000.0 for g in GOAL_METRICS}
    base["jain_fairness"] = 0.9
    base["cost_per_useful_gpu_hour"] = 0.5
    return {**base, **changes}


# --- candidates --------------------------------------------------------------------------------


def test_candidates_start_with_the_baseline_and_change_known_settings_only() -> None:
    base = SchedulerConfig()
    drawn = draw_candidates(base, 20, seed=1)
    assert drawn[0] == {}
    assert len(drawn) == 20
    assert len({tuple(sorted(d.items())) for d in drawn}) == 20  # no two alike
    for diff in drawn[1:]:
        assert 1 <= len(diff) <= 3
        config = apply_diff(base, diff)
        for setting, value in diff.items():
            assert setting in SEARCH_SPACE
            assert value != setting_value(base, setting)
            assert setting_value(config, setting) == value
    assert draw_candidates(base, 20, seed=1) == drawn  # seeded
    assert draw_candidates(base, 20, seed=2) != drawn


def test_every_value_searched_is_a_valid_setting_and_the_release_wait_can_be_turned_off() -> None:
    for setting, values in SEARCH_SPACE.items():
        for value in values:
            assert setting_value(apply_diff(SchedulerConfig(), {setting: value}), setting) == value
    assert 0.0 in SEARCH_SPACE["release_wait_s"]
    assert SchedulerConfig().release_wait_s in SEARCH_SPACE["release_wait_s"]


def test_candidates_are_diffs_from_the_settings_in_effect() -> None:
    base = apply_diff(SchedulerConfig(), {"weights.age": 300.0})
    for diff in draw_candidates(base, 30, seed=3)[1:]:
        assert diff.get("weights.age", 600.0) != 300.0


def test_an_unknown_setting_is_refused_by_name() -> None:
    with pytest.raises(TuneError, match=r"not a setting: weights\.agee"):
        apply_diff(SchedulerConfig(), {"weights.agee": 1.0})
    with pytest.raises(TuneError, match="not a setting: bogus"):
        apply_diff(SchedulerConfig(), {"bogus": 1.0})


def test_nested_and_flatten_are_inverse() -> None:
    diff = {"weights.age": 300.0, "preemption_delay_s": 0.0}
    assert nested(diff) == {"weights": {"age": 300.0}, "preemption_delay_s": 0.0}
    assert flatten(nested(diff)) == diff


# --- the front and the guard -------------------------------------------------------------------


def test_change_is_oriented_and_floored() -> None:
    jct, jain, wait = GOALS_BY_KEY["avg_jct_s"], GOALS_BY_KEY["jain_fairness"], GOAL_METRICS[2]
    assert change(jct, 100.0, 110.0) == pytest.approx(0.10)
    assert change(jain, 0.8, 0.88) == pytest.approx(-0.10)  # higher is better
    assert change(wait, 10.0, 250.0) == 0.0  # both under the 5-minute floor


def test_dominance_needs_every_metric_at_least_as_good() -> None:
    base = _means()
    assert dominates(_means(avg_jct_s=900.0), base)
    assert not dominates(base, base)
    assert not dominates(_means(avg_jct_s=900.0, lost_gpu_hours=1001.0), base)


def test_a_gain_is_paired_by_seed_and_must_clear_its_ci() -> None:
    jct = GOALS_BY_KEY["avg_jct_s"]
    base = summarize([100.0, 200.0, 300.0])
    steady = paired_gain(jct, base, summarize([95.0, 190.0, 285.0]))  # 5% better on every seed
    assert steady.mean == pytest.approx(-0.05) and steady.upper < 0
    noisy = paired_gain(jct, base, summarize([80.0, 230.0, 270.0]))  # better on average only
    assert noisy.mean < 0 < noisy.upper


@pytest.mark.parametrize(
    ("pick", "ok", "says"),
    [
        (_means(avg_jct_s=900.0), True, "improves avg_jct_s by 10.0%"),
        (_means(avg_jct_s=900.0, lost_gpu_hours=1040.0), True, "improves"),  # +4%: within 5%
        (_means(avg_jct_s=900.0, lost_gpu_hours=1060.0), False, "lost_gpu_hours +6.0%"),
        (_means(avg_jct_s=900.0, jain_fairness=0.8), False, "jain_fairness +11.1%"),
        (_means(avg_jct_s=1000.0), False, "not on the holdout"),
    ],
)
def test_the_holdout_guard(pick: dict[str, float], ok: bool, says: str) -> None:
    verdict, why = holdout_verdict(GOALS_BY_KEY["avg_jct_s"], _means(), pick)
    assert verdict is ok
    assert says in why
    assert f"{MAX_REGRESSION:.0%}" in why or "not on the holdout" in why


# --- the race ----------------------------------------------------------------------------------


def test_the_race_drops_a_dominated_candidate_and_keeps_the_best_on_the_objective() -> None:
    jct = GOALS_BY_KEY["avg_jct_s"]
    screen = {
        0: _means(),
        1: _means(avg_jct_s=800.0),
        2: _means(avg_jct_s=850.0, lost_gpu_hours=960.0),  # dominated by 3 (only)
        3: _means(avg_jct_s=850.0, lost_gpu_hours=950.0),
        4: _means(avg_jct_s=900.0, lost_gpu_hours=900.0),
        5: _means(avg_jct_s=950.0, jain_fairness=0.95),
    }
    assert race(jct, screen, 2) == [0, 1, 3]  # 2, drawn before 3 and as good on the objective, is dominated
    assert race(jct, screen, 3) == [0, 1, 3, 4]
    assert race(jct, screen, 9) == [0, 1, 3, 4, 5]  # the baseline always goes on


def test_a_raced_tune_decides_on_the_finalists_full_seeds(small_trace: Path) -> None:
    from spotline.trace import read_trace

    history = History(trace=read_trace(small_trace))
    pools, zones = cluster_for(history, 32)
    holdout = history.span_s / DAY / 3
    result = tune(
        history, pools, zone_traces=zones, holdout_days=holdout, seeds=(1, 2), candidates=5, finalists=2
    )
    assert result.screen_days is not None and 0 < result.screen_jobs < result.tuning_jobs
    finalists = [c.index for c in result.finalists]
    assert finalists[0] == 0 and len(finalists) == 3
    for c in result.candidates:
        assert len(c.screen["avg_jct_s"].values) == 1  # every candidate screened on one seed
        if c.finalist:
            assert all(len(s.values) == 2 for s in c.tuning.values())  # the finalists on every seed
        else:
            assert not c.tuning and not c.pareto and not c.holdout
    assert result.pareto and all(c.finalist for c in result.pareto)
    assert result.checked is None or result.checked.finalist
    assert result.runs == 5 + 3 * 2 + 2 * len(
        {0, *(c.index for c in result.pareto)} | ({result.checked.index} if result.checked else set())
    )
    data = result.to_json()
    assert data["screen"]["finalists"] == finalists and data["screen"]["seed"] == 1
    assert [c["finalist"] for c in data["candidates"]] == [c.finalist for c in result.candidates]


def test_a_semi_final_races_the_screens_best_on_twice_its_days(small_trace: Path) -> None:
    from spotline.trace import read_trace

    history = History(trace=read_trace(small_trace))
    pools, zones = cluster_for(history, 32)
    holdout = history.span_s / DAY / 3
    result = tune(
        history,
        pools,
        zone_traces=zones,
        holdout_days=holdout,
        seeds=(1, 2),
        candidates=6,
        finalists=1,
        semifinalists=3,
        screen_days=history.span_s / DAY / 8,
    )
    assert result.screen_days is not None and result.semifinal_days == 2 * result.screen_days
    assert result.screen_jobs < result.semifinal_jobs < result.tuning_jobs
    semis = [c.index for c in result.candidates if c.semifinal]
    assert semis[0] == 0 and len(semis) == 4  # the baseline and the screen's 3 best
    assert all(len(s.values) == 1 for c in result.candidates if c.semifinal for s in c.semifinal.values())
    finalists = [c.index for c in result.finalists]
    assert finalists[0] == 0 and len(finalists) == 2 and set(finalists) <= set(semis)
    assert all(c.semifinal for c in result.finalists)
    screens = {c.index: c.means("screen") for c in result.candidates}
    assert semis == race(GOALS_BY_KEY["avg_jct_s"], screens, 3)
    held = {0, *(c.index for c in result.pareto)} | ({result.checked.index} if result.checked else set())
    assert result.runs == 6 + 4 + 2 * 2 + 2 * len(held)
    data = result.to_json()
    assert data["screen"]["semifinal"]["candidates"] == semis
    assert data["screen"]["finalists"] == finalists
    # No semi-final where twice the screen's days would be the whole stretch, or with few candidates
    whole = tune(history, pools, zone_traces=zones, holdout_days=holdout, seeds=(1,), candidates=6,
                 finalists=1, semifinalists=3, screen_days=history.span_s / DAY / 2)  # fmt: skip
    assert whole.semifinal_days is None and whole.to_json()["screen"]["semifinal"] is None
    assert not any(c.semifinal for c in whole.candidates)


# --- the history -------------------------------------------------------------------------------


def test_split_shifts_the_holdout_to_start_at_zero() -> None:
    trace = Trace(jobs=[_job(0, 0.0), _job(1, 5 * DAY), _job(2, 9 * DAY)], source="t")
    spot = AvailabilityTrace("a", 3600, tuple(range(10 * 24)))
    history = History(trace=trace, availability={"spot": spot})
    cut = holdout_cut(history, 7)
    assert cut == 2 * DAY
    head, tail = split(history, cut)
    assert [j.job_id for j in head.trace.jobs] == ["j0"]
    assert [j.submit_s for j in tail.trace.jobs] == [3 * DAY, 7 * DAY]
    assert tail.availability["spot"].counts[0] == 48  # hour 48 of the history is the holdout's 0


def test_a_holdout_longer_than_the_history_is_refused() -> None:
    history = History(trace=Trace(jobs=[_job(0, 0.0), _job(1, 2 * DAY)], source="short.csv"))
    with pytest.raises(HistoryError, match=r"covers 2.0 days.*holdout of 7 days leaves nothing"):
        holdout_cut(history, 7)


def test_observed_capacity_holds_its_last_count_and_never_exceeds_the_pool() -> None:
    zone = ObservedCapacity(
        AvailabilityTrace("o", 600, (4, 6, 2)), instances=5, gpus_per_node=8, first_tick=0
    )
    assert [zone.gpus_at_tick(t) for t in range(5)] == [32, 40, 16, 16, 16]
    assert zone.next_change(0) == 1
    assert zone.next_change(2) is None


def test_a_history_reads_its_cluster_file(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    write_trace([_job(0, 0.0), _job(1, 3600.0)], path)
    pools = [
        Pool(name="spot", gpu_type="a100", purchase=Purchase.SPOT, capacity_gpus=16, price=0.4),
        Pool(name="od", gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=8),
    ]
    document = cluster_document(
        pools,
        availability={"spot": AvailabilityTrace("spot", 600, (2, 1, 2))},
        scheduler={"weights": {"age": 300.0}},
        observed={"preemptions": 1},
    )
    cluster_path(path).write_text(json.dumps(document))
    history = read_history(path)
    assert history.has_cluster
    assert [p.name for p in history.pools] == ["spot", "od"]
    assert history.availability["spot"].counts == (2, 1, 2)
    assert history.config().weights.age == 300.0
    document["availability"] = {"od": {"metadata": {"gap_seconds": 600}, "data": [1]}}
    cluster_path(path).write_text(json.dumps(document))
    with pytest.raises(HistoryError, match="'od', which is no Spot pool"):
        read_history(path)
    document["availability"] = {}
    document["scheduler"] = {"weights": {"agee": 1}}
    cluster_path(path).write_text(json.dumps(document))
    with pytest.raises(HistoryError, match=r"not a setting of this version: weights\.agee"):
        read_history(path)


# --- the command -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Most of a day of a busy 32-GPU cluster."""
    path = tmp_path_factory.mktemp("tune") / "trace.csv"
    write_trace(synth_trace(100, 1.1, 32, seed=7), path)
    return path


@pytest.fixture(scope="module")
def tuned(small_trace: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    out = tmp_path_factory.mktemp("tune-out") / "tune.json"
    span = max(float(line.split(",")[1]) for line in small_trace.read_text().splitlines()[1:])
    holdout = f"{span / DAY / 3:.3f}"
    result = runner.invoke(
        app,
        [
            "tune",
            "--trace",
            str(small_trace),
            "--gpus",
            "32",
            "--holdout-days",
            holdout,
            "--candidates",
            "4",
            "--seeds",
            "2",
            "--workers",
            "2",
            "--json",
            str(out),
            "--cdk-json",
            str(out.parent / "none.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    return {"json": json.loads(out.read_text()), "output": result.output}


def test_the_command_writes_the_contract(tuned: dict[str, object]) -> None:
    data = tuned["json"]
    assert isinstance(data, dict)
    assert data["objective"] == "avg_jct_s"
    assert isinstance(data["recommended"], dict)
    assert set(data["holdout"]) == set(GOALS_BY_KEY)
    for key, row in data["holdout"].items():
        assert set(row) == {"defaults", "recommended", "better"}
        assert row["better"] == GOALS_BY_KEY[key].better
    assert data["pareto"], "the front is never empty"
    for entry in data["pareto"]:
        assert set(entry["tuning"]) == set(GOALS_BY_KEY)
        assert set(entry["holdout"]) == set(GOALS_BY_KEY)
        for summary in entry["tuning"].values():
            assert math.isfinite(summary["mean"]) and summary["ci95"] is not None
    assert len(data["candidates"]) == 4
    assert data["runs"] >= 4 * 2 + 2  # every candidate on both seeds, the baseline on the holdout


def test_a_recommendation_keeps_the_guard_on_the_holdout(tuned: dict[str, object]) -> None:
    data = tuned["json"]
    assert isinstance(data, dict)
    objective = GOALS_BY_KEY[data["objective"]]
    holdout = data["holdout"]
    if not data["recommended"]:
        assert "nothing is recommended" in data["reason"] or "settings in effect stay" in data["reason"]
        assert all(row["defaults"] == row["recommended"] for row in holdout.values())
        return
    assert change(objective, holdout[objective.key]["defaults"], holdout[objective.key]["recommended"]) < 0
    for key, row in holdout.items():
        assert change(GOALS_BY_KEY[key], row["defaults"], row["recommended"]) <= MAX_REGRESSION
    assert data["cdk_context"]["scheduler"] == nested(data["recommended"])
    assert "Recommended diff, as cdk.json context" in str(tuned["output"])


def test_apply_writes_the_scheduler_context_and_keeps_the_rest(tmp_path: Path) -> None:
    from spotline.cli.tune import write_scheduler

    cdk = tmp_path / "cdk.json"
    cdk.write_text(json.dumps({"app": "x", "context": {"stage": "dev", "scheduler": {}}}))
    write_scheduler(cdk, {"weights": {"age": 300.0}})
    assert json.loads(cdk.read_text()) == {
        "app": "x",
        "context": {"stage": "dev", "scheduler": {"weights": {"age": 300.0}}},
    }
    with pytest.raises(ValueError, match="not a setting of this version: bogus"):
        write_scheduler(cdk, {"bogus": 1})
    assert json.loads(cdk.read_text())["context"]["scheduler"] == {"weights": {"age": 300.0}}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give one of --history FILE or --trace CSV"),
        (["--trace", "T", "--history", "T"], "give one of --history FILE or --trace CSV"),
        (["--trace", "T", "--objective", "speed"], "unknown objective 'speed'"),
        (["--trace", "T", "--holdout-days", "0"], "must be positive"),
        (["--trace", "T", "--tuning-days", "-1"], "must be positive"),
        (["--trace", "T", "--spot-fraction", "2"], "must be a share in [0, 1]"),
        (["--trace", "T", "--candidates", "1"], "--candidates"),
        (["--trace", "T", "--screen-days", "0"], "must be positive"),
        (["--trace", "T", "--finalists", "0"], "--finalists"),
        (["--trace", "T", "--semifinalists", "-1"], "--semifinalists"),
        (["--trace", "T", "--holdout-days", "30"], "leaves nothing to tune on"),
        (["--trace", "T", "--apply", "--cdk-json", "MISSING"], "does not exist"),
    ],
)
def test_bad_flags_are_named(small_trace: Path, tmp_path: Path, args: list[str], message: str) -> None:
    args = [str(small_trace) if a == "T" else str(tmp_path / a) if a == "MISSING" else a for a in args]
    # (a later --cdk-json, the MISSING case's, wins over the first)
    result = runner.invoke(app, ["tune", "--cdk-json", str(tmp_path / "none.json"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_gpus_is_refused_for_a_history_with_its_cluster(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    write_trace([_job(0, 0.0), _job(1, 9 * DAY)], path)
    pools = [Pool(name="od", gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=8)]
    cluster_path(path).write_text(json.dumps(cluster_document(pools)))
    result = runner.invoke(app, ["tune", "--history", str(path), "--gpus", "64"])
    assert result.exit_code == 2
    assert "records its cluster" in result.output


def test_a_trace_carries_the_declared_run_time(tmp_path: Path) -> None:
    from dataclasses import replace

    from spotline.trace import read_trace

    path = tmp_path / "t.csv"
    write_trace([replace(_job(0, 0.0), expected_runtime_s=5400.0), _job(1, 60.0)], path)
    assert path.read_text().splitlines()[0].endswith(",expected_runtime_s")
    jobs = read_trace(path).jobs
    assert [j.expected_runtime_s for j in jobs] == [5400.0, None]
