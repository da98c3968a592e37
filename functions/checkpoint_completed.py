"""Checkpoint Completed (from the agent) -> record where to resume; release a waiting preemption."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import (
    control_plane,
    count_agent_event,
    count_agent_event_without_run,
    event_bridge_handler,
    idempotent_on_event_id,
    loaded,
    logger,
)
from spotline.aws.event_models import CheckpointCompletedEvent
from spotline.control.events import record_checkpoint
from spotline.resources import team_of_agent_source


@idempotent_on_event_id("checkpoint_completed")
def _handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    parsed = parse(event=event, model=CheckpointCompletedEvent)
    detail = parsed.detail
    logger.append_keys(job_id=detail.job_id)
    # The source names the sending team (its job role may put no other): only that team's jobs.
    if detail.run_id is None:
        count_agent_event_without_run()
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
            size_bytes=detail.size_bytes,
            write_s=detail.write_s,
            restore_s=detail.restore_s,
            team=team,
        )
    count_agent_event("Checkpoints", record is not None)
    return {"job_id": detail.job_id, "recorded": record is not None}


handler = event_bridge_handler(_handle)


loaded()
