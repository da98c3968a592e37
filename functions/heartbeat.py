"""Job Heartbeats (from the agents), a batch at a time -> progress, utilization and the instance
each job runs on.

EventBridge puts each heartbeat on the heartbeat queue (`resources.HEARTBEAT_QUEUE`) and Lambda
hands this function a batch of them, so N heartbeats take far fewer than N invocations of the
account's concurrency. Each record is one EventBridge event (the queue's message body); the
answer names the records that failed (Powertools' batch utility), and only those come back.

Not idempotent through the Idempotency table (its role may not write it, and a heartbeat every
30 s per node would double its writes): the write counts only for the job's current run and only
moves forward by step within it, so a duplicate, a late heartbeat, a batch redelivered, or one of
an earlier run changes nothing (it is counted as HeartbeatsDropped).
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import (
    control_plane,
    count_agent_event,
    count_agent_event_without_run,
    loaded,
    logger,
    metrics,
    tracer,
)
from spotline.aws.event_models import HeartbeatEvent
from spotline.control.events import record_heartbeat
from spotline.resources import team_of_agent_source


def _heartbeat(record: SQSRecord) -> bool:
    """One heartbeat (the EventBridge event in the message's body): True if it changed the job.
    Raises for a body that is not a heartbeat, so the record fails (and after the queue's
    `max_receives`, goes to the dead-letter queue) instead of vanishing."""
    parsed = parse(event=json.loads(record.body), model=HeartbeatEvent)
    detail = parsed.detail
    logger.append_keys(job_id=detail.job_id, correlation_id=parsed.id)
    try:
        if detail.run_id is None:
            count_agent_event_without_run()
        # The source names the sending team (its job role may put no other): only that team's jobs.
        team = team_of_agent_source(parsed.source)
        if team is None:
            logger.warning("heartbeat dropped: source names no team", extra={"source": parsed.source})
            count_agent_event("Heartbeats", False)
            return False
        stored = record_heartbeat(
            control_plane(),
            detail.job_id,
            run_id=detail.run_id,
            step=detail.step,
            instance_id=detail.instance_id,
            progress=detail.progress,
            utilization=detail.utilization,
            team=team,
            node_index=detail.node_index,
            restored_step=detail.restored_step,
            restored_checkpoint_uri=detail.restored_checkpoint_uri,
        )
        count_agent_event("Heartbeats", stored is not None)
        return stored is not None
    finally:
        logger.remove_keys(["job_id", "correlation_id"])


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    # A processor per invocation: it keeps the batch's results (the local runtime may call this
    # handler from more than one thread). If every record fails, it raises: the batch comes back.
    processor = BatchProcessor(event_type=EventType.SQS)
    with processor(event["Records"], _heartbeat, context):
        outcomes = processor.process()
    recorded = sum(1 for status, result, _ in outcomes if status == "success" and result)
    failed = [(record, why) for status, why, record in outcomes if status == "fail"]
    for record, why in failed:
        logger.warning("heartbeat failed", extra={"message_id": record.message_id, "error": why})
    logger.info(
        "heartbeats",
        extra={"heartbeats": len(outcomes), "recorded": recorded, "failed": len(failed)},
    )
    return {
        **processor.response(),
        "heartbeats": len(outcomes),
        "recorded": recorded,
        "dropped": len(outcomes) - recorded - len(failed),
    }


loaded()
