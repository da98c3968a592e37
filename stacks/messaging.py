"""The project's event bus, the scheduler's FIFO trigger queue, the event queues in front of
batch-invoked functions (heartbeats), and the dead-letter queues."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from spotline import resources as r

# EventBridge retries a failed delivery this many times, for at most this long, before the event
# goes to the dead-letter queue.
TARGET_RETRY_ATTEMPTS = 8
TARGET_MAX_EVENT_AGE = Duration.hours(2)
DEAD_LETTER_RETENTION = Duration.days(14)
# Receives of one scheduling trigger before it is parked in the FIFO dead-letter queue.
SCHEDULER_MAX_RECEIVES = 5
# The scheduler queue's visibility timeout beyond the function's timeout (Lambda requires at
# least the timeout). It holds the one message group only when a pass dies without answering
# (a timeout or a crash); a pass that fails answers, and its triggers come back after
# functions.scheduler.RETRY_FAILED_PASS_AFTER_S.
SCHEDULER_VISIBILITY_MARGIN = Duration.seconds(30)


def _queue(scope: Construct, construct_id: str, **kwargs: Any) -> sqs.Queue:
    return sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        **kwargs,
    )


class Messaging(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        stage: str,
        scheduler_timeout: Duration,
        function_timeouts: Mapping[str, Duration],
    ) -> None:
        super().__init__(scope, construct_id)
        self.bus = events.EventBus(self, "Bus", event_bus_name=f"spotline-{stage}")
        self.default_bus = events.EventBus.from_event_bus_name(self, "DefaultBus", "default")
        # One dead-letter queue for every EventBridge target and for the asynchronous invocations
        # that still fail after Lambda's retries: EventBridge tags each dead letter with RULE_ARN /
        # TARGET_ARN, Lambda with the error, so one queue still says which delivery failed.
        # (An EventBridge DLQ must be a standard queue, even for a FIFO target.)
        self.events_dead_letters = _queue(self, "EventsDeadLetters", retention_period=DEAD_LETTER_RETENTION)
        self.scheduler_dead_letters = _queue(
            self,
            "SchedulerTriggersDeadLetters",
            fifo=True,
            retention_period=DEAD_LETTER_RETENTION,
        )
        # One message group: Lambda hands the scheduler one batch at a time, so passes never
        # overlap; content-based deduplication drops EventBridge's redeliveries of one event.
        # While a batch is invisible the whole group waits, so the visibility timeout is kept
        # short (AWS's six times the function timeout would stall scheduling for 6 minutes per
        # failure; with one batch in flight at a time there are no throttled retries to cover).
        # Standard queues in front of functions invoked a batch at a time (resources.EVENT_QUEUES):
        # a visibility timeout of six times the function's, as AWS advises for an event source
        # mapping with a batching window, and failures beyond `max_receives` to the DLQ.
        self.event_queues: dict[str, sqs.Queue] = {
            spec.logical_id: _queue(
                self,
                spec.logical_id,
                visibility_timeout=Duration.seconds(6 * function_timeouts[spec.function].to_seconds()),
                retention_period=Duration.seconds(spec.retention_s),
                dead_letter_queue=sqs.DeadLetterQueue(
                    queue=self.events_dead_letters, max_receive_count=spec.max_receives
                ),
            )
            for spec in r.EVENT_QUEUES
        }
        self.scheduler_queue = _queue(
            self,
            r.SCHEDULER_QUEUE,
            fifo=True,
            content_based_deduplication=True,
            visibility_timeout=Duration.seconds(
                scheduler_timeout.to_seconds() + SCHEDULER_VISIBILITY_MARGIN.to_seconds()
            ),
            retention_period=Duration.days(1),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.scheduler_dead_letters, max_receive_count=SCHEDULER_MAX_RECEIVES
            ),
        )
