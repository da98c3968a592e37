"""Simulator variants: mechanisms that have not graduated into the scheduler's settings, run by
`spotline simulate --variant NAME` (repeatable), in the spirit of Kueue's feature gates.

A variant is a `PlannerExtension` (`spotline.domain.extension`): hooks the planner calls at fixed
points of a pass. It lives only here and in the simulator: never in `SchedulerConfig`, the
control plane or a deployment. Its lifecycle (docs/simulator.md, "Variants"):

1. A new mechanism lands as a variant, registered in `VARIANTS` with `register`.
2. It is judged against the shipped policy on the tuning set first, then on the held-out
   evaluation set (`python -m bench.contention --tuning --variant NAME`, then without
   `--tuning`).
3. It graduates only when it wins on both: its code moves into the planner (a setting only if a
   user has a reason to choose it) and the variant goes. Otherwise it is deleted in the same
   piece of work, and its record is a design note under design-notes/ (with its patch, when
   worth keeping); it is never merged into main.

So `VARIANTS` is empty between pieces of work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spotline.domain.extension import Extensions, PlannerExtension


@dataclass(frozen=True)
class Variant:
    """A registered variant: its name (what `--variant` takes), one line of what it changes,
    and its extension of the planner."""

    name: str
    summary: str
    extension: PlannerExtension


# The variants `--variant` knows, by name.
VARIANTS: dict[str, Variant] = {}


class VariantError(ValueError):
    """Variants that cannot run: a name not registered (the message lists the known ones), or a
    name given twice."""


def register(variant: Variant) -> Variant:
    """Add `variant` to `VARIANTS` (its name once)."""
    if variant.name in VARIANTS:
        raise ValueError(f"variant {variant.name!r} is registered twice")
    VARIANTS[variant.name] = variant
    return variant


def extension_of(names: Sequence[str]) -> PlannerExtension | None:
    """The planner extension that runs the variants `names` together, in order (None for none);
    `VariantError` names the unknown ones and lists the known."""
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        known = ", ".join(sorted(VARIANTS)) or "none are registered"
        raise VariantError(f"unknown variant {', '.join(unknown)} (known: {known})")
    if not names:
        return None
    if len(set(names)) != len(names):
        raise VariantError(f"a variant is given twice: {', '.join(names)}")
    return Extensions([VARIANTS[name].extension for name in names])
