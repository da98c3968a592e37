"""The emulation helper behind moto's server, as the local runtime uses it: the handlers and the
ASL run in this process, every SDK call goes over HTTP to the server (`SerializedMotoServer`:
one request at a time, transactions rolled back item by item)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

import functions.checkpoint_completed
import functions.workflow_tasks
from functions.runtime import use_control_plane
from spotline.aws.clients import AwsClients
from spotline.aws.emulation import (
    SerializedMotoServer,
    create_state_machines,
    create_tables,
    dispatch_lambda_tasks,
    enable_state_machine_execution,
    environment,
)
from spotline.aws.plane import build_control_plane
from spotline.control.settings import Settings
from spotline.domain import JobState

from .conftest import (
    CONFIG,
    REGION,
    Deployment,
    RecordingLauncher,
    StaticInstanceResolver,
    TestClock,
    context,
    eventbridge,
    preempt,
    start,
    submit,
)


@pytest.fixture
def server_deployment() -> Iterator[Deployment]:
    from moto.core.config import default_user_config

    executing = default_user_config["stepfunctions"]["execute_state_machine"]
    enable_state_machine_execution()
    server = SerializedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    try:
        clients = AwsClients(region=REGION, endpoint_url=f"http://{host}:{port}")
        tables = create_tables(clients.client("dynamodb"), prefix="server")
        clients.client("events").create_event_bus(Name="server-bus")
        machines = create_state_machines(clients.client("stepfunctions"), prefix="server")
        settings = Settings.from_env(
            environment(tables, event_bus="server-bus", state_machines=machines, config=CONFIG)
        )
        launcher, resolver, clock = RecordingLauncher(), StaticInstanceResolver(), TestClock()
        plane = build_control_plane(
            settings, clients, launcher=launcher, instance_resolver=resolver, clock=clock
        )
        use_control_plane(plane)
        yield Deployment(plane, clients, tables, "server-bus", machines, launcher, clock, resolver)
    finally:
        use_control_plane(None)
        server.stop()
        default_user_config["stepfunctions"]["execute_state_machine"] = executing


def test_a_preemption_round_trip_over_the_server(server_deployment: Deployment) -> None:
    dep = server_deployment
    plane = dep.plane
    with dispatch_lambda_tasks({"workflow_tasks": functions.workflow_tasks.handler}):
        # Given a running job asked to checkpoint
        running = start(dep, submit(dep), launch_workflow_runs=True)
        now = time.time()
        preempt(plane, running, 20, now=now, by="job-x")
        deadline = time.time() + 10
        while not plane.jobs.get(running.id).checkpoint_task_token:
            assert time.time() < deadline, "no task token stored"
            time.sleep(0.05)

        # When the agent's checkpoint arrives
        event = eventbridge("checkpoint_completed", detail={"job_id": running.id, "step": 3})
        functions.checkpoint_completed.handler(event, context())

        # Then the workflow finishes over HTTP and the job is requeued
        while plane.jobs.get(running.id).state is not JobState.PENDING:
            assert time.time() < deadline, f"job still {plane.jobs.get(running.id).state}"
            time.sleep(0.05)
        assert plane.jobs.get(running.id).job.preemptions == 1


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    server = SerializedMotoServer()
    server.start()
    host, port = server.get_host_and_port()
    # moto's backends are process-wide: start from an empty account.
    urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST"))
    try:
        client = boto3.client(
            "dynamodb",
            endpoint_url=f"http://{host}:{port}",
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        client.create_table(
            TableName="t",
            BillingMode="PAY_PER_REQUEST",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "g", "AttributeType": "S"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "by-g",
                    "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        )
        yield client
    finally:
        server.stop()


def _failing_transaction(client: Any, n: int, puts: int = 1) -> None:
    """Writes `puts` items and updates one, then fails on a condition: all of it is rolled back."""
    items: list[dict[str, Any]] = [
        {"Put": {"TableName": "t", "Item": {"pk": {"S": f"tx-{n}-{k}"}, "g": {"S": "tx"}}}}
        for k in range(puts)
    ]
    items += [
        {
            "Update": {
                "TableName": "t",
                "Key": {"pk": {"S": "base"}},
                "UpdateExpression": "SET v = :v",
                "ExpressionAttributeValues": {":v": {"N": str(n)}},
            }
        },
        {
            "ConditionCheck": {
                "TableName": "t",
                "Key": {"pk": {"S": "absent"}},
                "ConditionExpression": "attribute_exists(pk)",
            }
        },
    ]
    with pytest.raises(ClientError, match="TransactionCanceled"):
        client.transact_write_items(TransactItems=items)


def test_a_failed_transaction_leaves_every_item_as_it_was(dynamodb: Any) -> None:
    dynamodb.put_item(TableName="t", Item={"pk": {"S": "base"}, "g": {"S": "x"}, "v": {"N": "0"}})
    _failing_transaction(dynamodb, 7)
    assert dynamodb.get_item(TableName="t", Key={"pk": {"S": "base"}})["Item"]["v"] == {"N": "0"}
    assert "Item" not in dynamodb.get_item(TableName="t", Key={"pk": {"S": "tx-7-0"}})
    assert (
        dynamodb.query(
            TableName="t",
            IndexName="by-g",
            KeyConditionExpression="g = :g",
            ExpressionAttributeValues={":g": {"S": "tx"}},
        )["Items"]
        == []
    )
