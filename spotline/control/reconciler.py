"""The reconciler: finds jobs that an event never came for, and moves them on.

It reads only the `active` index (jobs holding GPUs: bounded by the cluster, never the queue):

1. ADMITTED without a Batch job after `LAUNCH_TIMEOUT_S` (the launch workflow never ran or
   died): requeue, stopping any Batch job submitted under the run's name.
2. ADMITTED with a Batch job that never started after `start_timeout_s` (no capacity in the
   pool, e.g. Spot unavailable): stop it and requeue, so the next pass may pick another pool.
3. CHECKPOINTING past its deadline plus `CHECKPOINT_OVERRUN_S` (the workflow failed or never
   started): stop it and requeue with the work lost since its last checkpoint.
4. RUNNING without a heartbeat of its current run for `heartbeat_timeout_s`: the host is
   presumed lost; stop it and requeue it as INTERRUPTED, or end it FAILED once it has been
   interrupted `max_interruptions` times (the cap Batch's host-loss failures count against too).
   A gang (multi-node job) is judged by each node's own heartbeats: a node silent for
   `heartbeat_timeout_s` (a hung or lost child that NCCL waits on, which Batch does not see) stops
   and requeues the whole gang the same way, to resume from its checkpoint on other nodes.
5. A Batch job a record gave up (requeued, cancelled, orphaned) that Batch has not confirmed
   stopped: ask DescribeJobs, and TerminateJob again until it has (`finish_terminations`).

It also compares the ledger's counters with the GPUs the active jobs hold. Every change moves
both in one transaction, but the reads are not one snapshot: the counters are read before and
after the jobs, and one that changed in between is not compared (an admission committed between
the two reads was the "ledger drift seen" line a busy local plane logged now and then). The
active index is eventually consistent too, so a difference seen once may still be a race: it is
marked on the counter with the counter's change count, and repaired (set to what the jobs hold)
only when the next run sees the same difference and no admission or release has changed the
counter since the mark (a conditional write on the count). A race needs a change, so it cannot
be repaired by mistake, even when the same race happens twice. A counter that drifted high would
otherwise keep GPUs idle for good; one that drifted low would let the pool be over-committed.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from spotline.control.errors import InvalidTransition, StaleJobError
from spotline.control.lifecycle import (
    launch_request,
    requeue_after_disruption,
    requeue_interrupted,
    requeue_unstarted,
    stop_runs,
)
from spotline.control.plane import ControlPlane
from spotline.control.records import (
    Counter,
    Disruption,
    JobRecord,
    pool_key,
    silent_gang_node,
    team_key,
)
from spotline.control.spot_signals import leave_missing_spot, observe_unstarted
from spotline.domain import JobState

logger = logging.getLogger(__name__)

# How the reconciler names the requeue of a gang with a silent node (followed by its index).
GANG_NODE_SILENT = "gang node silent"


@dataclass
class ReconcileResult:
    examined: int = 0
    requeued: list[tuple[str, str]] = field(default_factory=list)  # (job id, why)
    # Ledger counters that differ from the sum over the active index ({"POOL#x": (ledger, active)}).
    drift: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Those set to what the active jobs hold: the previous run saw the same drift, and the
    # counter has not changed since.
    repaired: dict[str, tuple[int, int]] = field(default_factory=dict)
    # Pending terminations that Batch confirmed, and those asked again (Batch job ids).
    terminations_confirmed: list[str] = field(default_factory=list)
    terminations_retried: list[str] = field(default_factory=list)
    # Gangs stopped and requeued because one of their nodes went silent (job ids).
    stalled_gangs: list[str] = field(default_factory=list)
    # Per pool, how long the oldest job submitted to Batch has waited to start (0 when none
    # waits): in a Spot pool a growing age means no Spot capacity.
    oldest_unstarted_s: dict[str, float] = field(default_factory=dict)


def reconcile(cp: ControlPlane) -> ReconcileResult:
    now = cp.clock()
    config = cp.config
    result = ReconcileResult()
    # The counters read before the jobs too: one an admission or a release changed while the
    # jobs were read differs from them by that race only, and is not compared (`ledger_drift`).
    before = counters_read(cp, [p.name for p in config.pools], [t.team for t in config.teams])
    active = cp.jobs.active()
    result.examined = len(active)
    # Compare before acting: a requeue below changes the ledger but not this snapshot.
    result.drift, counters = ledger_drift(cp, active, before)
    if result.drift:
        # Seen once it may be a race (the two reads are not one snapshot): repair_drift warns
        # when a drift is real (seen again, with no change to the counter in between).
        pools = [p.name for p in config.pools]
        logger.info("ledger drift seen", extra={"drift": result.drift, "pools": pools})
    result.repaired = repair_drift(cp, result.drift, counters)
    result.oldest_unstarted_s = oldest_unstarted(cp, active, now)
    observe_unstarted(cp, result.oldest_unstarted_s, now)
    result.requeued += leave_missing_spot(cp, active, now)
    for record in active:
        try:
            why = _stuck(cp, record, now)
        except (StaleJobError, InvalidTransition) as error:
            logger.info("job moved on by itself", extra={"job_id": record.id, "why": str(error)})
            continue
        if why is not None:
            result.requeued.append((record.id, why))
            if why.startswith(GANG_NODE_SILENT):
                result.stalled_gangs.append(record.id)
    if result.requeued:
        cp.trigger.request("reconciler freed capacity", f"reconciler-{int(now)}")
    result.terminations_confirmed, result.terminations_retried = finish_terminations(cp)
    return result


def oldest_unstarted(cp: ControlPlane, active: list[JobRecord], now: float) -> dict[str, float]:
    """For every configured pool, the age of its oldest admitted job whose Batch job was
    submitted but has not started (RUNNABLE in Batch: the pool has no instance for it), 0 if
    none: the Spot capacity alarm's metric."""
    ages = {pool.name: 0.0 for pool in cp.config.pools}
    for record in active:
        if record.state is JobState.ADMITTED and record.batch_job_id is not None and record.job.pool:
            waited = max(0.0, now - (record.admitted_at or record.updated_at))
            ages[record.job.pool] = max(ages.get(record.job.pool, 0.0), waited)
    return ages


