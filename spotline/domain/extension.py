"""The planner's extension point: what a simulator variant may change in a pass.

A mechanism that has not graduated into `SchedulerConfig` runs in the simulator only, as a
variant (`spotline.sim.variants`, `spotline simulate --variant NAME`). It gives `plan` a
`PlannerExtension`, whose `for_pass` makes one `PassHooks` per pass; the pass calls the hooks at
fixed points, and the default hooks change nothing (the shipped policy is `PassHooks()`):

- `candidate_pools`: the pools a job may use, in preference order (after placement's rules);
- `may_preempt`: just before a job would preempt (it does not fit, its delay is over, the
  budget is not spent), a reason it waits instead (`decisions.HeldByVariant`);
- `order_victims`: the candidates in the order `select_victims` takes them (after the
  strategy's order), or fewer of them;
- `decided`: each decision of the pass as it is made (for a variant that keeps what the pass
  did so far, e.g. which class found no victim).

Hooks are pure, as the planner is: they read what they are given and the state they keep for
their own pass, never a clock, a random source or anything across passes. A variant that
graduates becomes part of the planner (and a setting only if a user has a reason to choose it),
and its hooks go.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from spotline.domain.config import SchedulerConfig
from spotline.domain.models import ClusterSnapshot, Job, Pool

if TYPE_CHECKING:
    from spotline.domain.decisions import Decision
    from spotline.domain.preemption import Candidate


class PassHooks:
    """One pass's hooks; each default changes nothing. A variant overrides the ones it needs."""

    def candidate_pools(self, job: Job, pools: list[Pool]) -> list[Pool]:
        """The pools `job` may use, in preference order, given placement's (`pools`)."""
        return pools

    def may_preempt(self, job: Job, priority: float) -> str | None:
        """Why `job` (of effective priority `priority`) waits instead of preempting in this pass,
        or None: it may preempt."""
        return None

    def order_victims(self, preemptor: Job, candidates: list[Candidate]) -> list[Candidate]:
        """The eligible `candidates` in the order to take them as `preemptor`'s victims, given in
        the strategy's order; leaving one out keeps it from being a victim."""
        return candidates

    def decided(self, decision: Decision) -> None:
        """Told each decision of the pass, in order, as it is made."""


class PlannerExtension(Protocol):
    """A variant's extension of the planner: its name, and its hooks for each pass."""

    @property
    def name(self) -> str: ...

    def for_pass(self, snapshot: ClusterSnapshot, now: float, config: SchedulerConfig) -> PassHooks:
        """The hooks of one pass (fresh for each: a pass's state stays in its own pass)."""
        ...


class _Chain(PassHooks):
    """Several variants' hooks in turn: pools and victims pass through each, the first reason to
    wait holds, and each is told every decision."""

    def __init__(self, hooks: Sequence[PassHooks]) -> None:
        self._hooks = tuple(hooks)

    def candidate_pools(self, job: Job, pools: list[Pool]) -> list[Pool]:
        for hooks in self._hooks:
            pools = hooks.candidate_pools(job, pools)
        return pools

    def may_preempt(self, job: Job, priority: float) -> str | None:
        for hooks in self._hooks:
            why = hooks.may_preempt(job, priority)
            if why is not None:
                return why
        return None

    def order_victims(self, preemptor: Job, candidates: list[Candidate]) -> list[Candidate]:
        for hooks in self._hooks:
            candidates = hooks.order_victims(preemptor, candidates)
        return candidates

    def decided(self, decision: Decision) -> None:
        for hooks in self._hooks:
            hooks.decided(decision)


class Extensions:
    """Several extensions as one (`spotline simulate --variant A --variant B`): their hooks in
    the order given."""

    def __init__(self, extensions: Sequence[PlannerExtension]) -> None:
        self.extensions = tuple(extensions)

    @property
    def name(self) -> str:
        return " + ".join(e.name for e in self.extensions)

    def for_pass(self, snapshot: ClusterSnapshot, now: float, config: SchedulerConfig) -> PassHooks:
        return _Chain([e.for_pass(snapshot, now, config) for e in self.extensions])
