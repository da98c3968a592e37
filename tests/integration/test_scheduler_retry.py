"""A scheduling pass that fails must not hold up the next one for minutes.

All triggers share one FIFO message group: while a received batch is invisible, no other trigger
of the group is delivered. The queue's visibility timeout is the function's timeout plus a margin
(90 s, asserted on the template in tests/infra); a pass that fails makes its triggers visible
again after `RETRY_FAILED_PASS_AFTER_S` seconds.
"""

from __future__ import annotations

from typing import Any

import pytest

import functions.scheduler
from spotline import resources as r
from spotline.aws.workflows import SqsPassTrigger
from tests.integration.helpers import Deployment, context

# The deployed queue's visibility timeout: the scheduler's 60 s timeout + the 30 s margin.
VISIBILITY_TIMEOUT_S = 90


def _queue(deployment: Deployment) -> str:
    sqs = deployment.clients.sqs
    url = sqs.create_queue(
        QueueName="spotline-test-scheduler.fifo",
        Attributes={
            "FifoQueue": "true",
            "ContentBasedDeduplication": "true",
            "VisibilityTimeout": str(VISIBILITY_TIMEOUT_S),
        },
    )["QueueUrl"]
    deployment.plane.trigger = SqsPassTrigger(sqs, url)
    return url


def _receive(deployment: Deployment, url: str) -> dict[str, Any]:
    """What the Lambda event source mapping would hand the function (an SQS event)."""
    messages = deployment.clients.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get(
        "Messages", []
    )
    return {
        "Records": [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "0",
                    "SenderId": "test",
                    "ApproximateFirstReceiveTimestamp": "0",
                    "MessageGroupId": r.SCHEDULER_MESSAGE_GROUP,
                    "MessageDeduplicationId": m["MessageId"],
                    "SequenceNumber": "1",
                },
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:spotline-test-scheduler.fifo",
                "awsRegion": "us-east-1",
            }
            for m in messages
        ]
    }


def _failing_pass(cp: Any, **options: Any) -> Any:
    raise RuntimeError("DynamoDB was unreachable")


def test_a_failing_pass_makes_its_triggers_visible_again_in_seconds(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two triggers on the scheduler's FIFO queue, received together, and a pass that fails
    url = _queue(deployment)
    deployment.plane.trigger.request("job submitted", "a")
    deployment.plane.trigger.request("job submitted", "b")
    event = _receive(deployment, url)
    assert len(event["Records"]) == 2
    calls: list[tuple[list[str], int]] = []
    real_retry = SqsPassTrigger.retry_soon

    def recording_retry(self: SqsPassTrigger, handles: list[str], after_s: int) -> None:
        calls.append((list(handles), after_s))
        real_retry(self, handles, 0)  # moto's clock is real: make "seconds" now

    monkeypatch.setattr(SqsPassTrigger, "retry_soon", recording_retry)
    monkeypatch.setattr(functions.scheduler, "scheduling_pass", _failing_pass)

    # When the scheduler handles them and its pass raises
    response = functions.scheduler.handler(event, context("scheduler"))

    # Then both triggers are reported failed, asked back after a few seconds (not the queue's
    # 90 s visibility timeout, and not 6 minutes) ...
    assert {f["itemIdentifier"] for f in response["batchItemFailures"]} == {
        rec["messageId"] for rec in event["Records"]
    }
    [(handles, after_s)] = calls
    assert sorted(handles) == sorted(rec["receiptHandle"] for rec in event["Records"])
    assert 0 < after_s <= 10 < VISIBILITY_TIMEOUT_S
    # ... and the message group is free again: the next receive gets them, and the next pass runs
    monkeypatch.undo()
    retried = _receive(deployment, url)
    assert len(retried["Records"]) == 2
    assert functions.scheduler.handler(retried, context("scheduler"))["batchItemFailures"] == []


def test_a_failing_tick_raises_so_lambda_counts_the_error(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(functions.scheduler, "scheduling_pass", _failing_pass)
    with pytest.raises(RuntimeError, match="unreachable"):
        functions.scheduler.handler(
            {"source": "aws.events", "detail-type": "Scheduled Event"}, context("scheduler")
        )
