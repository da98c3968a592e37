"""The EventBridge rules as synthesized (the stack's template, not spotline.resources), on
LocalStack's EventBridge with an SQS queue as each rule's target: AWS's sample events (job
submission, Spot interruption warning, rebalance recommendation, Batch state change, Checkpoint
Completed) and the other cases of tests/integration/test_rules.py reach exactly the rules whose
pattern they match; the scheduler tick's input transformer gives each tick a body of its own."""

from __future__ import annotations

import copy
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.test_rules import CASES

from .harness import LocalStack

# jsii prints a banner about Node 20 when it starts; scripts/synth.sh silences it the same way.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    from aws_cdk import App

    import app as cdk_app
    from tests.infra.support import cdk_context

    tmp = tmp_path_factory.mktemp("synth")
    app = App(context=cdk_context(), outdir=str(tmp / "cdk.out"))
    stack = cdk_app.build_app(app, build_dir=tmp / "build")
    app.synth()
    yield json.loads((tmp / "cdk.out" / f"{stack.stack_name}.template.json").read_text())


def synthesized_rules(template: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Rule name (resources.RULES, from its description "Spotline: <name> -> <target>") -> its
    properties in the template."""
    rules = {}
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Events::Rule":
            name = resource["Properties"]["Description"].removeprefix("Spotline: ").split(" -> ")[0]
            rules[name] = resource["Properties"]
    return rules


def queue_arn(sqs: Any, url: str) -> str:
    return str(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])


def drain(sqs: Any, url: str, expected: int, timeout_s: float = 10.0) -> list[dict[str, Any]]:
    """What arrives at `url`: at least `expected` messages, then whatever else comes within a second."""
    bodies: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    quiet_until = None
    while time.monotonic() < deadline:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
            "Messages", []
        )
        for message in messages:
            bodies.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        if len(bodies) >= expected:
            quiet_until = quiet_until or time.monotonic() + 1.0
            if not messages and time.monotonic() > quiet_until:
                break
    return bodies


def test_every_pattern_rule_of_the_template_has_cases(template: dict[str, Any]) -> None:
    patterned = {name for name, rule in synthesized_rules(template).items() if "EventPattern" in rule}
    assert patterned == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_synthesized_rule_routes_exactly_the_events_of_its_pattern(
    localstack: LocalStack, template: dict[str, Any], unique: str, name: str
) -> None:
    events, sqs = localstack.client("events"), localstack.client("sqs")
    rule = synthesized_rules(template)[name]
    # The project bus's rules name it (a reference to the stack's bus); the others use the default.
    bus = f"spotline-{unique}" if "EventBusName" in rule else "default"
    if bus != "default":
        events.create_event_bus(Name=bus)
    url = sqs.create_queue(QueueName=f"rule-{name}-{unique}")["QueueUrl"]
    events.put_rule(Name=f"{name}-{unique}", EventBusName=bus, EventPattern=json.dumps(rule["EventPattern"]))
    events.put_targets(
        Rule=f"{name}-{unique}", EventBusName=bus, Targets=[{"Id": "queue", "Arn": queue_arn(sqs, url)}]
    )
    matching, other = CASES[name]
    cases = []
    for kind, group in (("match", matching), ("other", other)):
        for i, event in enumerate(group):
            marked = copy.deepcopy(event)
            # An extra detail field: patterns name the fields they test, so it changes no match.
            marked["detail"]["spotline_case"] = f"{unique}-{kind}-{i}"
            cases.append(marked)
    entries = [
        {
            "Source": e["source"],
            "DetailType": e["detail-type"],
            "Detail": json.dumps(e["detail"]),
            "Resources": e.get("resources", []),
            "EventBusName": bus,
        }
        for e in cases
    ]
    response = events.put_events(Entries=entries)
    assert response["FailedEntryCount"] == 0

    bodies = drain(sqs, url, expected=len(matching))
    received = sorted(b["detail"]["spotline_case"] for b in bodies)
    assert received == sorted(f"{unique}-match-{i}" for i in range(len(matching)))
    assert all(b["source"] == c["source"] for b in bodies for c in cases if c["detail"] == b["detail"])
    events.remove_targets(Rule=f"{name}-{unique}", EventBusName=bus, Ids=["queue"])
    events.delete_rule(Name=f"{name}-{unique}", EventBusName=bus)


def test_the_tick_input_transformer_makes_each_tick_a_message_of_its_own(
    localstack: LocalStack, template: dict[str, Any], unique: str
) -> None:
    """The tick rule's target as synthesized (its input transformer and message group), put on a
    pattern rule (a schedule cannot be fired at will) whose target is a FIFO queue with
    content-based deduplication, as the scheduler's: two ticks are two messages."""
    events, sqs = localstack.client("events"), localstack.client("sqs")
    [tick] = [
        rule
        for rule in synthesized_rules(template).values()
        if "ScheduleExpression" in rule and "SqsParameters" in rule["Targets"][0]
    ]
    [target] = tick["Targets"]
    url = sqs.create_queue(
        QueueName=f"tick-{unique}.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    source = f"spotline.test.tick.{unique}"
    events.put_rule(Name=f"tick-{unique}", EventPattern=json.dumps({"source": [source]}))
    events.put_targets(
        Rule=f"tick-{unique}",
        Targets=[
            {
                "Id": "queue",
                "Arn": queue_arn(sqs, url),
                "SqsParameters": target["SqsParameters"],
                "InputTransformer": target["InputTransformer"],
            }
        ],
    )
    put = events.put_events(
        Entries=[{"Source": source, "DetailType": "Scheduled Event", "Detail": "{}"} for _ in range(2)]
    )
    ids = sorted(e["EventId"] for e in put["Entries"])

    bodies = drain(sqs, url, expected=2)

    assert sorted(b["id"] for b in bodies) == ids
    assert all(b["trigger"] == "tick" and b["time"] for b in bodies)
