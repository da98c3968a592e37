"""The single-job table per trace family: its data ships with the repository, its statistics
and goal rows follow from the outcomes, and a bad flag is refused."""

from __future__ import annotations

import pytest

from bench import deadline_families as fam
from spotline.sim.deadline import Outcome


def test_every_family_loads_from_the_repository() -> None:
    grids = {}
    for family in fam.FAMILIES:
        traces = family.load()
        assert traces, family.key
        grids[family.key] = {t.gap_seconds for t in traces}
    assert grids == {
        "aws-2022-10-1node": {600},
        "aws-2023-08-16node": {300},
        "aws-2023-02-1node": {195},
        "aws-2023-08-4node-preempt": {300},
    }
    assert len(fam.FAMILIES[2].load()) == 9 and len(fam.FAMILIES[3].load()) == 3


def _outcomes(costs: list[float], policy: str, missed: int = 0) -> list[Outcome]:
    return [Outcome(0.0, policy, c, i >= missed, 0.0, 0.0, 0) for i, c in enumerate(costs)]


def test_summary_measures_the_gap_against_the_cheaper_simple_policy() -> None:
    results = {
        "spotline": _outcomes([0.60, 0.70, 0.65, 0.62], "spotline"),
        "uniform-progress": _outcomes([0.70, 0.80, 0.75, 0.72], "uniform-progress"),
        "greedy": _outcomes([0.66, 0.78, 0.70, 0.70], "greedy"),
        "omniscient": _outcomes([0.55, 0.62, 0.60, 0.58], "omniscient"),
    }
    row = fam.summarise(results, seed=1)
    assert row["best_simple"] == "greedy"
    gap = row["gap"]
    assert isinstance(gap, dict)
    assert gap["spotline"] == pytest.approx(0.0550)
    assert gap["best_simple"] == pytest.approx(0.1225)
    assert row["gap_ratio"] == pytest.approx(0.0550 / 0.1225)
    low, high = row["gap_ratio_ci"]  # type: ignore[misc]
    assert low <= row["gap_ratio"] <= high
    assert row["goals"] == {
        "no_misses": True,
        "cost_at_most_min_simple": True,
        "gap_at_most_half": True,
        "gap_at_most_half_whole_ci": high <= 0.5,
    }


def test_a_miss_or_a_dearer_mean_is_a_missed_goal() -> None:
    results = {
        "spotline": _outcomes([0.80, 0.80], "spotline", missed=1),
        "uniform-progress": _outcomes([0.70, 0.70], "uniform-progress"),
        "greedy": _outcomes([0.75, 0.75], "greedy"),
        "omniscient": _outcomes([0.60, 0.60], "omniscient"),
    }
    goals = fam.summarise(results, seed=1)["goals"]
    assert isinstance(goals, dict)
    assert not goals["no_misses"] and not goals["cost_at_most_min_simple"] and not goals["gap_at_most_half"]


def test_unknown_family_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        fam.main(["--families", "aws-1999"])
    assert caught.value.code == 2
    assert "--families: unknown aws-1999" in capsys.readouterr().err
