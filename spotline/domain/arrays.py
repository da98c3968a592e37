"""Job arrays (sweeps) and dependencies (pipelines): the pure rules.

An array is one submission that makes one job per element, as Slurm's `--array` and AWS Batch's
array jobs do. `array: "0-15"` (or `"1,3,8-11"`) names the indexes; `sweep: {lr: [1e-3, 1e-4],
seed: [1, 2]}` makes one element per combination of values (the cartesian product, the first
parameter varying slowest). `max_running: N` caps how many elements hold GPUs at once, like
Slurm's `--array=0-15%4`.

A dependency is Slurm's `--dependency`: `after: [id, ...]` with `dependency: afterok` (the
default: every job named must end SUCCEEDED) or `afterany` (each must end, however).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

# The elements one submission may make. The array is written in steps (its record, then its
# elements in chunks, then the flip that lets them run: spotline.aws.array_items), so the limit
# is the time one request may take behind API Gateway (29 s), not a transaction's 100 items.
MAX_ARRAY_ELEMENTS = 1000
# The jobs one job may wait for (after an array id is expanded to its elements).
MAX_DEPENDENCIES = 64
# The index and the parameters an element gets in its environment.
ARRAY_INDEX_ENV = "SPOTLINE_ARRAY_INDEX"
ARRAY_ID_ENV = "SPOTLINE_ARRAY_ID"
SWEEP_ENV_PREFIX = "SPOTLINE_PARAM_"

_RANGE_PART = re.compile(r"^\s*(\d{1,6})\s*(?:-\s*(\d{1,6})\s*)?$")
_PARAM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")


class Dependency(StrEnum):
    """How a job's dependencies must end before it may start (Slurm's names)."""

    AFTEROK = "afterok"
    AFTERANY = "afterany"


def parse_array_range(text: str) -> list[int]:
    """The indexes of `array: "0-15"` or `"1,3,8-11"`: sorted, each once. ValueError naming the
    fault for anything else (a reversed range, a negative or non-numeric index, too many)."""
    indexes: set[int] = set()
    for part in text.split(","):
        matched = _RANGE_PART.match(part)
        if matched is None:
            raise ValueError(f"{part.strip()!r} is not an index or a range A-B (e.g. 0-15 or 1,3,8-11)")
        low = int(matched.group(1))
        high = int(matched.group(2)) if matched.group(2) is not None else low
        if high < low:
            raise ValueError(f"range {low}-{high} runs backwards")
        if high - low + 1 + len(indexes) > MAX_ARRAY_ELEMENTS:
            raise ValueError(f"more than {MAX_ARRAY_ELEMENTS} elements (one submission's limit)")
        indexes.update(range(low, high + 1))
    if len(indexes) > MAX_ARRAY_ELEMENTS:
        raise ValueError(f"more than {MAX_ARRAY_ELEMENTS} elements (one submission's limit)")
    return sorted(indexes)


def param_text(value: object) -> str:
    """A sweep value as its environment variable holds it (JSON's spelling of booleans)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check_sweep(sweep: Mapping[str, Sequence[object]]) -> None:
    """ValueError naming the fault of a sweep matrix: no parameter, a bad name, an empty or
    repeated list of values, or more combinations than one submission may make."""
    if not sweep:
        raise ValueError("names no parameter")
    combinations = 1
    for name, values in sweep.items():
        if not _PARAM_NAME.match(name):
            raise ValueError(f"parameter {name!r}: letters, digits and _ only, not starting with a digit")
        if not values:
            raise ValueError(f"parameter {name!r} has no value")
        texts = [param_text(v) for v in values]
        if len(set(texts)) != len(texts):
            raise ValueError(f"parameter {name!r} repeats a value")
        combinations *= len(values)
    if combinations > MAX_ARRAY_ELEMENTS:
        raise ValueError(
            f"{combinations} combinations, over the {MAX_ARRAY_ELEMENTS} one submission may make"
        )


def sweep_elements(sweep: Mapping[str, Sequence[object]]) -> list[dict[str, str]]:
    """One parameter set per combination, the first parameter varying slowest."""
    names = list(sweep)
    return [
        {name: param_text(value) for name, value in zip(names, combo, strict=True)}
        for combo in itertools.product(*(sweep[n] for n in names))
    ]


def element_id(array_id: str, index: int) -> str:
    """An element's job id: the array id and its index (Slurm's `<array>_<index>`)."""
    return f"{array_id}-{index}"


def element_environment(array_id: str, index: int, params: Mapping[str, str]) -> dict[str, str]:
    """The variables an element's process gets besides the agent's."""
    env = {ARRAY_ID_ENV: array_id, ARRAY_INDEX_ENV: str(index)}
    for name, value in params.items():
        env[SWEEP_ENV_PREFIX + name.upper()] = value
    return env


# --- dependencies ---------------------------------------------------------------------------

# States a dependency may be in, by what they mean for the job that waits for it. A requeued job
# (PREEMPTED, INTERRUPTED, then PENDING again) is not done: only a final state is.
_DONE = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})


@dataclass(frozen=True, slots=True)
class DependencyVerdict:
    """What a job's dependencies allow: `ready`, or the first job that holds it back (`waiting`
    for it to end), or the first that broke the chain (`broken`: ended other than SUCCEEDED
    under afterok, or does not exist)."""

    outcome: str  # "ready" | "waiting" | "broken"
    job_id: str | None = None
    state: str | None = None

    def text(self) -> str:
        """Why, in the words the API and the CLI show."""
        if self.outcome == "waiting":
            return f"waiting for dependency {self.job_id} to end ({self.state})"
        if self.outcome == "broken":
            if self.state is None:
                return f"dependency {self.job_id} does not exist"
            return f"dependency {self.job_id} ended {self.state} (afterok needs SUCCEEDED)"
        return "dependencies met"


def dependency_verdict(
    after: Sequence[str], mode: Dependency, states: Mapping[str, str | None]
) -> DependencyVerdict:
    """Whether a job that waits for `after` (in `mode`) may be queued, given each dependency's
    state now (`states[id]`: a JobState name, or None for a job that does not exist).

    1. A dependency broken (afterok: it ended FAILED or CANCELLED, or it is gone): broken, and
       the job is cancelled with the chain under it.
    2. Else a dependency not yet ended (whatever it went through: a requeue is not an end):
       waiting for the first such, in the order given.
    3. Else: ready.
    """
    waiting: DependencyVerdict | None = None
    for dep in after:
        state = states.get(dep)
        if state is None:
            return DependencyVerdict("broken", dep, None)
        if state in _DONE:
            if mode is Dependency.AFTEROK and state != "SUCCEEDED":
                return DependencyVerdict("broken", dep, state)
        elif waiting is None:
            waiting = DependencyVerdict("waiting", dep, state)
    return waiting or DependencyVerdict("ready")
