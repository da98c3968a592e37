"""The local runtime's path for heartbeats, on moto: the Job Heartbeat rule and queue that
`spotline.local.provision` creates from `spotline.resources` (as the stack does), and the router
handing the heartbeat function a batch per receive, as Lambda's event source mapping does."""

from __future__ import annotations

import json
from typing import Any

import pytest

from spotline import resources as r
from spotline.local import provision, router
from spotline.resources import agent_source

from .helpers import Deployment, eventbridge, start, submit


def _put(dep: Deployment, beats: list[dict[str, Any]]) -> None:
    """The agents' PutEvents (ten entries a request at most)."""
    events = dep.clients.client("events")
    for first in range(0, len(beats), 10):
        answer = events.put_events(
            Entries=[
                {
                    "Source": beat["source"],
                    "DetailType": beat["detail-type"],
                    "Detail": json.dumps(beat["detail"]),
                    "EventBusName": dep.bus,
                }
                for beat in beats[first : first + 10]
            ]
        )
        assert answer["FailedEntryCount"] == 0


def test_heartbeats_reach_the_function_a_batch_per_invocation(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the local rules and queues, and a running job whose agent sent 25 heartbeats
    sqs = deployment.clients.client("sqs")
    scheduler = sqs.create_queue(
        QueueName="test-scheduler.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    )["QueueUrl"]
    queues = provision.create_rules(
        deployment.clients.client("events"),
        sqs,
        prefix="test",
        project_bus=deployment.bus,
        scheduler_queue_url=scheduler,
    )
    running = start(deployment, submit(deployment))
    beats = [
        eventbridge(
            "job_heartbeat", source=agent_source("vision"), detail={"job_id": running.id, "step": step}
        )
        for step in range(1, 26)
    ]
    _put(deployment, beats)
    invoked: list[tuple[str, int]] = []
    real_invoke = router.invoke

    def counted(module: str, event: dict[str, Any]) -> Any:
        invoked.append((module, len(event.get("Records", [event]))))
        return real_invoke(module, event)

    monkeypatch.setattr(router, "invoke", counted)

    # When the router drains the heartbeat rule's queue (the thread `spotline local up` runs)
    delivery = router.Router(sqs, queues, scheduler)
    [rule] = [rule for rule in r.RULES if rule.target == r.HEARTBEAT_QUEUE.logical_id]
    while delivery.poll(queues[rule.name], rule.target):
        pass

    # Then all 25 were delivered in 3 invocations of the heartbeat function (10, 10 and 5: a
    # receive takes 10 messages at most here; Lambda's event source mapping takes up to 100)
    assert invoked == [("heartbeat", 10), ("heartbeat", 10), ("heartbeat", 5)]
    assert delivery.delivered == 25
    assert deployment.plane.jobs.get(running.id).step == 25
    # and the queue is empty: every message was deleted once handled
    assert sqs.receive_message(QueueUrl=queues[rule.name], WaitTimeSeconds=0).get("Messages") is None
