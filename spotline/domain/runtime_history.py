"""Run-time prediction from history, in the style of 3Sigma (Park et al., EuroSys '18) and
Tiresias (Gu et al., NSDI '19): a job's run time is predicted from the runs of earlier jobs like
it (the same team and name, as the adapter keys them), and its error is used conservatively:
the figure planned with is an upper quantile of what history says, never a point estimate.

- With a declared run time (`expected_runtime_s`) and earlier runs that declared one too, the
  declaration scaled by how the team's declarations turned out: the upper quantile of
  (actual / declared). It only ever raises the declaration: a team that under-declares is
  planned at what its runs took; one that over-declares (a time limit) keeps its declaration,
  and the range shows what history expects. Lowering it was measured and broke promises
  (design-notes/deadline-admission.md): a job's own error is not the team's.
- Without a declaration, the upper quantile of the earlier run times.
- Fewer than `MIN_RUNS` earlier runs: the declaration as it is (`admission.declared_runtime`).
- A `max_runtime_s` cap bounds every prediction (no run lasts longer than its cap).

Pure: the history is passed in (the control plane reads a bounded page of the team's finished
jobs; the simulator keeps the runs it has seen end). The simulator and the control plane call
the same `predict_runtime`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from spotline.domain.admission import declared_runtime
from spotline.domain.admission_models import RuntimeRange
from spotline.domain.models import Job

# Earlier runs needed before history speaks, and the quantile planned with.
MIN_RUNS = 3
PLANNED_QUANTILE = 0.9


@dataclass(frozen=True)
class PastRun:
    """One earlier job's run time (seconds of work, interruptions left out) and what it declared."""

    runtime_s: float
    declared_s: float | None = None


def upper_quantile(values: Sequence[float], q: float) -> float:
    """The `q` quantile of `values`, rounded up to an observed value (the smallest value with at
    least a share `q` of the values at or below it): with under 10 values at q = 0.9, the maximum."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def predict_runtime(
    job: Job, history: Sequence[PastRun], *, quantile: float = PLANNED_QUANTILE
) -> RuntimeRange | None:
    """The job's predicted run time, planned at an upper `quantile`, with the range history
    shows (module docstring); None when neither the job nor its history tells."""
    declared = declared_runtime(job)
    cap = job.spec.max_runtime_s
    expected = job.spec.expected_runtime_s
    runs = [r for r in history if r.runtime_s > 0]
    scaled = [r for r in runs if r.declared_s]
    if expected is not None and len(scaled) >= MIN_RUNS:
        ratios = [r.runtime_s / (r.declared_s or 1.0) for r in scaled]
        samples = [expected * ratio for ratio in ratios]
        source = f"history: {len(scaled)} runs' actual / declared"
    elif expected is None and len(runs) >= MIN_RUNS:
        samples = [r.runtime_s for r in runs]
        source = f"history: {len(runs)} runs"
    else:
        return declared
    planned = upper_quantile(samples, quantile)
    low, high = min(samples), max(samples)
    if expected is not None and planned < expected:
        planned, source = expected, f"declared; {source} expect less"
    if cap is not None:
        planned, low, high = min(planned, cap), min(low, cap), min(high, cap)
    return RuntimeRange(planned_s=planned, low_s=low, high_s=high, source=source, samples=len(samples))
