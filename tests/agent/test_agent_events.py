"""The agent's events reach the project bus with the contract's shape (moto: bus -> rule -> SQS)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from spotline.agent import (
    Agent,
    AgentSettings,
    EventBridgePublisher,
    LocalCheckpointStore,
    RecordingPublisher,
)
from spotline.agent.wrapper import CommandWrapper
from spotline.resources import (
    DETAIL_CHECKPOINT_COMPLETED,
    DETAIL_JOB_HEARTBEAT,
    RULES,
    SOURCE_AGENT_PREFIX,
)

from .fakes import FakeClock

BUS = "spotline-test"


@pytest.fixture
def bus_to_queue() -> Iterator[tuple[Any, str]]:
    """The project bus with the stack's own agent rules, each delivering to one SQS queue."""
    with mock_aws():
        events = boto3.client("events", region_name="us-east-1")
        sqs = boto3.client("sqs", region_name="us-east-1")
        events.create_event_bus(Name=BUS)
        queue_url = sqs.create_queue(QueueName="agent-events")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        for rule in RULES:
            if rule.pattern["source"] == [{"prefix": SOURCE_AGENT_PREFIX}]:
                events.put_rule(Name=rule.name, EventBusName=BUS, EventPattern=json.dumps(rule.pattern))
                events.put_targets(Rule=rule.name, EventBusName=BUS, Targets=[{"Id": "q", "Arn": queue_arn}])
        yield events, queue_url


def drain(queue_url: str) -> list[dict[str, Any]]:
    sqs = boto3.client("sqs", region_name="us-east-1")
    messages = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
    return [json.loads(m["Body"]) for m in messages.get("Messages", [])]


def test_checkpoint_completed_and_heartbeat_reach_the_bus(
    bus_to_queue: tuple[Any, str], tmp_path: Path, clock: FakeClock
) -> None:
    events, queue_url = bus_to_queue
    agent = Agent(
        AgentSettings(
            job_id="job-e",
            run_id="spotline-job-e-r3",
            instance_id="local-1",
            heartbeat_s=30,
            checkpoint_interval_s=0,
        ),
        store=LocalCheckpointStore(tmp_path),
        publisher=EventBridgePublisher(events, BUS, team="vision"),
        clock=clock,
    )

    agent.report(10, 0.25, utilization=0.8)
    agent.poll_once()
    record = agent.checkpoint(10, {"w": 1}, progress=0.25)

    received = {e["detail-type"]: e for e in drain(queue_url)}
    assert set(received) == {DETAIL_CHECKPOINT_COMPLETED, DETAIL_JOB_HEARTBEAT}
    # The team's source (its job role may put no other), which the rules match by prefix.
    assert all(e["source"] == "spotline.agent.vision" for e in received.values())
    done = received[DETAIL_CHECKPOINT_COMPLETED]["detail"]
    assert record is not None
    assert {k: done[k] for k in ("job_id", "run_id", "checkpoint_uri", "step", "progress")} == {
        "job_id": "job-e",
        "run_id": "spotline-job-e-r3",
        "checkpoint_uri": record.uri,
        "step": 10,
        "progress": 0.25,
    }
    beat = received[DETAIL_JOB_HEARTBEAT]["detail"]
    assert {k: beat[k] for k in ("job_id", "run_id", "instance_id", "step", "progress", "utilization")} == {
        "job_id": "job-e",
        "run_id": "spotline-job-e-r3",
        "instance_id": "local-1",
        "step": 10,
        "progress": 0.25,
        "utilization": 0.8,
    }


def test_an_agent_without_a_team_is_routed_nowhere(bus_to_queue: tuple[Any, str]) -> None:
    """A standalone agent (no SPOTLINE_TEAM) puts `spotline.agent`: no rule routes it, so no
    handler ever credits it to a job."""
    events, queue_url = bus_to_queue
    assert EventBridgePublisher(events, BUS).publish(DETAIL_JOB_HEARTBEAT, {"job_id": "x", "step": 1})
    assert EventBridgePublisher(events, BUS, team="nlp").publish(
        DETAIL_JOB_HEARTBEAT, {"job_id": "y", "step": 1}
    )
    assert [e["detail"]["job_id"] for e in drain(queue_url)] == ["y"]


def test_a_missing_bus_is_logged_not_raised(bus_to_queue: tuple[Any, str]) -> None:
    events, _ = bus_to_queue
    publisher = EventBridgePublisher(events, "no-such-bus", attempts=1)

    assert publisher.publish(DETAIL_JOB_HEARTBEAT, {"job_id": "x"}) is False


@pytest.mark.parametrize(("node_index", "sends"), [(0, True), (1, True)])
def test_under_the_wrapper_every_node_of_a_gang_sends_heartbeats(node_index: int, sends: bool) -> None:
    publisher = RecordingPublisher()
    settings = AgentSettings(
        job_id="job-g", run_id="spotline-job-g-r1", heartbeat_s=0.05, node_index=node_index, main_node_index=0
    )
    wrapper = CommandWrapper(settings, publisher=publisher, instance_id="i-1", utilization_probe=lambda: None)

    assert wrapper.run([sys.executable, "-c", "import time; time.sleep(0.6)"]) == 0

    beats = [detail for kind, detail in publisher.events if kind == DETAIL_JOB_HEARTBEAT]
    assert (len(beats) > 0) is sends and wrapper.heartbeats_sent == len(beats)
    assert all(beat["run_id"] == "spotline-job-g-r1" for beat in beats)
    # Each names its node: the reconciler judges every node of a gang by its own heartbeats
    assert all(beat["node_index"] == node_index for beat in beats)
