"""Delivers what the emulated EventBridge matched to the real handlers.

On AWS a rule invokes its Lambda target with the event, and a queue (the scheduler's FIFO queue,
an event queue such as the heartbeats') invokes its function with an SQS batch. moto only
delivers to SQS, so each rule has a queue here, and one thread per queue long-polls it and makes
the same call AWS would make: the event itself for a function target, an SQS event (`Records`)
for a queue's function, whose answer's `batchItemFailures` come back and the rest are deleted. A
failed call is retried after the queue's visibility timeout, up to `max_receives` times (AWS:
retry policy, then the DLQ).

An observer of a target sees each of its events first: the fleet drains the node a Spot
warning names before the handler requeues its jobs, whoever put the warning on the bus (on AWS
the ECS agent drains on the same notice).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from spotline import resources as r
from spotline.local import lambdas

log = logging.getLogger("spotline.local.router")


def invoke(module: str, event: dict[str, Any]) -> Any:
    """Call one function's handler with a fresh context, as one Lambda invocation."""
    function = next(f for f in r.FUNCTIONS if f.module == module)
    context = lambdas.LambdaContextStub.for_function(f"spotline-{function.name}")
    return lambdas.import_handler(function)(event, context)


class Router:
    """One long-polling thread per rule queue."""

    def __init__(
        self,
        sqs: Any,
        queues: dict[str, str],
        scheduler_queue_url: str,
        max_receives: int = 3,
        observers: Mapping[str, Callable[[dict[str, Any]], None]] | None = None,
    ) -> None:
        self._sqs = sqs
        self._observers = dict(observers or {})  # target -> called with each event first
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._max_receives = max_receives
        targets: dict[str, str] = {}
        for rule in r.RULES:
            url = queues[rule.name]
            targets[url] = rule.target
        targets[scheduler_queue_url] = r.SCHEDULER_QUEUE
        self._targets = targets
        self.delivered = 0

    def start(self) -> None:
        for url, target in self._targets.items():
            thread = threading.Thread(
                target=self._drain, args=(url, target), name=f"router-{target}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)

    def _drain(self, url: str, target: str) -> None:
        while not self._stop.is_set():
            try:
                self.poll(url, target)
            except Exception:  # the emulator is shutting down
                if self._stop.is_set():
                    return
                log.exception("receive from %s failed", target)
                time.sleep(0.5)

    def poll(self, url: str, target: str) -> int:
        """One receive from the queue at `url` (up to 10 messages, waiting up to a second) and
        their delivery to `target`: one call with them all for a queue's function, one call each
        for a rule's function. Returns the number of messages received."""
        reply = self._sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=1,
            VisibilityTimeout=5,
            AttributeNames=["All"],
        )
        messages = reply.get("Messages", [])
        if target == r.SCHEDULER_QUEUE:
            if messages:
                self._deliver(url, target, messages, {"Records": [_sqs_record(m, url) for m in messages]})
        elif r.event_queue(target) is not None:
            # Each body is an event, whole, as EventBridge's SQS target puts it (`account` included).
            records = [{**_sqs_record(m, url), "body": _event_body(m["Body"])} for m in messages]
            if records:
                self._deliver(url, target, messages, {"Records": records})
        else:
            for message in messages:
                event = _as_delivered_by_aws(json.loads(message["Body"]))
                self._observe(target, event)
                self._deliver(url, target, [message], event)
        return len(messages)

    def _observe(self, target: str, event: dict[str, Any]) -> None:
        observer = self._observers.get(target)
        if observer is None:
            return
        try:
            observer(event)
        except Exception:  # an observer's failure does not hold back the delivery
            log.exception("observer of %s failed", target)

    def _deliver(self, url: str, target: str, messages: list[dict[str, Any]], event: dict[str, Any]) -> None:
        queue = r.event_queue(target)
        module = "scheduler" if target == r.SCHEDULER_QUEUE else queue.function if queue else target
        try:
            answer = invoke(module, event)
        except Exception:
            log.exception("%s failed on %s", module, [m["MessageId"] for m in messages])
            self._give_up_on(url, messages)
            return
        failed: set[str] = set()
        if queue is not None and isinstance(answer, dict):
            # ReportBatchItemFailures: the records the function names come back, the rest are done.
            failed = {str(f.get("itemIdentifier")) for f in answer.get("batchItemFailures") or []}
            self._give_up_on(url, [m for m in messages if m["MessageId"] in failed])
        done = [m for m in messages if m["MessageId"] not in failed]
        self.delivered += len(done)
        for message in done:
            self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    def _give_up_on(self, url: str, messages: list[dict[str, Any]]) -> None:
        """Failed messages come back after their visibility timeout, until `max_receives`."""
        for message in messages:
            if int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1")) >= self._max_receives:
                log.error(
                    "dropping %s after %d attempts (the DLQ on AWS)", message["MessageId"], self._max_receives
                )
                self._sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def _sqs_record(message: dict[str, Any], url: str) -> dict[str, Any]:
    name = url.rsplit("/", 1)[-1]
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": message.get("Attributes", {}),
        "messageAttributes": {},
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": f"arn:aws:sqs:us-east-1:123456789012:{name}",
        "awsRegion": "us-east-1",
    }


def _as_delivered_by_aws(event: dict[str, Any]) -> dict[str, Any]:
    """moto's EventBridge leaves `account` out of the events it delivers; AWS always sets it
    (and Powertools' EventBridge model requires it)."""
    event.setdefault("account", lambdas.ACCOUNT_ID)
    return event


def _event_body(body: str) -> str:
    """An event queue's message body as AWS would deliver it; a body that is not an event is
    passed on as it is (the function fails that record, and it comes back until dropped)."""
    try:
        event = json.loads(body)
    except ValueError:
        return body
    return json.dumps(_as_delivered_by_aws(event)) if isinstance(event, dict) else body
