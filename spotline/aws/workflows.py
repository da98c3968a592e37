"""Step Functions and the scheduler's trigger queue: starting workflows, answering task
tokens, and asking for a scheduling pass.

Executions get deterministic names (`<kind>-<job_id>-v<version>`): Standard workflows are
exactly-once per name, so a handler that runs twice for the same event starts one workflow.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from spotline import resources
from spotline.aws.errors import error_code

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_stepfunctions import SFNClient

logger = logging.getLogger(__name__)

_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


class StepFunctionsStarter:
    def __init__(self, client: SFNClient) -> None:
        self.client = client

    def start(self, state_machine_arn: str, name: str, payload: Mapping[str, Any]) -> str:
        try:
            response = self.client.start_execution(
                stateMachineArn=state_machine_arn, name=name, input=json.dumps(dict(payload), sort_keys=True)
            )
            return response["executionArn"]
        except ClientError as error:
            if error_code(error) != "ExecutionAlreadyExists":
                raise
            # Started by an earlier delivery of the same event: that is the one we wanted.
            arn = state_machine_arn.replace(":stateMachine:", ":execution:") + f":{name}"
            logger.info("workflow already started", extra={"execution": arn})
            return arn


_TOKEN_GONE = frozenset({"TaskTimedOut", "InvalidToken", "TaskDoesNotExist"})


class StepFunctionsTaskTokens:
    def __init__(self, client: SFNClient) -> None:
        self.client = client

    def succeed(self, token: str, output: Mapping[str, Any]) -> bool:
        try:
            self.client.send_task_success(taskToken=token, output=json.dumps(dict(output), sort_keys=True))
            return True
        except ClientError as error:
            if error_code(error) in _TOKEN_GONE:
                return False
            raise

    def fail(self, token: str, error: str, cause: str) -> bool:
        try:
            self.client.send_task_failure(taskToken=token, error=error, cause=cause[:32768])
            return True
        except ClientError as client_error:
            if error_code(client_error) in _TOKEN_GONE:
                return False
            raise


class SqsPassTrigger:
    """A message on the scheduler's FIFO queue (one message group: one pass at a time)."""

    def __init__(self, client: SQSClient, queue_url: str | None) -> None:
        self.client = client
        self.queue_url = queue_url

    def retry_soon(self, receipt_handles: Sequence[str], after_s: int) -> None:
        """Make received triggers visible again after `after_s` seconds instead of the queue's
        visibility timeout: a failed pass is retried in seconds, and the message group it
        blocks is free again as soon."""
        if not self.queue_url:
            return
        for start in range(0, len(receipt_handles), 10):  # at most 10 entries per call
            chunk = receipt_handles[start : start + 10]
            self.client.change_message_visibility_batch(
                QueueUrl=self.queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": handle, "VisibilityTimeout": after_s}
                    for i, handle in enumerate(chunk)
                ],
            )

    def request(self, reason: str, dedup_key: str) -> None:
        if not self.queue_url:
            # No queue configured: the Job State Changed event (rule CapacityFreed) triggers it.
            return
        self.client.send_message(
            QueueUrl=self.queue_url,
            MessageBody=json.dumps({"reason": reason}),
            MessageGroupId=resources.SCHEDULER_MESSAGE_GROUP,
            MessageDeduplicationId=_NAME_UNSAFE.sub("_", dedup_key)[:128],
        )
