"""The control plane's observations of Spot capacity (`SpotPoolStore`), from the signals AWS gives:

- an EC2 Spot interruption warning for an instance running a Spotline job: its pool is losing
  capacity (missing, from the warning's time);
- a Spot launch that sits RUNNABLE in Batch past `spot_missing_after_s`: no capacity (missing,
  from the threshold's end);
- a Spot launch that starts: capacity is there.

A rebalance recommendation is only a risk, not a loss: besides the checkpoint it asks for, it
records the pool as at risk (`observe_risk`; the deadline guard's rule 7). Recording never fails
the reaction it rides on: a storage error is logged and the next signal records again
(observations are idempotent).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from spotline.control.errors import InvalidTransition, StaleJobError
from spotline.control.lifecycle import requeue_unstarted, stop_runs
from spotline.control.plane import ControlPlane
from spotline.control.ports import SpotPoolStore
from spotline.control.records import JobRecord
from spotline.domain import JobState
from spotline.domain.deadline import PassPlans, spot_unsafe
from spotline.domain.models import SpotPoolSignal
from spotline.domain.placement import changeover_h, step_h

logger = logging.getLogger(__name__)


def spot_pools(cp: ControlPlane) -> list[str]:
    return [p.name for p in cp.config.pools if p.is_spot]


def observe(cp: ControlPlane, pools: Iterable[str], available: bool, at: float, why: str) -> list[str]:
    """Record the observation for each of `pools` that is a Spot pool; the pools whose record it
    changed."""
    state = "there" if available else "missing"
    return _record(cp, pools, lambda store, pool: store.observe(pool, available, at), state, why)


def observe_risk(cp: ControlPlane, pools: Iterable[str], at: float, why: str) -> list[str]:
    """Record each of `pools` that is a Spot pool as at risk from `at` (a rebalance
    recommendation); the pools whose record it changed."""
    return _record(cp, pools, lambda store, pool: store.observe_risk(pool, at), "at risk", why)


def _record(
    cp: ControlPlane,
    pools: Iterable[str],
    write: Callable[[SpotPoolStore, str], bool],
    state: str,
    why: str,
) -> list[str]:
    store = cp.spot_pools
    if store is None:
        return []
    spot = set(spot_pools(cp))
    changed: list[str] = []
    for pool in dict.fromkeys(pools):
        if pool not in spot:
            continue
        try:
            if write(store, pool):
                changed.append(pool)
                logger.info("Spot capacity %s in %s (%s)", state, pool, why)
        except Exception:
            logger.warning("Spot observation not recorded", extra={"pool": pool, "why": why}, exc_info=True)
    return changed


def observe_unstarted(cp: ControlPlane, oldest_unstarted_s: Mapping[str, float], now: float) -> list[str]:
    """A Spot pool whose oldest submitted launch has waited past `spot_missing_after_s` has no
    capacity, from the moment the threshold passed."""
    threshold = cp.config.spot_missing_after_s
    changed: list[str] = []
    for pool, age in oldest_unstarted_s.items():
        if age > threshold:
            changed += observe(cp, [pool], False, now - age + threshold, f"a launch RUNNABLE for {age:.0f}s")
    return changed


def signals(cp: ControlPlane, now: float) -> dict[str, SpotPoolSignal]:
    """What the pass plans from: the Spot pools' signals (one BatchGetItem), none without a store."""
    if cp.spot_pools is None:
        return {}
    return cp.spot_pools.signals(spot_pools(cp), now)


def leave_missing_spot(cp: ControlPlane, active: Iterable[JobRecord], now: float) -> list[tuple[str, str]]:
    """Deadline jobs waiting on a Spot launch (ADMITTED: RUNNABLE in Batch, or its launch not
    yet recorded) in a pool last seen without capacity, that the deadline guard now sends
    On-Demand (behind their line, or the outage longer than their slack affords): requeued
    (their Batch job stopped; a launch under way finds the run gone and stops what it
    submitted), so the next pass places them On-Demand. (job id, why) of each."""
    pools = {p.name: p for p in cp.config.pools if p.is_spot}
    waiting = [
        r
        for r in active
        if r.state is JobState.ADMITTED
        and r.job.pool in pools
        and r.job.spec.deadline_at is not None
        and r.job.spec.expected_runtime_s is not None
    ]
    if not waiting:
        return []
    seen = signals(cp, now)
    scheduler = cp.config.scheduler
    missing = [r for r in waiting if (s := seen.get(r.job.pool or "")) is not None and not s.available]
    # The pass's plan budget, here too: the soonest deadlines get the plan, the rest the rules.
    plans = PassPlans.for_waiting([r.job for r in missing], scheduler, now)
    left: list[tuple[str, str]] = []
    for record in missing:
        signal = seen[record.job.pool or ""]
        why = spot_unsafe(
            record.job,
            now,
            on_spot=False,
            spot=signal,
            changeover_h=changeover_h(scheduler),
            step_h=step_h(scheduler),
            plans=plans,
        )
        if why is None:
            continue
        reason = f"left Spot {record.job.pool}, missing for {signal.outage_s:.0f}s: {why}"
        try:
            moved = requeue_unstarted(cp, record, now=now, reason=reason)
        except (StaleJobError, InvalidTransition) as error:
            logger.info("job moved on by itself", extra={"job_id": record.id, "why": str(error)})
            continue
        stop_runs(cp, record.id, moved.terminating_batch_job_ids, "Spotline: Spot missing; moving On-Demand")
        left.append((record.id, why))
    return left
