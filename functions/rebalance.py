"""EC2 Instance Rebalance Recommendation -> ask the jobs on the instance for a checkpoint now."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from spotline.aws.event_models import RebalanceEvent
from spotline.aws.lambda_runtime import control_plane, idempotent_on_event_id, logger, metrics, tracer
from spotline.control.events import handle_rebalance


@idempotent_on_event_id("rebalance")
def _handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    detail = parse(event=event, model=RebalanceEvent).detail
    jobs = handle_rebalance(control_plane(), detail.instance_id)
    logger.info("rebalance recommendation handled", extra={"instance_id": detail.instance_id, "jobs": jobs})
    metrics.add_metric(name="RebalanceCheckpointRequests", unit=MetricUnit.Count, value=len(jobs))
    return {"instance_id": detail.instance_id, "jobs": jobs}


@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE, clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # Counts deliveries, duplicates included (a duplicate returns the first run's result).
    metrics.add_metric(name="EventsReceived", unit=MetricUnit.Count, value=1)
    result: dict[str, Any] = _handle(event, context)
    return result
