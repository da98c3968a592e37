"""`bench.tune_check` checks on the evaluation set the finalist a tune declined when it recommends
nothing: the one best on the objective, whichever way the objective is better."""

from __future__ import annotations

from typing import Any

from bench.tune_check import best_declined


def _entry(
    candidate: int, config: dict[str, Any], jct: float, jain: float, finalist: bool = True
) -> dict[str, Any]:
    return {
        "candidate": candidate,
        "config": config,
        "finalist": finalist,
        "tuning": {"avg_jct_s": {"mean": jct, "ci95": 1.0}, "jain_fairness": {"mean": jain, "ci95": 0.1}},
    }


def _result(objective: str, *entries: dict[str, Any]) -> dict[str, Any]:
    return {"objective": objective, "pareto": list(entries)}


def test_the_declined_finalist_best_on_the_objective_is_checked() -> None:
    result = _result(
        "avg_jct_s",
        _entry(0, {}, 10.0, 0.5),
        _entry(3, {"weights.age": 600.0}, 8.0, 0.4),
        _entry(5, {"strategy": "random"}, 9.0, 0.9),
        _entry(7, {"weights.size": 0.0}, 1.0, 0.9, finalist=False),  # screened out: not a finalist
    )
    assert best_declined(result) == {"weights.age": 600.0}
    # a higher-is-better objective picks the highest mean
    assert best_declined({**result, "objective": "jain_fairness"}) == {"strategy": "random"}


def test_only_the_settings_in_effect_leave_nothing_to_check() -> None:
    assert best_declined(_result("avg_jct_s", _entry(0, {}, 10.0, 0.5))) is None
