"""`bench/aws_costs.py` counts what the control plane costs by patching private hooks of the local
runtime and botocore. If one of them is renamed or no longer on the path the runtime takes, the
bench would count nothing there and report a cost that is too low: this fails loudly instead.

Hooks: `spotline.local.moto_server.serialized` (the emulated AWS's WSGI app: every request),
`spotline.local.lambdas.import_handler` (every handler invocation, with its CPU time),
`botocore.client.BaseClient._make_request` (tags a handler's calls with its function), and
`spotline.local.router.Router._deliver` (messages that reach the scheduler's queue)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.client import BaseClient

from bench import aws_costs
from spotline import resources as r
from spotline.local import lambdas, moto_server, router


def keep_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every hook the bench patches is put back after the test."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setattr(moto_server, "serialized", moto_server.serialized)
    monkeypatch.setattr(lambdas, "import_handler", lambdas.import_handler)
    monkeypatch.setattr(BaseClient, "_make_request", getattr(BaseClient, "_make_request"))  # noqa: B009
    monkeypatch.setattr(router.Router, "_deliver", router.Router._deliver)


@pytest.fixture
def meter(monkeypatch: pytest.MonkeyPatch) -> Iterator[aws_costs.Meter]:
    """The bench's meter installed."""
    keep_hooks(monkeypatch)
    counted = aws_costs.Meter()
    aws_costs.install_meter(counted)
    yield counted


def test_the_hooks_exist_where_the_runtime_calls_them() -> None:
    assert callable(moto_server.serialized) and callable(lambdas.import_handler)
    assert callable(getattr(BaseClient, "_make_request", None))
    assert callable(getattr(router.Router, "_deliver", None))
    # The runtime reaches them through the names the bench patches (module attribute lookups at
    # call time), not through a reference taken at import.
    assert "app = loopback_only(serialized(" in inspect.getsource(moto_server.SerializedMotoServer.start)
    assert "lambdas.import_handler(" in inspect.getsource(router)
    assert "self._deliver(" in inspect.getsource(router.Router)


def test_every_request_to_the_emulation_is_counted_by_caller(meter: aws_costs.Meter) -> None:
    server = moto_server.SerializedMotoServer()
    server.start()
    try:
        host, port = server.get_host_and_port()
        dynamodb = boto3.client("dynamodb", endpoint_url=f"http://{host}:{port}", region_name="us-east-1")
        dynamodb.list_tables()
        aws_costs._current.module = "heartbeat"  # as while the heartbeat handler runs
        try:
            dynamodb.list_tables()
        finally:
            aws_costs._current.module = None
    finally:
        server.stop()
    assert meter.requests[("control", "dynamodb", "ListTables")] == 1
    assert meter.requests[("fn:heartbeat", "dynamodb", "ListTables")] == 1


def test_every_handler_invocation_is_counted(meter: aws_costs.Meter) -> None:
    heartbeat = next(f for f in r.FUNCTIONS if f.name == "heartbeat")
    with pytest.raises(Exception):  # noqa: B017 (a bad event: the count is what matters)
        lambdas.import_handler(heartbeat)({"not": "an event"}, lambdas.LambdaContextStub())
    assert meter.invocations["heartbeat"] == 1
    assert meter.invocation_s["heartbeat"] > 0


def test_messages_to_the_scheduler_queue_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the router's delivery replaced by a recorder, then the bench's meter installed
    keep_hooks(monkeypatch)
    delivered: list[tuple[str, int]] = []

    def deliver(self: Any, url: str, target: str, messages: list[Any], event: Any) -> None:
        delivered.append((target, len(messages)))

    monkeypatch.setattr(router.Router, "_deliver", deliver)
    counted = aws_costs.Meter()
    aws_costs.install_meter(counted)

    # When the router delivers two messages of the scheduler's queue and one of another
    stub = object.__new__(router.Router)
    router.Router._deliver(stub, "url", r.SCHEDULER_QUEUE, [{"MessageId": "m1"}, {"MessageId": "m2"}], {})
    router.Router._deliver(stub, "url", "checkpoint_completed", [{"MessageId": "m3"}], {})
    heartbeats = r.HEARTBEAT_QUEUE.logical_id
    router.Router._deliver(stub, "url", heartbeats, [{"MessageId": "m4"}, {"MessageId": "m5"}], {})

    # Then the meter counted the scheduler's two and the heartbeat queue's two (a heartbeat's cost
    # is its share of a batch), and each delivery still happened
    assert delivered == [(r.SCHEDULER_QUEUE, 2), ("checkpoint_completed", 1), (heartbeats, 2)]
    assert counted.scheduler_messages["scheduler"] == 2
    assert counted.queue_messages == {"heartbeat": 2}