def finish_terminations(cp: ControlPlane) -> tuple[list[str], list[str]]:
    """Batch jobs that records gave up and Batch has not confirmed stopped: confirm those that
    DescribeJobs shows ended (or no longer knows), and ask again for the others. Reads the
    `active` index (the records stay in it while a termination is pending). Returns (confirmed,
    retried)."""
    confirmed: list[str] = []
    retried: list[str] = []
    for record in cp.jobs.terminating():
        ids = list(record.terminating_batch_job_ids)
        try:
            stopped = cp.launcher.stopped(ids)
        except Exception:
            logger.warning(
                "DescribeJobs failed; the next run retries", extra={"job_id": record.id}, exc_info=True
            )
            continue
        for batch_job_id in ids:
            if batch_job_id in stopped and cp.jobs.confirm_stopped(record.id, batch_job_id) is not None:
                confirmed.append(batch_job_id)
        pending = [b for b in ids if b not in stopped]
        retried += stop_runs(cp, record.id, pending, "Spotline: run no longer owned by its job (retry)")
    if confirmed or retried:
        logger.info("pending terminations", extra={"confirmed": confirmed, "retried": retried})
    return confirmed, retried


# An admitted job whose Batch job was never submitted this long after is requeued: the launch
# workflow submits within seconds, so it never ran or died (s).
LAUNCH_TIMEOUT_S = 300.0
# A checkpointing job whose workflow has not finished this long past its deadline is finished by
# the reconciler: the workflow stops the job at the deadline, so it failed or never started (s).
CHECKPOINT_OVERRUN_S = 60.0


def _stuck(cp: ControlPlane, record: JobRecord, now: float) -> str | None:
    config = cp.config
    if record.state is JobState.ADMITTED:
        admitted = record.admitted_at or record.updated_at
        if record.batch_job_id is None and now - admitted > LAUNCH_TIMEOUT_S:
            # A Batch job the launch submitted without recording it (the workflow died after
            # SubmitJob) is found by its name, the run id, and stopped with the requeue.
            request = launch_request(cp, record)
            try:
                submitted = tuple(cp.launcher.find_live(request.job_queue, request.job_name))
            except Exception:
                # Its RUNNING event will name an orphan, which is stopped then.
                logger.warning("ListJobs failed", extra={"job_id": record.id}, exc_info=True)
                submitted = ()
            moved = requeue_unstarted(
                cp,
                record,
                now=now,
                reason=f"launch did not complete in {LAUNCH_TIMEOUT_S:.0f}s",
                also_stopping=submitted,
            )
            stop_runs(cp, record.id, moved.terminating_batch_job_ids, "Spotline: launch timed out; requeued")
            return "launch timed out"
        if record.batch_job_id is not None and now - admitted > config.start_timeout_s:
            moved = requeue_unstarted(
                cp,
                record,
                now=now,
                reason=f"Batch job did not start in {config.start_timeout_s:.0f}s (no capacity?)",
            )
            stop_runs(
                cp, record.id, moved.terminating_batch_job_ids, "Spotline: did not start in time; requeued"
            )
            return "start timed out"
        return None
    if record.state is JobState.CHECKPOINTING:
        deadline = record.checkpoint_deadline_at or record.updated_at + config.grace_period_s
        if now <= deadline + CHECKPOINT_OVERRUN_S:
            return None
        disruption = record.disruption or Disruption.PREEMPT
        moved = requeue_after_disruption(
            cp,
            record,
            disruption.outcome,
            now=now,
            reason=f"checkpoint deadline passed {now - deadline:.0f}s ago without the workflow finishing",
        )
        stop_runs(cp, record.id, moved.terminating_batch_job_ids, "Spotline: checkpoint deadline passed")
        return "checkpoint overran"
    if record.state is JobState.RUNNING:
        last = record.last_heartbeat_at or record.job.started_at or record.updated_at
        if now - last <= config.heartbeat_timeout_s:
            return _silent_node(cp, record, now)
        moved = requeue_interrupted(
            cp, record, now=now, reason=f"no heartbeat for {now - last:.0f}s: host presumed lost"
        )
        if moved.state is JobState.FAILED:
            stop_runs(cp, record.id, moved.terminating_batch_job_ids, "Spotline: no heartbeat; failed")
            return "heartbeat lost: failed after max_interruptions"
        stop_runs(cp, record.id, moved.terminating_batch_job_ids, "Spotline: no heartbeat; requeued")
        return "heartbeat lost"
    return None


