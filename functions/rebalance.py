"""EC2 Instance Rebalance Recommendation -> ask the jobs on the instance for a checkpoint now, and
record their Spot pool at risk (the deadline guard's rule 7)."""

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
from spotline.aws.event_models import RebalanceEvent
from spotline.control.events import handle_rebalance


@idempotent_on_event_id("rebalance")
def _handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    recommendation = parse(event=event, model=RebalanceEvent)
    detail = recommendation.detail
    jobs = handle_rebalance(control_plane(), detail.instance_id, recommendation.time.timestamp())
    logger.info("rebalance recommendation handled", extra={"instance_id": detail.instance_id, "jobs": jobs})
    metrics.add_metric(name="RebalanceCheckpointRequests", unit=MetricUnit.Count, value=len(jobs))
    return {"instance_id": detail.instance_id, "jobs": jobs}


handler = event_bridge_handler(_handle)


loaded()
