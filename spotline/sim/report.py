"""The rich table `spotline simulate` prints: one column per policy, one row per metric."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.table import Table

from spotline.domain.models import PRIORITIES_HIGH_FIRST
from spotline.sim.runner import PolicyRun, SimulationReport


def _hours(seconds: float) -> str:
    return f"{seconds / 3600.0:.2f}"


def _by_class(key: str, priority: str) -> Callable[[PolicyRun], str]:
    return lambda run: _hours(run.metrics[key][priority])


def _costliest(cost_by_team: dict[str, float]) -> str:
    if not cost_by_team:
        return "-"
    team = max(cost_by_team, key=lambda t: cost_by_team[t])
    return f"{team} {cost_by_team[team]:,.0f}"


def _rows() -> list[tuple[str, Callable[[PolicyRun], str]]]:
    def metric(key: str, fmt: Callable[[Any], str]) -> Callable[[PolicyRun], str]:
        return lambda run: fmt(run.metrics[key])

    rows: list[tuple[str, Callable[[PolicyRun], str]]] = [
        ("completed / jobs", lambda r: f"{r.metrics['completed']}/{r.metrics['jobs']}"),
        ("avg JCT (h)", metric("avg_jct_s", _hours)),
        ("p99 JCT (h)", metric("p99_jct_s", _hours)),
    ]
    for p in PRIORITIES_HIGH_FIRST:
        rows.append((f"avg JCT {p.value} (h)", _by_class("avg_jct_s_by_priority", p.value)))
    for p in PRIORITIES_HIGH_FIRST:
        rows.append((f"p99 wait {p.value} (h)", _by_class("wait_p99_s_by_priority", p.value)))
    rows += [
        ("GPU utilization", metric("gpu_utilization", lambda v: f"{v:.3f}")),
        ("goodput", metric("goodput", lambda v: f"{v:.3f}")),
        ("lost GPU-hours", metric("lost_gpu_hours", lambda v: f"{v:,.1f}")),
        ("preemptions", metric("preemptions", str)),
        ("interruptions", metric("interruptions", str)),
        ("cost / useful GPU-h", metric("cost_per_useful_gpu_hour", lambda v: f"{v:.3f}")),
        (
            "slowdown p50 / p99",
            lambda r: f"{r.metrics['slowdown_p50']:.2f} / {r.metrics['slowdown_p99']:.1f}",
        ),
        ("costliest team (OD GPU-h)", metric("cost_by_team", _costliest)),
        ("Jain's fairness", metric("jain_fairness", lambda v: f"{v:.3f}")),
        ("finish-time fairness (worst team)", metric("ftf_max", lambda v: f"{v:.2f}")),
        ("deadline miss rate", metric("deadline_miss_rate", lambda v: f"{v:.3f}")),
        ("events/s", lambda r: f"{r.events / r.wall_s:,.0f}" if r.wall_s > 0 else "-"),
    ]
    return rows


def summary_table(report: SimulationReport) -> Table:
    table = Table(
        title=f"{report.trace}: {report.gpus} GPUs ({report.spot_fraction:.0%} Spot), seed {report.seed}",
        caption="cost in On-Demand GPU-hours per useful GPU-hour (On-Demand = 1)",
    )
    table.add_column("metric")
    for name in report.runs:
        table.add_column(name, justify="right")
    for label, cell in _rows():
        table.add_row(label, *(cell(run) for run in report.runs.values()))
    return table
