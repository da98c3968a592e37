"""The policy bench's tables (rich), from the runs' results."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.policy_bench.setup import (
    CHURN_SAMPLE,
    COLUMNS,
    EVAL_POLICIES,
    METRIC,
    METRICS,
    PEERS,
    TUNING,
    TUNING_REDUCED,
    interval,
)


def _fmt(mean: float, half: float = math.nan, scale: float = 1.0, digits: int = 2) -> str:
    if math.isinf(mean):
        return "inf"
    text = f"{mean / scale:.{digits}f}"
    if not math.isnan(half) and half > 0:
        text += f" ± {half / scale:.{digits}f}"
    return text


def _pair(value: Any) -> tuple[float, float]:
    mean, half = value
    return float(mean), float(half)


def _scale(metric: str) -> float:
    return next(s for label, _, _, s in METRICS if label == metric)


def print_evaluation(results: dict[str, Any], console: Console) -> None:
    console.print("Evaluation set: " + "; ".join(results["samples"]))
    console.print(
        "Tuning set (defaults chosen there only): "
        + "; ".join(s.label for s in TUNING)
        + "; searched by bench/tune.py (Philly) and bench/tune_slurm.py on: "
        + "; ".join(f"{s.label} ({s.gpus} GPUs)" for s in TUNING_REDUCED)
    )
    n = results["n_by_class"]
    console.print("jobs per class over the set: " + ", ".join(f"{c} n={n[c]:,}" for c in n))
    table = Table(title="Competent peers vs Spotline: mean ± 95% CI over the evaluation samples")
    table.add_column("metric")
    for name in EVAL_POLICIES:
        table.add_column(name, justify="right")
    table.add_column("spotline / best peer", justify="right")
    for label, _, _, scale in METRICS:
        cells = [_fmt(*_pair(results["policies"][n][label]), scale=scale) for n in EVAL_POLICIES]
        table.add_row(label, *cells, _fmt(*_pair(results["ratios"][label]), digits=3))
    console.print(table)
    goals = Table(title="Goals against the best competent peer per metric (met = met in every sample)")
    for column in ("goal", "mean ratio ± CI", "met in samples", "met", "opt-in: moving to Spot (1 h)"):
        goals.add_column(column)
    for label, row in results["goals"].items():
        moved = row["moving to Spot"]
        goals.add_row(
            label,
            _fmt(row["mean_ratio"], row["ci95"], digits=3),
            f"{row['met_in_samples']}/{row['samples']}",
            "yes" if row["met"] else "NO",
            f"{_fmt(moved['mean_ratio'], moved['ci95'], digits=3)},"
            f" met in {moved['met_in_samples']}/{row['samples']}",
        )
    console.print(goals)
    reach = results["reach"]
    floor = _fmt(*_pair(reach["jct_floor_over_best_peer"]), digits=3)
    console.print(
        f"average JCT floor (every job started at submission, never stopped) over the best peer's: {floor};"
        f" above the 1.0x goal in {reach['jct_floor_above_goal_in_samples']}/{len(results['samples'])}"
        " samples, where no policy that runs jobs at their trace speed can meet it"
    )
    lost = _fmt(*_pair(reach["lost_gpu_hours_over_best_preempting_peer"]), digits=3)
    console.print(
        f"lost GPU-hours over the best peer that preempts (FIFO never preempts; it loses only to Spot"
        f" interruptions): {lost}"
    )


def _cell(metrics: dict[str, Any], metric: str) -> float:
    """`metric` of a row: read from the row's own metrics, or from the run it names for that
    metric (the best peer per metric)."""
    source = metrics[metric] if metric in metrics and isinstance(metrics[metric], dict) else metrics
    value, _ = METRIC[metric]
    return float(value(source))


def over_samples(
    per_sample: Sequence[dict[str, dict[str, Any]]], reference: Callable[[str], str]
) -> dict[str, dict[str, dict[str, float]]]:
    """Rows of several samples (the same labels in each) as, per cell, the mean over the samples
    and the mean and 95% CI of its ratio to the cell of row `reference(label)` in the same sample
    (a paired comparison: the samples differ more from each other than the variants do; none for
    the reference row itself)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for label in per_sample[0]:
        base_label = reference(label)
        out[label] = {}
        for metric in COLUMNS:
            values = [_cell(rows[label], metric) for rows in per_sample]
            mean, _ = interval(values)
            cell = {"mean": mean, "ratio": math.nan, "ratio_ci": math.nan}
            if base_label != label:
                bases = [_cell(rows[base_label], metric) for rows in per_sample]
                ratios = [v / b for v, b in zip(values, bases, strict=True) if b != 0]
                if ratios:
                    cell["ratio"], cell["ratio_ci"] = interval(ratios)
            out[label][metric] = cell
    return out


def print_rows(title: str, rows: dict[str, dict[str, Any]], console: Console) -> None:
    """A table of variants: each cell a value, or a mean over samples with its ratio to the
    reference row (`over_samples`)."""
    table = Table(title=title)
    table.add_column("variant")
    for metric in COLUMNS:
        table.add_column(metric, justify="right")
    for label, metrics in rows.items():
        cells = []
        for metric in COLUMNS:
            cell = metrics.get(metric)
            if isinstance(cell, dict) and "ratio" in cell:
                text = _fmt(cell["mean"], scale=_scale(metric))
                if math.isfinite(cell["ratio"]):
                    text += f" x{_fmt(cell['ratio'], cell['ratio_ci'])}"
                cells.append(text)
            else:
                cells.append(_fmt(_cell(metrics, metric), scale=_scale(metric)))
        table.add_row(label, *cells)
    console.print(table)


def print_churn(results: dict[str, dict[str, dict[str, Any]]], console: Console) -> dict[str, bool]:
    table = Table(
        title=f"Spot churn: cost per useful GPU-h / deadline miss rate ({CHURN_SAMPLE.label},"
        f" {CHURN_SAMPLE.gpus} GPUs, 75% Spot)"
    )
    table.add_column("level")
    table.add_column("interruptions (spotline)", justify="right")
    names = list(next(iter(results.values())))
    for name in names:
        table.add_column(name, justify="right")
    table.add_column("goal met", justify="right")
    verdicts = {}
    for level, runs in results.items():
        cost_ok = runs["spotline"]["cost_per_useful_gpu_hour"] <= min(
            runs[p]["cost_per_useful_gpu_hour"] for p in PEERS
        )
        miss_ok = runs["spotline"]["deadline_miss_rate"] <= min(runs[p]["deadline_miss_rate"] for p in PEERS)
        verdicts[level] = cost_ok and miss_ok
        cells = [
            f"{runs[n]['cost_per_useful_gpu_hour']:.3f} / {runs[n]['deadline_miss_rate']:.3f}" for n in names
        ]
        table.add_row(
            level,
            str(runs["spotline"]["interruptions"]),
            *cells,
            (
                "yes"
                if verdicts[level]
                else f"NO (cost {'ok' if cost_ok else 'worse'}, misses {'ok' if miss_ok else 'worse'})"
            ),
        )
    console.print(table)
    return verdicts


def cpu_s() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
