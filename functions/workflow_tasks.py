"""The Lambda tasks of the preempt and launch workflows, dispatched on the input's "task".

Errors propagate: Step Functions sees the exception's class name as the error (e.g.
BatchThrottled, StorageUnavailable, CheckpointAlreadyDurable) and the ASL retries or catches
on it. Not wrapped in Powertools idempotency: every task is a conditional write that is safe
to repeat, and a retry after a failure must run again.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import control_plane, loaded, logger, tracer
from spotline.control.workflow_tasks import run_task


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    logger.append_keys(job_id=event.get("job_id"), task=event.get("task"))
    result = run_task(control_plane(), event)
    logger.info("workflow task done", extra={"result": result})
    return result


loaded()
