"""Checkpoint Completed (from the agent) -> record where to resume; release a waiting preemption."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from spotline.aws.event_models import CheckpointCompletedEvent
from spotline.aws.lambda_runtime import control_plane, idempotent_on_event_id, logger, metrics, tracer
from spotline.aws.resources import team_of_agent_source
from spotline.control.events import record_checkpoint


@idempotent_on_event_id("checkpoint_completed")
def _handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    parsed = parse(event=event, model=CheckpointCompletedEvent)
    detail = parsed.detail
    logger.append_keys(job_id=detail.job_id)
    # The source names the sending team (its job role may put no other): only that team's jobs.
    team = team_of_agent_source(parsed.source)
    if team is None:
        logger.warning("checkpoint dropped: source names no team", extra={"source": parsed.source})
        record = None
    else:
        record = record_checkpoint(
            control_plane(),
            detail.job_id,
            run_id=detail.run_id,
            checkpoint_uri=detail.checkpoint_uri,
            step=detail.step,
            progress=detail.progress,
            captured_at=detail.created_at,
            requested_at=detail.requested_at,
            team=team,
        )
    metrics.add_metric(name="CheckpointsRecorded", unit=MetricUnit.Count, value=0 if record is None else 1)
    if record is None:
        metrics.add_metric(name="AgentEventsDropped", unit=MetricUnit.Count, value=1)
    return {"job_id": detail.job_id, "recorded": record is not None}


@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE, clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # Counts deliveries, duplicates included (a duplicate returns the first run's result).
    metrics.add_metric(name="EventsReceived", unit=MetricUnit.Count, value=1)
    result: dict[str, Any] = _handle(event, context)
    return result
