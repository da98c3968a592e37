"""The reconciler: finds jobs that an event never came for, and moves them on.

It reads only the `active` index (jobs holding GPUs: bounded by the cluster, never the queue):

1. ADMITTED without a Batch job after `launch_timeout_s` (the launch workflow never ran or
   died): requeue.
2. ADMITTED with a Batch job that never started after `start_timeout_s` (no capacity in the
   pool, e.g. Spot unavailable): stop it and requeue, so the next pass may pick another pool.
3. CHECKPOINTING past its deadline plus `checkpoint_overrun_s` (the workflow failed or never
   started): stop it and requeue with the work lost since its last checkpoint.
4. RUNNING without a heartbeat for `heartbeat_timeout_s`: the host is presumed lost; stop it
   and requeue it as INTERRUPTED.

It also compares the ledger's counters with the GPUs the active jobs hold. Every change moves
both in one transaction, but the active index is eventually consistent, so a difference seen once
may be a race: it is marked on the counter, and repaired (set to what the jobs hold) only when
the next run sees the same difference again and the counter has not moved since (a conditional
write). A counter that drifted high would otherwise keep GPUs idle for good; one that drifted low
would let the pool be over-committed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from spotline.aws.errors import InvalidTransition, StaleJobError
from spotline.aws.jobs import Disruption, JobRecord
from spotline.aws.ledger import pool_key, team_key
from spotline.control.lifecycle import requeue_after_disruption, requeue_unstarted
from spotline.control.plane import ControlPlane
from spotline.domain import JobState

logger = logging.getLogger(__name__)


@dataclass
class ReconcileResult:
    examined: int = 0
    requeued: list[tuple[str, str]] = field(default_factory=list)  # (job id, why)
    # Ledger counters that differ from the sum over the active index ({"POOL#x": (ledger, active)}).
    drift: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Those set to what the active jobs hold: the same drift was seen on the previous run too.
    repaired: dict[str, tuple[int, int]] = field(default_factory=dict)


def reconcile(cp: ControlPlane) -> ReconcileResult:
    now = cp.clock()
    config = cp.config
    result = ReconcileResult()
    active = cp.jobs.active()
    result.examined = len(active)
    # Compare before acting: a requeue below changes the ledger but not this snapshot.
    result.drift, marks = ledger_drift(cp, active)
    if result.drift:
        logger.warning("ledger drift", extra={"drift": result.drift, "pools": [p.name for p in config.pools]})
    result.repaired = repair_drift(cp, result.drift, marks)
    for record in active:
        try:
            why = _stuck(cp, record, now)
        except (StaleJobError, InvalidTransition) as error:
            logger.info("job moved on by itself", extra={"job_id": record.id, "why": str(error)})
            continue
        if why is not None:
            result.requeued.append((record.id, why))
    if result.requeued:
        cp.trigger.request("reconciler freed capacity", f"reconciler-{int(now)}")
    return result


def _stuck(cp: ControlPlane, record: JobRecord, now: float) -> str | None:
    config = cp.config
    if record.state is JobState.ADMITTED:
        admitted = record.admitted_at or record.updated_at
        if record.batch_job_id is None and now - admitted > config.launch_timeout_s:
            requeue_unstarted(
                cp, record, now=now, reason=f"launch did not complete in {config.launch_timeout_s:.0f}s"
            )
            return "launch timed out"
        if record.batch_job_id is not None and now - admitted > config.start_timeout_s:
            requeue_unstarted(
                cp,
                record,
                now=now,
                reason=f"Batch job did not start in {config.start_timeout_s:.0f}s (no capacity?)",
            )
            cp.launcher.terminate(record.batch_job_id, "Spotline: did not start in time; requeued")
            return "start timed out"
        return None
    if record.state is JobState.CHECKPOINTING:
        deadline = record.checkpoint_deadline_at or record.updated_at + config.grace_period_s
        if now <= deadline + config.checkpoint_overrun_s:
            return None
        disruption = record.disruption or Disruption.PREEMPT
        requeue_after_disruption(
            cp,
            record,
            disruption.outcome,
            now=now,
            reason=f"checkpoint deadline passed {now - deadline:.0f}s ago without the workflow finishing",
        )
        if record.batch_job_id:
            cp.launcher.terminate(record.batch_job_id, "Spotline: checkpoint deadline passed")
        return "checkpoint overran"
    if record.state is JobState.RUNNING:
        last = record.last_heartbeat_at or record.job.started_at or record.updated_at
        if now - last <= config.heartbeat_timeout_s:
            return None
        requeue_after_disruption(
            cp,
            record,
            JobState.INTERRUPTED,
            now=now,
            reason=f"no heartbeat for {now - last:.0f}s: host presumed lost",
        )
        if record.batch_job_id:
            cp.launcher.terminate(record.batch_job_id, "Spotline: no heartbeat; requeued")
        return "heartbeat lost"
    return None


def ledger_drift(
    cp: ControlPlane, active: list[JobRecord]
) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int] | None]]:
    """Counters of the ledger that disagree with the jobs holding GPUs ({key: (ledger, jobs)}),
    and the drift marked on each counter by the previous run."""
    pools = [p.name for p in cp.config.pools]
    teams = sorted({t.team for t in cp.config.teams} | {r.team for r in active})
    counters = cp.ledger.counters(pools, teams)
    expected: dict[str, int] = {}
    for record in active:
        if record.job.pool is not None:
            key = pool_key(record.job.pool)
            expected[key] = expected.get(key, 0) + record.gpus_held
        expected[team_key(record.team)] = expected.get(team_key(record.team), 0) + record.gpus_held
    drift: dict[str, tuple[int, int]] = {}
    for key in [*(pool_key(p) for p in pools), *(team_key(t) for t in teams)]:
        used = counters.get(key, (0, None))[0]
        if used != expected.get(key, 0):
            drift[key] = (used, expected.get(key, 0))
    return drift, {key: mark for key, (_, mark) in counters.items()}


def repair_drift(
    cp: ControlPlane, drift: dict[str, tuple[int, int]], marks: dict[str, tuple[int, int] | None]
) -> dict[str, tuple[int, int]]:
    """Repair each drift that the previous run marked identically; mark the new ones; clear the
    marks of counters that agree again. Returns the repaired counters."""
    repaired: dict[str, tuple[int, int]] = {}
    for key, (ledger, expected) in drift.items():
        if marks.get(key) == (ledger, expected):
            if cp.ledger.repair_drift(key, ledger, expected):
                logger.warning(
                    "ledger counter repaired", extra={"counter": key, "from": ledger, "to": expected}
                )
                repaired[key] = (ledger, expected)
        else:
            cp.ledger.mark_drift(key, ledger, expected)
    for key, mark in marks.items():
        if mark is not None and key not in drift:
            cp.ledger.clear_drift_mark(key)
    return repaired
