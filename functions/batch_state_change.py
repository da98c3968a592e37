"""Batch Job State Change -> follow the run: RUNNING, SUCCEEDED, FAILED (or requeue on host loss)."""

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
from spotline.aws.event_models import BatchJobStateChangeEvent
from spotline.control.events import BatchJobChange, handle_batch_job_change


@idempotent_on_event_id("batch_state_change")
def _handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    detail = parse(event=event, model=BatchJobStateChangeEvent).detail
    started = detail.startedAt or (detail.attempts[-1].startedAt if detail.attempts else None)
    batch_job_id, node_index = detail.node()
    change = BatchJobChange(
        batch_job_id=batch_job_id,
        node_index=node_index,
        job_name=detail.jobName,
        status=detail.status,
        status_reason=detail.reasons(),
        started_at=None if started is None else started / 1000.0,
        stopped_at=None if detail.stoppedAt is None else detail.stoppedAt / 1000.0,
        container_instances=tuple(detail.container_instances()),
        exit_code=detail.exit_code(),
        job_queue=detail.jobQueue,
    )
    outcome = handle_batch_job_change(control_plane(), change)
    logger.info(
        "batch job state change",
        extra={"batch_job": detail.jobName, "status": detail.status, "outcome": outcome},
    )
    metrics.add_metric(name=f"BatchJob{detail.status.title()}", unit=MetricUnit.Count, value=1)
    return {"batch_job_id": detail.jobId, "status": detail.status, "outcome": outcome}


handler = event_bridge_handler(_handle)


loaded()
