"""One scheduling pass per invocation.

Invoked by the scheduler's FIFO queue (one message group, so one pass at a time; a batch of
triggers collapses into one pass) and by the periodic tick (a scheduled event, for aging and
deadlines). What triggered it does not matter: a pass always reads the current state.
"""

from __future__ import annotations

import time
from typing import Any

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import SqsModel
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import METRICS_NAMESPACE, control_plane, loaded, logger, metrics, tracer
from spotline.aws.workflows import SqsPassTrigger
from spotline.control.scheduling import PassResult, scheduling_pass

# A failed pass is retried after this long: its triggers become visible again in seconds, not
# after the queue's visibility timeout, and the one message group they block is free as soon.
RETRY_FAILED_PASS_AFTER_S = 5
# A pass stops acting this long before the function's timeout (what is left goes to the next
# pass, asked for at once): time to report, and to ask for that pass.
STOP_ACTING_BEFORE_TIMEOUT_S = 15.0


def _receipt_handles(event: dict[str, Any]) -> list[str]:
    if "Records" in event:
        return [record.receiptHandle for record in parse(event=event, model=SqsModel).Records]
    return []  # the periodic tick, or a direct invocation


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    handles = _receipt_handles(event)
    triggers = len(handles) or 1
    started = time.perf_counter()
    remaining_s = context.get_remaining_time_in_millis() / 1000.0
    act_until = time.monotonic() + max(0.0, remaining_s - STOP_ACTING_BEFORE_TIMEOUT_S)
    plane = control_plane()
    try:
        result = scheduling_pass(plane, act_until=act_until)
    except Exception:
        # Counted (the PassErrors alarm) and retried in seconds; after the queue's
        # maxReceiveCount the triggers go to its dead-letter queue (the DLQ alarm).
        logger.exception("scheduling pass failed")
        metrics.add_metric(name="PassErrors", unit=MetricUnit.Count, value=1)
        if not handles:
            raise
        if isinstance(plane.trigger, SqsPassTrigger):
            plane.trigger.retry_soon(handles, RETRY_FAILED_PASS_AFTER_S)
        ids = [record["messageId"] for record in event["Records"]]
        return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in ids]}
    metrics.add_metric(name="PassErrors", unit=MetricUnit.Count, value=0)
    elapsed_ms = (time.perf_counter() - started) * 1000.0
    if result.more_work:
        # A full window was admitted (the jobs behind it may fit what is still free), or the
        # pass ran out of time: the next pass is asked for now (one message; FIFO keeps passes
        # one at a time). The key names this pass (its time and first admission), so FIFO
        # deduplication never drops the request of a later pass.
        first = result.admitted[0][0] if result.admitted else "none"
        key = f"continue-{result.now:.6f}-{first}"
        why = "the last pass admitted a full window"
        if result.left_for_next_pass:
            why = "the last pass ran out of time"
        plane.trigger.request(why, key)
    _report(result, triggers, elapsed_ms)
    return {
        "batchItemFailures": [],
        "admitted": [list(admission) for admission in result.admitted],
        "preempted": [[job, list(victims)] for job, victims in result.preempted],
        "moved": [list(move) for move in result.moved],
        "waiting": result.waiting,
        "released": result.held.released,
        "cancelled_by_dependency": [job for job, _ in result.held.cancelled],
        "skipped": len(result.skipped),
        "quarantined": [job for job, _ in result.quarantined],
        "items_read": result.queue_items_read + result.active_items_read,
        "window": result.window,
        "more_work": result.more_work,
    }


def _report(result: PassResult, triggers: int, elapsed_ms: float) -> None:
    metrics.add_metric(name="PassTriggers", unit=MetricUnit.Count, value=triggers)
    metrics.add_metric(name="PassDuration", unit=MetricUnit.Milliseconds, value=elapsed_ms)
    metrics.add_metric(name="Admitted", unit=MetricUnit.Count, value=len(result.admitted))
    metrics.add_metric(name="Preemptions", unit=MetricUnit.Count, value=len(result.preempted))
    metrics.add_metric(name="MovesToSpot", unit=MetricUnit.Count, value=len(result.moved))
    metrics.add_metric(name="Waiting", unit=MetricUnit.Count, value=result.waiting)
    metrics.add_metric(name="HeldJobs", unit=MetricUnit.Count, value=result.held.waiting)
    metrics.add_metric(name="DependenciesMet", unit=MetricUnit.Count, value=len(result.held.released))
    metrics.add_metric(name="PassContinued", unit=MetricUnit.Count, value=int(result.more_work))
    metrics.add_metric(name="DecisionsSkipped", unit=MetricUnit.Count, value=len(result.skipped))
    # Unreadable job records left out of the pass (each also logged by the repository).
    metrics.add_metric(name="RecordsQuarantined", unit=MetricUnit.Count, value=len(result.quarantined))
    metrics.add_metric(name="QueueItemsRead", unit=MetricUnit.Count, value=result.queue_items_read)
    metrics.add_metric(name="ActiveJobs", unit=MetricUnit.Count, value=result.active_items_read)
    # Per class: how much of the queue the pass saw, and how long its oldest job has waited
    # (the head of a class is its oldest submission, so this is the class's worst wait).
    for priority, count in result.window_by_class.items():
        # One EMF document per class (its dimension differs from the handler's metrics);
        # EphemeralMetrics, unlike single_metric, honours POWERTOOLS_METRICS_DISABLED.
        per_class = EphemeralMetrics(namespace=METRICS_NAMESPACE)
        per_class.add_dimension(name="PriorityClass", value=priority)
        per_class.add_metric(name="QueueWindowDepth", unit=MetricUnit.Count, value=count)
        if priority in result.oldest_wait_s:
            oldest = result.oldest_wait_s[priority]
            per_class.add_metric(name="OldestWait", unit=MetricUnit.Seconds, value=oldest)
        per_class.flush_metrics()
    for team, dollars in result.spend_usd.items():
        per_team = EphemeralMetrics(namespace=METRICS_NAMESPACE)
        per_team.add_dimension(name="Team", value=team)
        per_team.add_metric(name="TeamSpend", unit=MetricUnit.Count, value=dollars)  # dollars this month
        per_team.flush_metrics()
    logger.info(
        "scheduling pass",
        extra={
            "admitted": [list(admission) for admission in result.admitted],
            "preempted": result.preempted,
            "moved": result.moved,
            "waiting": result.waiting,
            "skipped": result.skipped[:10],
            "quarantined": result.quarantined[:10],
            "candidates": result.candidates,
            "running": result.running,
            "elapsed_ms": round(elapsed_ms, 1),
        },
    )


loaded()
