"""EC2 Spot Instance Interruption Warning -> checkpoint and requeue every job on the instance."""

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
from spotline.aws.event_models import SpotWarningEvent
from spotline.control.events import handle_spot_warning


@idempotent_on_event_id("spot_interruption")
def _handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    warning = parse(event=event, model=SpotWarningEvent)
    jobs = handle_spot_warning(
        control_plane(),
        warning.detail.instance_id,
        warning.time.timestamp(),
        warning.detail.instance_action,
    )
    logger.info("spot warning handled", extra={"instance_id": warning.detail.instance_id, "jobs": jobs})
    metrics.add_metric(name="SpotInterruptedJobs", unit=MetricUnit.Count, value=len(jobs))
    return {"instance_id": warning.detail.instance_id, "jobs": jobs}


handler = event_bridge_handler(_handle)


loaded()