def _silent_node(cp: ControlPlane, record: JobRecord, now: float) -> str | None:
    """A running gang with a node silent past the heartbeat timeout: the same path as a lost
    host (stopped, requeued from its checkpoint as INTERRUPTED, or FAILED past the cap)."""
    silent = silent_gang_node(record, now, cp.config.heartbeat_timeout_s)
    if silent is None:
        return None
    node, quiet_s = silent
    moved = requeue_interrupted(
        cp,
        record,
        now=now,
        reason=f"node {node} of the gang sent no heartbeat for {quiet_s:.0f}s: presumed hung or lost",
    )
    stop_runs(cp, record.id, moved.terminating_batch_job_ids, f"Spotline: gang node {node} silent")
    if moved.state is JobState.FAILED:
        return f"{GANG_NODE_SILENT} {node}: failed after max_interruptions"
    return f"{GANG_NODE_SILENT} {node}"


def ledger_drift(
    cp: ControlPlane, active: list[JobRecord], before: dict[str, Counter] | None = None
) -> tuple[dict[str, tuple[int, int]], dict[str, Counter]]:
    """Counters of the ledger that disagree with the jobs holding GPUs ({key: (ledger, jobs)}),
    and the counters as read (with the drift marked on each by the previous run). `before`: the
    counters as read before `active`; one whose change count moved since is left out (an
    admission or a release committed between the reads: the jobs and the counter were read on
    either side of it, so they differ by it alone)."""
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
        used = counters[key].used if key in counters else 0
        if before is not None and _moved(key, before, counters):
            continue
        if used != expected.get(key, 0):
            drift[key] = (used, expected.get(key, 0))
    return drift, counters


def counters_read(cp: ControlPlane, pools: list[str], teams: list[str]) -> dict[str, Counter]:
    """The ledger's counters of `pools` and `teams`, each key read (one never written: zero)."""
    found = cp.ledger.counters(pools, teams)
    keys = [*(pool_key(p) for p in pools), *(team_key(t) for t in teams)]
    return {key: found.get(key, Counter(0)) for key in keys}


def _moved(key: str, before: dict[str, Counter], after: dict[str, Counter]) -> bool:
    """Whether counter `key` changed between the two reads (False for a key `before` did not
    read: a team first seen in the jobs)."""
    if key not in before:
        return False
    return before[key].moves != after.get(key, Counter(0)).moves


def repair_drift(
    cp: ControlPlane, drift: dict[str, tuple[int, int]], counters: dict[str, Counter]
) -> dict[str, tuple[int, int]]:
    """Repair each drift that the previous run marked identically with no change to the counter
    since; mark the others; clear the marks of counters that agree again. Returns the repaired
    counters."""
    repaired: dict[str, tuple[int, int]] = {}
    for key, (ledger, expected) in drift.items():
        counter = counters.get(key, Counter(0))
        if counter.drift_mark == (ledger, expected, counter.moves):
            if cp.ledger.repair_drift(key, ledger, expected, counter.moves):
                logger.warning(
                    "ledger counter repaired", extra={"counter": key, "from": ledger, "to": expected}
                )
                repaired[key] = (ledger, expected)
        else:
            cp.ledger.mark_drift(key, ledger, expected, counter.moves)
    for key, counter in counters.items():
        if counter.drift_mark is not None and key not in drift:
            cp.ledger.clear_drift_mark(key)
    return repaired
