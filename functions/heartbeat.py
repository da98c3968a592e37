"""Job Heartbeat (from the agent) -> progress, utilization and the instance the job runs on.

Not idempotent through the Idempotency table (its role may not write it, and a heartbeat every
few seconds per job would double its writes): the write counts only for the job's current run
and only moves forward by step within it, so a duplicate, a late heartbeat, or one of an
earlier run changes nothing (it is counted as HeartbeatsDropped).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
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


@logger.inject_lambda_context(correlation_id_path=correlation_paths.EVENT_BRIDGE, clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    parsed = parse(event=event, model=HeartbeatEvent)
    detail = parsed.detail
    logger.append_keys(job_id=detail.job_id)
    # The source names the sending team (its job role may put no other): only that team's jobs.
    if detail.run_id is None:
        count_agent_event_without_run()
    team = team_of_agent_source(parsed.source)
    if team is None:
        logger.warning("heartbeat dropped: source names no team", extra={"source": parsed.source})
        count_agent_event("Heartbeats", False)
        return {"job_id": detail.job_id, "recorded": False}
    record = record_heartbeat(
        control_plane(),
        detail.job_id,
        run_id=detail.run_id,
        step=detail.step,
        instance_id=detail.instance_id,
        progress=detail.progress,
        utilization=detail.utilization,
        team=team,
        node_index=detail.node_index,
    )
    count_agent_event("Heartbeats", record is not None)
    return {"job_id": detail.job_id, "recorded": record is not None}


loaded()
