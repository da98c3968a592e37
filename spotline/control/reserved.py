"""Reserved pools in the control plane: the drains a pass plans from a block's known end, and the
EC2 events about reservations (a Capacity Block delivered or about to expire, an interruptible
reservation's instance about to be reclaimed).

Every reaction goes through `lifecycle.start_disruption`: a conditional transition of each job to
CHECKPOINTING, then the preempt workflow that waits for its checkpoint until the deadline, stops
it and requeues it INTERRUPTED (the capacity went, the job did nothing wrong). A redelivered or
late event finds the job CHECKPOINTING already (or gone) and changes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from spotline.control.errors import InvalidTransition, StaleJobError
from spotline.control.lifecycle import iso, start_disruption
from spotline.control.plane import ControlPlane
from spotline.control.records import Disruption, JobRecord
from spotline.domain import JobState
from spotline.domain.models import ClusterSnapshot, Job, Pool
from spotline.domain.placement import candidate_pools
from spotline.domain.preemption import estimated_remaining_s
from spotline.domain.reserved import TERMINATION_LEAD_S, block_drains, usable_until
from spotline.resources import DETAILS_CAPACITY_RESERVATION

logger = logging.getLogger(__name__)

# The EC2 events (source aws.ec2) about reservations, as the rule matches them (`resources`).
DELIVERED = DETAILS_CAPACITY_RESERVATION[:2]
EXPIRATION_WARNING = DETAILS_CAPACITY_RESERVATION[2:4]
INTERRUPTION_WARNING = DETAILS_CAPACITY_RESERVATION[4:]


def drain_blocks(cp: ControlPlane, snapshot: ClusterSnapshot, now: float) -> list[str]:
    """The pass's planned drains (`reserved.block_drains`): each job whose block ends soon
    checkpoints and is requeued before the termination; a deadline job whose placement after the
    block is On-Demand is placed there by the next pass. Returns the jobs started draining."""
    if not any(p.is_reserved for p in snapshot.pools.values()):
        return []
    config = cp.config.scheduler
    others = [p for p in snapshot.pools.values() if not p.is_reserved]

    def placement(job: Job) -> Pool | None:
        pools = candidate_pools(
            job, others, now, estimated_remaining_s(job, now, config), config, snapshot.spot
        )
        return pools[0] if pools else None

    started: list[str] = []
    for drain in block_drains(snapshot, now, config, placement):
        pool = snapshot.pools[drain.pool]
        record = cp.jobs.find(drain.job.id)
        if record is None or _drain(cp, record, pool, now, drain.reason):
            started.append(drain.job.id)
    return started


def handle_block_delivered(cp: ControlPlane, reservation_id: str) -> list[str]:
    """A Capacity Block's capacity is there: a pass plans the pools it backs now."""
    pools = [p.name for p in _pools_of(cp, reservation_id)]
    if pools:
        cp.trigger.request(f"capacity block {reservation_id} delivered", f"block-delivered:{reservation_id}")
    return pools


def handle_block_expiring(cp: ControlPlane, reservation_id: str, event_time: float) -> list[str]:
    """The expiration warning (40 minutes before the end; the instances are terminated from 10
    minutes later): every job still in a pool the block backs checkpoints now and is requeued,
    with the termination as its deadline. The pass's planned drains have normally emptied the
    block already: this is the safety net. Returns the jobs affected."""
    now = cp.clock()
    affected: list[str] = []
    pools = _pools_of(cp, reservation_id)
    if not pools:
        logger.info("expiration warning for a reservation no pool has", extra={"reservation": reservation_id})
        return affected
    names = {p.name for p in pools}
    for record in cp.jobs.active():
        pool = next((p for p in pools if p.name == record.job.pool), None)
        if pool is None or record.job.pool not in names:
            continue
        if _drain(cp, record, pool, now, f"capacity block {reservation_id} expiration warning", event_time):
            affected.append(record.id)
    return affected


def handle_reservation_interruption(
    cp: ControlPlane, instance_id: str, termination_at: float | None, event_time: float
) -> list[str]:
    """An interruptible Capacity Reservation reclaims `instance_id` (2 minutes' notice): its jobs
    checkpoint now and are requeued, before `termination_at`. Returns the jobs affected."""
    now = cp.clock()
    ends = termination_at if termination_at is not None else event_time + 120.0
    affected: list[str] = []
    for job_id in cp.instances.jobs_on(instance_id):
        record = cp.jobs.find(job_id)
        if record is None or instance_id not in record.instance_ids:
            continue  # (the instance table may still list an earlier run)
        if record.state not in (JobState.RUNNING, JobState.CHECKPOINTING):
            continue
        try:
            start_disruption(
                cp,
                record,
                Disruption.INTERRUPT,
                now=now,
                deadline_at=max(now + 1, ends - cp.config.spot_notice_margin_s),
                draining_for=f"interruption:{instance_id}",
                reason=(
                    f"capacity reservation interruption warning for {instance_id}:"
                    f" checkpoint before {iso(ends)}"
                ),
            )
        except (StaleJobError, InvalidTransition) as error:
            logger.info(
                "job changed before the warning applied", extra={"job_id": record.id, "why": str(error)}
            )
            continue
        affected.append(record.id)
    return affected


def _drain(
    cp: ControlPlane, record: JobRecord, pool: Pool, now: float, why: str, event_time: float | None = None
) -> bool:
    """Checkpoint `record`, running in reserved `pool`, before the termination; requeue it."""
    if record.state not in (JobState.RUNNING, JobState.CHECKPOINTING):
        return False
    terminates = usable_until(pool)
    if event_time is not None:
        terminates = min(terminates, event_time + 10 * 60.0)
    try:
        start_disruption(
            cp,
            record,
            Disruption.INTERRUPT,
            now=now,
            deadline_at=max(now + 1, terminates - cp.config.spot_notice_margin_s),
            draining_for=f"block-end:{pool.name}",
            reason=f"{why}: checkpoint before the instances terminate at {iso(terminates)}, then requeued",
        )
    except (StaleJobError, InvalidTransition) as error:
        logger.info("job changed before the drain applied", extra={"job_id": record.id, "why": str(error)})
        return False
    return True


def _pools_of(cp: ControlPlane, reservation_id: str) -> list[Pool]:
    """The reserved pools backed by `reservation_id` (a Capacity Block's id or an ODCR group's ARN)."""
    return [
        p
        for p in cp.config.pools
        if p.reservation is not None and p.reservation.reservation_id == reservation_id
    ]


def reservation_of(resources: Iterable[str], detail_id: str | None) -> str | None:
    """The reservation an event names: its detail's `capacity-reservation-id`, else the id at the
    end of its resource ARN (`arn:aws:ec2:region:account:capacity-reservation/cr-...`)."""
    if detail_id:
        return detail_id
    for arn in resources:
        if "capacity-reservation/" in arn:
            return arn.rsplit("/", 1)[-1]
    return None


__all__ = [
    "DELIVERED",
    "EXPIRATION_WARNING",
    "INTERRUPTION_WARNING",
    "TERMINATION_LEAD_S",
    "drain_blocks",
    "handle_block_delivered",
    "handle_block_expiring",
    "handle_reservation_interruption",
    "reservation_of",
]
