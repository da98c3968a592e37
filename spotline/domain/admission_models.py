"""The values of deadline admission (`spotline.domain.admission`): the answer a deadline job gets
at submission, and the On-Demand GPUs held for it. Apart from `admission` so `models.Job` can
carry an answer without importing the code that computes it. Pure: pydantic only."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class AnswerKind(StrEnum):
    """What can be promised of a job's deadline at submission."""

    # Meets it: Spot while it can, with On-Demand GPUs held for the guard's safety net.
    MEETS = "meets"
    # Meets it only by running On-Demand (no slack for Spot, or no Spot pool for it).
    ON_DEMAND_ONLY = "on-demand-only"
    # Cannot: even On-Demand from its earliest free slot finishes after the deadline.
    CANNOT = "cannot"
    # No run time is known (declared, capped or predicted), so nothing can be promised.
    UNKNOWN = "unknown"


class OnDemandHold(BaseModel):
    """On-Demand GPUs held for an admitted deadline job: `gpus` of `pool` over [`start`, `end`)
    (epoch seconds). No other job is admitted into them while the hold may be needed."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    pool: str
    gpus: int = Field(gt=0)
    start: float
    end: float


class RuntimeRange(BaseModel):
    """A predicted run time (`spotline.domain.runtime_history`): the figure planned with
    (`planned_s`, an upper quantile, never below what the job declares) and the range seen."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    planned_s: float = Field(gt=0)
    low_s: float = Field(gt=0)
    high_s: float = Field(gt=0)
    # Where it comes from: "declared", "max_runtime_s", or "history (N runs)".
    source: str
    samples: int = Field(default=0, ge=0)


class DeadlineAnswer(BaseModel):
    """The answer to a deadline at submission (`admission.answer_deadline`)."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    kind: AnswerKind
    # The earliest finish On-Demand, epoch seconds (None when no run time is known).
    earliest_finish: float | None = None
    # What running it all On-Demand costs, at the On-Demand pool's price per GPU-hour.
    on_demand_cost: float | None = None
    runtime: RuntimeRange | None = None
    hold: OnDemandHold | None = None
    summary: str = ""

    @property
    def feasible(self) -> bool:
        return self.kind in (AnswerKind.MEETS, AnswerKind.ON_DEMAND_ONLY)
