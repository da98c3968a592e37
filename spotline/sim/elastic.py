"""What elastic jobs did in a run (`elastic_account`, a key of the simulator's JSON with
`--elastic-share`).

- `resizes`: resizes started (shrinks for a preemptor, give-backs, growths), and how many jobs
  were elastic;
- `gpu_hours_absorbed_from_idle`: GPU-hours elastic jobs held above the size they grew from;
- `idle_gpu_hours`: GPU-hours of the pools' current capacity (a Spot pool at the size its
  capacity trace gives it) held by nobody while the trace's jobs arrived;
- churn: GPU-hours lost to preemptions (the work, the writes and the restarts that followed) and
  to shrinks made for another job (their writes and restarts), per 1,000 useful GPU-hours, and
  beside it the same with the growths' writes and restarts; whole-job preemptions;
- the most resizes one job started within any `COOLDOWN_WINDOW_S`, and how many jobs had more
  than one in such a window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from spotline.sim import accounts as acc

if TYPE_CHECKING:
    from spotline.sim.engine import Simulation

# The window of the "at most one resize per job per 10 minutes" measure.
COOLDOWN_WINDOW_S = 600.0


def most_in_window(times: list[float], window_s: float) -> int:
    """The most of `times` (ascending) within any `window_s`-long interval (its end excluded)."""
    most, first = 0, 0
    for last, t in enumerate(times):
        while t - times[first] >= window_s:
            first += 1
        most = max(most, last - first + 1)
    return most


def elastic_account(sim: Simulation, useful_gpu_s: float) -> dict[str, Any]:
    """The elastic account of a finished run (`useful_gpu_s`: work that counted, GPU-seconds)."""
    jobs = sim.jobs
    lost = sim.accounts.lost_gpu_s

    def hours(causes: dict[int, str], restarts: dict[int, str], which: tuple[int, ...]) -> float:
        return sum(lost.get(causes[c], 0.0) + lost.get(restarts[c], 0.0) for c in which) / 3600.0

    preemption_h = hours(acc.LOSS_CAUSES, acc.RESTART_LABELS, acc.PREEMPTION_CAUSES)
    shrink_h = hours(acc.RESIZE_CAUSES, acc.RESIZE_RESTART_LABELS, (acc.SHRINK,))
    grow_h = hours(acc.RESIZE_CAUSES, acc.RESIZE_RESTART_LABELS, (acc.GROW,))
    useful_h = useful_gpu_s / 3600.0
    idle_h = sim.idle_gpu_s / 3600.0
    most = [most_in_window(j.resize_times, COOLDOWN_WINDOW_S) for j in jobs if j.resize_times]

    def per_1k(hours: float) -> float:
        return 1000.0 * hours / useful_h if useful_h > 0 else 0.0

    return {
        "elastic_jobs": sum(1 for j in jobs if j.elastic is not None),
        "resizes": sum(len(j.resize_times) for j in jobs),
        "gpu_hours_absorbed_from_idle": sum(j.absorbed_gpu_s for j in jobs) / 3600.0,
        "idle_gpu_hours": idle_h,
        "preemptions": sim.preemptions,
        "preemption_lost_gpu_hours": preemption_h,
        "shrink_lost_gpu_hours": shrink_h,
        "growth_lost_gpu_hours": grow_h,
        "churn_per_1k_useful_gpu_h": per_1k(preemption_h + shrink_h),
        "churn_with_growth_per_1k_useful_gpu_h": per_1k(preemption_h + shrink_h + grow_h),
        "max_resizes_per_job_in_10_min": max(most, default=0),
        "jobs_with_more_than_one_resize_in_10_min": sum(1 for m in most if m > 1),
    }
