"""EC2's reserved-capacity events -> a Capacity Block delivered asks for a pass; its expiration
warning checkpoints and requeues the jobs still in the pools it backs (the safety net: passes plan
their drains from the block's end); an interruptible reservation's instance interruption warning
checkpoints and requeues the jobs on the instance."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import (
    control_plane,
    event_bridge_handler,
    idempotent_on_event_id,
    loaded,
    logger,
    metrics,
)
from spotline.aws.event_models import CapacityBlockEvent, ReservationInterruptionEvent
from spotline.control.reserved import (
    DELIVERED,
    EXPIRATION_WARNING,
    handle_block_delivered,
    handle_block_expiring,
    handle_reservation_interruption,
    reservation_of,
)


@idempotent_on_event_id("capacity_reservation")
def _handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    kind = str(event.get("detail-type", ""))
    if kind in DELIVERED or kind in EXPIRATION_WARNING:
        block = parse(event=event, model=CapacityBlockEvent)
        reservation = reservation_of(block.resources, block.detail.capacity_reservation_id)
        if reservation is None:
            logger.warning("a Capacity Block event without a reservation id", extra={"detail_type": kind})
            return {"detail_type": kind, "jobs": []}
        if kind in DELIVERED:
            pools = handle_block_delivered(control_plane(), reservation)
            logger.info("capacity block delivered", extra={"reservation": reservation, "pools": pools})
            return {"detail_type": kind, "reservation": reservation, "pools": pools}
        jobs = handle_block_expiring(control_plane(), reservation, block.time.timestamp())
        logger.info("capacity block expiring", extra={"reservation": reservation, "jobs": jobs})
        metrics.add_metric(name="CapacityBlockDrainedJobs", unit=MetricUnit.Count, value=len(jobs))
        return {"detail_type": kind, "reservation": reservation, "jobs": jobs}
    warning = parse(event=event, model=ReservationInterruptionEvent)
    detail = warning.detail
    ends = None if detail.termination_time is None else detail.termination_time.timestamp()
    jobs = handle_reservation_interruption(
        control_plane(), detail.instance_id, ends, warning.time.timestamp()
    )
    logger.info("reservation interruption handled", extra={"instance_id": detail.instance_id, "jobs": jobs})
    metrics.add_metric(name="ReservationInterruptedJobs", unit=MetricUnit.Count, value=len(jobs))
    return {"detail_type": kind, "instance_id": detail.instance_id, "jobs": jobs}


handler = event_bridge_handler(_handle)


loaded()
