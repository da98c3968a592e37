"""EventBridge rules, one per `resources.RULES` entry, and the two schedules. A rule targets its
function, the scheduler's FIFO queue, or an event queue (`resources.EVENT_QUEUES`) that hands
its function a batch at a time.

Each rule's pattern is `Rule.pattern`, unchanged; every target retries and then dead-letters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from spotline import resources as r
from stacks.messaging import TARGET_MAX_EVENT_AGE, TARGET_RETRY_ATTEMPTS

# Pattern keys EventBridge matches on, and their names in CDK's EventPattern.
_PATTERN_FIELDS = {
    "source": "source",
    "detail-type": "detail_type",
    "detail": "detail",
    "account": "account",
    "region": "region",
    "resources": "resources",
    "time": "time",
    "id": "id",
    "version": "version",
}


def event_pattern(pattern: Mapping[str, Any]) -> events.EventPattern:
    """CDK's EventPattern for a pattern written in EventBridge's own JSON form."""
    unknown = set(pattern) - set(_PATTERN_FIELDS)
    if unknown:
        raise ValueError(f"event pattern has keys EventBridge does not match on: {sorted(unknown)}")
    return events.EventPattern(**{_PATTERN_FIELDS[key]: _field(value) for key, value in pattern.items()})


def _field(value: Any) -> Any:
    """A top-level field's values: CDK types them as strings, so a `{"prefix": ...}` matcher
    (agent sources, `spotline.agent.<team>`) goes through `Match.prefix`."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        ((kind, argument),) = value[0].items()
        if kind == "prefix":
            return events.Match.prefix(argument)
        raise ValueError(f"event pattern matcher {kind!r} is not supported at the top level")
    return value


class EventRouting(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        project_bus: events.IEventBus,
        default_bus: events.IEventBus,
        scheduler_queue: sqs.IQueue,
        event_queues: Mapping[str, sqs.IQueue],
        functions: Mapping[str, lambda_.IFunction],
        dead_letters: sqs.IQueue,
    ) -> None:
        super().__init__(scope, construct_id)

        def target_for(name: str, message: events.RuleTargetInput | None = None) -> events.IRuleTarget:
            if name == r.SCHEDULER_QUEUE:
                return targets.SqsQueue(
                    scheduler_queue,
                    message_group_id=r.SCHEDULER_MESSAGE_GROUP,
                    message=message,
                    dead_letter_queue=dead_letters,
                    retry_attempts=TARGET_RETRY_ATTEMPTS,
                    max_event_age=TARGET_MAX_EVENT_AGE,
                )
            if name in event_queues:
                return targets.SqsQueue(
                    event_queues[name],
                    message=message,
                    dead_letter_queue=dead_letters,
                    retry_attempts=TARGET_RETRY_ATTEMPTS,
                    max_event_age=TARGET_MAX_EVENT_AGE,
                )
            return targets.LambdaFunction(
                functions[name],
                event=message,
                dead_letter_queue=dead_letters,
                retry_attempts=TARGET_RETRY_ATTEMPTS,
                max_event_age=TARGET_MAX_EVENT_AGE,
            )

        buses = {r.PROJECT_BUS: project_bus, r.DEFAULT_BUS: default_bus}
        self.rules: dict[str, events.Rule] = {}
        for rule in r.RULES:
            self.rules[rule.name] = events.Rule(
                self,
                rule.name,
                event_bus=buses[rule.bus],
                event_pattern=event_pattern(rule.pattern),
                targets=[target_for(rule.target)],
                description=f"Spotline: {rule.name} -> {rule.target}",
            )
        # The tick carries its own time and event id: the FIFO queue deduplicates on content, so
        # identical tick bodies within five minutes would be dropped.
        tick = events.RuleTargetInput.from_object(
            {"trigger": "tick", "time": events.EventField.time, "id": events.EventField.event_id}
        )
        self.rules["SchedulerTick"] = events.Rule(
            self,
            "SchedulerTick",
            schedule=events.Schedule.rate(Duration.minutes(r.SCHEDULER_TICK_RATE_MINUTES)),
            targets=[target_for(r.SCHEDULER_QUEUE, tick)],
            description="Spotline: periodic scheduling pass (aging, deadlines)",
        )
        self.rules["ReconcilerSchedule"] = events.Rule(
            self,
            "ReconcilerSchedule",
            schedule=events.Schedule.rate(Duration.minutes(r.RECONCILER_RATE_MINUTES)),
            targets=[target_for("reconciler")],
            description="Spotline: periodic reconciliation of jobs, Batch and the capacity ledger",
        )
