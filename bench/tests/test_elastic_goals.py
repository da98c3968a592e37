"""The elastic bench's goals table (`bench.elastic.print_tables`): each goal's value per run pair,
and a goal met only when every sample's mean meets it."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from bench import elastic


def _run(jct: float, wait: float, churn: float, account: dict[str, Any] | None = None) -> dict[str, Any]:
    run: dict[str, Any] = {
        "avg_jct_s": jct,
        "wait_p99_s_by_priority": {"critical": wait, "high": wait / 2},
        "preemption_churn_per_1k_useful_gpu_h": churn,
        "preemptions": 3,
    }
    if account is not None:
        run["elastic_account"] = account
    return run


def _account(churn: float, absorbed: float, idle: float, most: int) -> dict[str, Any]:
    return {
        "churn_per_1k_useful_gpu_h": churn,
        "gpu_hours_absorbed_from_idle": absorbed,
        "idle_gpu_hours": idle,
        "max_resizes_per_job_in_10_min": most,
        "resizes": 4,
    }


def _pair(churn: float, absorbed: float, jct: float, wait: float, most: int = 1) -> dict[str, dict[str, Any]]:
    return {
        "spotline": _run(jct, wait, 99.0, _account(churn, absorbed, 10.0 - absorbed, most)),
        "spotline-fixed": _run(1000.0, 100.0, 10.0),
        "kueue": _run(1200.0, 300.0, 20.0),
    }


def test_goals_are_met_only_where_every_sample_meets_them() -> None:
    results = {
        "a": [_pair(4.0, 9.0, 900.0, 100.0), _pair(5.0, 8.0, 950.0, 90.0)],
        "b": [_pair(6.0, 9.0, 1100.0, 100.0), _pair(7.0, 9.0, 900.0, 100.0, most=2)],
    }
    console = Console(record=True, width=300)
    met = elastic.print_tables(results, console)
    assert met == {
        "churn <= 0.5x without elasticity": False,  # b: 0.65x
        "otherwise idle GPU-hours absorbed >= 80%": True,  # 85% and 90%
        "urgent p99 wait <= 1.0x without elasticity": True,
        "average JCT < 1.0x without elasticity": False,  # b: 1.1x and 0.9x, a mean of 1.0x
        "resizes per job per 10 min <= 1": False,
    }
    assert "Goals of elastic jobs" in console.export_text()
