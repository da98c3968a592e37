"""PNG figures of a simulation (`spotline simulate --plot DIR`), drawn with matplotlib (Agg).

- queued.png: jobs waiting over time, one line per policy;
- utilization.png: share of the cluster's GPUs held over time, one line per policy;
- wait_cdf.png: CDF of waits (first start - submit), one panel per priority class;
- lost_gpu_hours.png: GPU-hours lost to preemptions and Spot interruptions, per policy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from spotline.domain.models import PRIORITIES_HIGH_FIRST
from spotline.sim.runner import SimulationReport

_POINTS = 2000
_DAY_S = 86400.0


def _resample(times: np.ndarray, values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The step function (times, values) read at `grid` (the last sample at or before)."""
    index = np.searchsorted(times, grid, side="right") - 1
    out = np.where(index >= 0, values[np.clip(index, 0, None)], 0.0)
    return np.asarray(out, dtype=float)


def write_plots(report: SimulationReport, directory: Path) -> list[Path]:
    """Write the four figures into `directory` (created if needed); return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    runs = report.runs
    end = max((s.t for run in runs.values() for s in run.series), default=0.0)
    grid = np.linspace(0.0, max(end, 1.0), _POINTS)
    capacity = float(report.gpus)

    for name, ylabel, title, pick in (
        ("queued.png", "jobs waiting", "Queued jobs over time", lambda s: float(s.queued_jobs)),
        (
            "utilization.png",
            "GPUs held / cluster GPUs",
            "GPU utilization over time",
            lambda s: s.used_gpus / capacity,
        ),
    ):
        fig, ax = plt.subplots(figsize=(10, 4.5))
        for policy, run in runs.items():
            if not run.series:
                continue
            times = np.array([s.t for s in run.series])
            values = np.array([pick(s) for s in run.series])
            ax.plot(grid / _DAY_S, _resample(times, values, grid), label=policy, linewidth=1)
        ax.set_xlabel("days since the trace start")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title} ({report.gpus} GPUs, seed {report.seed})")
        ax.legend()
        fig.tight_layout()
        path = directory / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)

    fig, axes = plt.subplots(1, len(PRIORITIES_HIGH_FIRST), figsize=(14, 4), sharey=True)
    for ax, priority in zip(axes, PRIORITIES_HIGH_FIRST, strict=True):
        for policy, run in runs.items():
            waits = np.sort(
                [
                    j.first_start - j.submit
                    for j in run.jobs
                    if j.priority is priority and j.first_start is not None
                ]
            )
            if len(waits) == 0:
                continue
            hours = np.maximum(waits / 3600.0, 1e-3)
            ax.step(hours, np.arange(1, len(hours) + 1) / len(hours), where="post", label=policy, linewidth=1)
        ax.set_xscale("log")
        ax.set_title(f"{priority.value}")
        ax.set_xlabel("wait (hours, log)")
    axes[0].set_ylabel("share of jobs")
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
            break
    fig.suptitle("CDF of waits per priority class")
    fig.tight_layout()
    path = directory / "wait_cdf.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)

    fig, ax = plt.subplots(figsize=(7, 4))
    names = list(runs)
    lost = [runs[n].metrics["lost_gpu_hours"] for n in names]
    ax.bar(names, lost, color="tab:red")
    ax.set_ylabel("GPU-hours")
    ax.set_title("GPU-hours lost to preemptions and Spot interruptions")
    fig.tight_layout()
    path = directory / "lost_gpu_hours.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written
