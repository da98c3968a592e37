"""An elastic job's spec: the sizes it may run at, and how often it may change size.

`elastic: {min_gpus, max_gpus}` says the job resumes from its checkpoint at any size between the
two (every whole number of GPUs, or those of `sizes`, or `min_gpus + k * step`); `cooldown_s`
(default 10 minutes) is the least time between two of its resizes. A resize is a checkpoint, a
stop and a restart at the new size; the job learns its size from `SPOTLINE_WORLD_SIZE`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

# The sizes one spec may list.
MAX_ELASTIC_SIZES = 64
# The least time between two resizes of a job unless its spec says otherwise (s).
DEFAULT_COOLDOWN_S = 600.0
# The variable that tells a run its size (GPUs over all its nodes).
WORLD_SIZE_ENV = "SPOTLINE_WORLD_SIZE"


class ElasticSpec(BaseModel):
    """`elastic:` in a job spec: the range of sizes, and the cooldown between resizes."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True, allow_inf_nan=False)

    min_gpus: int = Field(
        gt=0, le=4096, strict=True, description="The fewest GPUs it runs on (it is shrunk no further)."
    )
    max_gpus: int = Field(
        gt=0, le=4096, strict=True, description="The most GPUs it runs on (it is grown no further)."
    )
    sizes: list[Annotated[int, Field(gt=0, le=4096, strict=True)]] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_ELASTIC_SIZES,
        description="The sizes it may run at (from min_gpus to max_gpus, both listed); every whole"
        " number between them when neither this nor step is given.",
    )
    step: int | None = Field(
        default=None,
        gt=0,
        le=4096,
        strict=True,
        description="Sizes min_gpus, min_gpus + step, ... up to max_gpus (instead of sizes).",
    )
    cooldown_s: float = Field(
        default=DEFAULT_COOLDOWN_S,
        ge=0,
        le=1e9,
        strict=True,
        description="The least time between two resizes of the job, in seconds (10 minutes by default).",
    )

    @model_validator(mode="after")
    def _sizes_in_range(self) -> ElasticSpec:
        if self.max_gpus < self.min_gpus:
            raise ValueError(f"max_gpus: {self.max_gpus} is below min_gpus {self.min_gpus}")
        if self.sizes is not None and self.step is not None:
            raise ValueError("sizes: give sizes or step, not both")
        if self.sizes is not None:
            if len(set(self.sizes)) != len(self.sizes):
                raise ValueError("sizes: lists a size twice")
            outside = [s for s in self.sizes if not self.min_gpus <= s <= self.max_gpus]
            if outside:
                raise ValueError(f"sizes: {outside[0]} is outside min_gpus..max_gpus")
            if self.min_gpus not in self.sizes or self.max_gpus not in self.sizes:
                raise ValueError("sizes: must list min_gpus and max_gpus")
        if self.step is not None and (self.max_gpus - self.min_gpus) % self.step:
            raise ValueError(
                f"step: {self.step} does not lead from min_gpus {self.min_gpus} to max_gpus {self.max_gpus}"
            )
        return self

    def ladder(self) -> tuple[int, ...]:
        """Every size it may run at, ascending."""
        if self.sizes is not None:
            return tuple(sorted(self.sizes))
        return tuple(range(self.min_gpus, self.max_gpus + 1, self.step or 1))

    def node_sizes(self, gpus_per_node: int) -> tuple[int, ...]:
        """The sizes of a multi-node job with `gpus_per_node` GPUs on each node: two or more whole
        nodes."""
        return tuple(s for s in self.ladder() if s % gpus_per_node == 0 and s >= 2 * gpus_per_node)
