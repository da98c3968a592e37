"""Every rule pattern in resources.RULES, routed to an SQS queue on moto's EventBridge: the events
it must route arrive, the others do not. Also checks that what Spotline itself publishes
matches the rules that consume it."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from spotline import resources
from spotline.aws.events import EventBridgeSink
from spotline.control.publisher import EventPublisher
from spotline.control.records import JobRecord, TimelineEntry

from .helpers import Deployment, batch_event, load_event, submit

PROJECT_BUS = "rules-project"


def entry(event: dict[str, Any], bus: str) -> dict[str, Any]:
    return {
        "Source": event["source"],
        "DetailType": event["detail-type"],
        "Detail": json.dumps(event["detail"]),
        "EventBusName": bus,
    }


def scheduler_event(to: str) -> dict[str, Any]:
    return {
        "source": resources.SOURCE_SCHEDULER,
        "detail-type": resources.DETAIL_JOB_STATE_CHANGED,
        "detail": {"job_id": "job-1", "from": "RUNNING", "to": to, "reason": "test"},
    }


def submitted_event() -> dict[str, Any]:
    return {
        "source": resources.SOURCE_API,
        "detail-type": resources.DETAIL_JOB_SUBMITTED,
        "detail": {"job_id": "job-1", "team": "vision", "priority": "high"},
    }


def with_source(event: dict[str, Any], source: str) -> dict[str, Any]:
    changed = copy.deepcopy(event)
    changed["source"] = source
    return changed


# rule name -> (events it routes, events it does not)
CASES: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {
    "JobSubmitted": (
        [submitted_event()],
        [with_source(submitted_event(), "spotline.agent"), scheduler_event("PENDING")],
    ),
    "CapacityFreed": (
        [scheduler_event(state) for state in ("SUCCEEDED", "FAILED", "CANCELLED", "PENDING")],
        [
            scheduler_event("RUNNING"),
            scheduler_event("CHECKPOINTING"),
            with_source(scheduler_event("PENDING"), "spotline.api"),
        ],
    ),
    # Every team's source (spotline.agent.<team>); not the bare agent source, not another's.
    "CheckpointCompleted": (
        [
            load_event("checkpoint_completed"),
            with_source(load_event("checkpoint_completed"), "spotline.agent.nlp"),
        ],
        [
            load_event("job_heartbeat"),
            with_source(load_event("checkpoint_completed"), "spotline.api"),
            with_source(load_event("checkpoint_completed"), "spotline.agent"),
        ],
    ),
    "JobHeartbeat": (
        [load_event("job_heartbeat"), with_source(load_event("job_heartbeat"), "spotline.agent.nlp")],
        [
            load_event("checkpoint_completed"),
            with_source(load_event("job_heartbeat"), "spotline.scheduler"),
            with_source(load_event("job_heartbeat"), "spotline.agent"),
        ],
    ),
    "SpotInterruptionWarning": (
        [load_event("spot_interruption_warning")],
        [
            load_event("rebalance_recommendation"),
            with_source(load_event("spot_interruption_warning"), "aws.batch"),
        ],
    ),
    "RebalanceRecommendation": (
        [load_event("rebalance_recommendation")],
        [load_event("spot_interruption_warning")],
    ),
    # Both of AWS's spellings of the Capacity Block events, and the interruptible reservation's.
    "CapacityReservationEvents": (
        [
            load_event("capacity_block_delivered"),
            {**load_event("capacity_block_delivered"), "detail-type": "Capacity Block Reservation Delivered"},
            load_event("capacity_block_expiration_warning"),
            {
                **load_event("capacity_block_expiration_warning"),
                "detail-type": "Capacity Block Reservation Expiration Warning",
            },
            load_event("capacity_reservation_interruption_warning"),
        ],
        [
            load_event("spot_interruption_warning"),
            with_source(load_event("capacity_block_expiration_warning"), "aws.batch"),
        ],
    ),
    "BatchJobStateChange": (
        [
            batch_event("job-1", "b-1", "RUNNING"),
            batch_event("job-1", "b-1", "SUCCEEDED"),
            batch_event("job-1", "b-1", "FAILED"),
        ],
        # AWS's own sample is some other team's Batch job ("event-test"); the statuses before
        # RUNNING change nothing in the control plane, so they never reach it.
        [
            load_event("batch_job_state_change"),
            with_source(batch_event("job-1", "b-1", "RUNNING"), "aws.ec2"),
            *(
                batch_event("job-1", "b-1", status)
                for status in ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING")
            ),
        ],
    ),
}


def test_every_rule_has_cases() -> None:
    assert set(CASES) == {rule.name for rule in resources.RULES}


@pytest.mark.parametrize("rule", resources.RULES, ids=lambda r: r.name)
def test_rule_routes_exactly_the_events_of_its_pattern(deployment: Deployment, rule: resources.Rule) -> None:
    events = deployment.clients.client("events")
    sqs = deployment.clients.client("sqs")
    # Given the rule on its bus with an SQS target
    bus = resources.DEFAULT_BUS if rule.bus == resources.DEFAULT_BUS else PROJECT_BUS
    if bus != resources.DEFAULT_BUS:
        events.create_event_bus(Name=bus)
    queue_url = sqs.create_queue(QueueName=f"rule-{rule.name}")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    events.put_rule(Name=rule.name, EventBusName=bus, EventPattern=json.dumps(rule.pattern))
    events.put_targets(Rule=rule.name, EventBusName=bus, Targets=[{"Id": "queue", "Arn": queue_arn}])
    matching, other = CASES[rule.name]

    # When the matching and the other events are put on the bus
    response = events.put_events(Entries=[entry(e, bus) for e in matching + other])
    assert response["FailedEntryCount"] == 0

    # Then exactly the matching ones arrive
    received = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get(
        "Messages", []
    )
    bodies = [json.loads(m["Body"]) for m in received]
    assert sorted(json.dumps(b["detail"], sort_keys=True) for b in bodies) == sorted(
        json.dumps(e["detail"], sort_keys=True) for e in matching
    )
    assert sorted(b["source"] for b in bodies) == sorted(e["source"] for e in matching)


def test_what_spotline_publishes_reaches_the_scheduler_queue(deployment: Deployment) -> None:
    """The API's Job Submitted and the control plane's requeue (Job State Changed to PENDING)
    both trigger a pass; a start (to RUNNING) does not."""
    events = deployment.clients.client("events")
    sqs = deployment.clients.client("sqs")
    events.create_event_bus(Name=PROJECT_BUS)
    queue_url = sqs.create_queue(QueueName="scheduler-triggers")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    for rule in resources.RULES:
        if rule.target == resources.SCHEDULER_QUEUE:
            events.put_rule(Name=rule.name, EventBusName=PROJECT_BUS, EventPattern=json.dumps(rule.pattern))
            events.put_targets(
                Rule=rule.name, EventBusName=PROJECT_BUS, Targets=[{"Id": "q", "Arn": queue_arn}]
            )
    publisher = EventPublisher(EventBridgeSink(deployment.clients.events, PROJECT_BUS))
    record: JobRecord = submit(deployment)

    publisher.job_submitted(record)
    now = deployment.clock()
    publisher.job_state_changed(
        record, [TimelineEntry(record.id, 5, now, "PREEMPTED", "PENDING", "requeued")]
    )
    publisher.job_state_changed(record, [TimelineEntry(record.id, 6, now, "ADMITTED", "RUNNING", "started")])

    received = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10).get("Messages", [])
    kinds = sorted(
        (json.loads(m["Body"])["detail-type"], json.loads(m["Body"])["detail"].get("to")) for m in received
    )
    assert kinds == [("Job State Changed", "PENDING"), ("Job Submitted", None)]
