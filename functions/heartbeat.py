"""Job Heartbeat (from the agent) -> progress, utilization and the instance the job runs on.

Not idempotent through the Idempotency table (its role may not write it, and a heartbeat every
few seconds per job would double its writes): the write itself only moves forward by step, so
a duplicate or a late heartbeat changes nothing.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from spotline.aws.event_models import HeartbeatEvent
from spotline.aws.lambda_runtime import control_plane, logger, tracer
from spotline.control.events import record_heartbeat


@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE, clear_state=True)
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    detail = parse(event=event, model=HeartbeatEvent).detail
    record = record_heartbeat(
        control_plane(),
        detail.job_id,
        step=detail.step,
        instance_id=detail.instance_id,
        progress=detail.progress,
        utilization=detail.utilization,
    )
    return {"job_id": detail.job_id, "recorded": record is not None}
