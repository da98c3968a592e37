"""moto's server as the local runtime serves it (`spotline.local.moto_server`): the handlers and
the ASL run in this process, every SDK call goes over HTTP to the server, which answers one
request at a time. What that must keep: a workflow's round trip, a failed transaction leaving
nothing written, concurrent clients losing no write, SQS long polls that wait without holding
up other clients, a stopped server refusing calls."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

import functions.checkpoint_completed
import functions.workflow_tasks
from functions.runtime import use_control_plane
from spotline.aws.clients import AwsClients
from spotline.aws.plane import build_control_plane
from spotline.control.settings import Settings
from spotline.domain import JobState
from spotline.local.emulator import MOTO_CONFIG
from spotline.local.moto_lambda_route import dispatch_lambda_tasks
from spotline.local.moto_server import SerializedMotoServer
from spotline.local.provision import create_state_machines, create_tables, environment

from .helpers import (
    CONFIG,
    REGION,
    Deployment,
    RecordingLauncher,
    StaticInstanceResolver,
    TestClock,
    context,
    eventbridge,
    moto_client,
    preempt,
    start,
    submit,
)


def _post(url: str, body: dict[str, Any]) -> None:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request) as response:
        response.read()


@pytest.fixture
def server_deployment() -> Iterator[Deployment]:
    from moto.core.config import default_user_config

    saved = {service: dict(default_user_config[service]) for service in MOTO_CONFIG}  # type: ignore[literal-required]
    server = SerializedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    _post(f"http://{host}:{port}/moto-api/config", MOTO_CONFIG)
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
        for service, config in saved.items():
            default_user_config[service] = config  # type: ignore[literal-required]


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


def test_concurrent_writers_lose_no_write_while_transactions_fail(dynamodb: Any) -> None:
    """moto alone rolls a failed transaction back by restoring a copy of the table, wiping
    what other clients wrote meanwhile: served one request at a time, every write stays."""
    dynamodb.put_item(TableName="t", Item={"pk": {"S": "base"}, "g": {"S": "x"}, "v": {"N": "0"}})
    host = dynamodb.meta.endpoint_url

    def writer(n: int) -> None:
        client = boto3.client(
            "dynamodb",
            endpoint_url=host,
            region_name=REGION,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        for k in range(15):
            client.put_item(TableName="t", Item={"pk": {"S": f"w-{n}-{k}"}, "g": {"S": "w"}})
            _failing_transaction(client, n * 100 + k, puts=3)

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(writer, range(6)))
    written = dynamodb.scan(
        TableName="t", FilterExpression="g = :g", ExpressionAttributeValues={":g": {"S": "w"}}
    )
    assert sorted(item["pk"]["S"] for item in written["Items"]) == sorted(
        f"w-{n}-{k}" for n in range(6) for k in range(15)
    )
    assert dynamodb.get_item(TableName="t", Key={"pk": {"S": "base"}})["Item"]["v"] == {"N": "0"}


@pytest.fixture
def sqs(moto_server: tuple[SerializedMotoServer, str]) -> Any:
    return moto_client("sqs", moto_server[1])


def test_a_long_poll_gets_a_message_sent_while_it_waits_and_holds_up_nobody(sqs: Any) -> None:
    queue = sqs.create_queue(QueueName="q")["QueueUrl"]
    received: list[Any] = []
    poller = threading.Thread(
        target=lambda: received.append(
            sqs_client_like(sqs).receive_message(QueueUrl=queue, WaitTimeSeconds=10)
        )
    )
    started = time.monotonic()
    poller.start()
    time.sleep(0.5)
    # While the poll waits, other requests are served at once.
    assert sqs.list_queues()["QueueUrls"] == [queue]
    sqs.send_message(QueueUrl=queue, MessageBody="hello")
    poller.join(timeout=10)
    assert [m["Body"] for m in received[0]["Messages"]] == ["hello"]
    # It came with the send, not at the end of the wait.
    assert time.monotonic() - started < 3


def test_a_long_poll_without_a_message_waits_its_time_and_returns_none(sqs: Any) -> None:
    queue = sqs.create_queue(QueueName="q")["QueueUrl"]
    started = time.monotonic()
    reply = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=2)
    waited = time.monotonic() - started
    assert "Messages" not in reply or reply["Messages"] == []
    assert 1.9 <= waited < 5


def test_a_message_visible_again_reaches_a_long_poll(sqs: Any) -> None:
    queue = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=queue, MessageBody="retry me")
    first = sqs.receive_message(QueueUrl=queue, VisibilityTimeout=1)["Messages"]
    assert [m["Body"] for m in first] == ["retry me"]
    # No request adds it back: its visibility timeout runs out during the wait.
    again = sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=5)["Messages"]
    assert [m["Body"] for m in again] == ["retry me"]


def test_a_long_poll_on_a_missing_queue_fails_at_once(
    sqs: Any, moto_server: tuple[SerializedMotoServer, str]
) -> None:
    started = time.monotonic()
    with pytest.raises(ClientError, match=r"NonExistentQueue|QueueDoesNotExist"):
        sqs.receive_message(QueueUrl=f"{moto_server[1]}/123456789012/absent", WaitTimeSeconds=10)
    assert time.monotonic() - started < 3


def sqs_client_like(client: Any) -> Any:
    """Another SQS client at the same endpoint (a client is not shared between threads)."""
    return moto_client("sqs", client.meta.endpoint_url)


def test_a_stopped_server_refuses_calls() -> None:
    server = SerializedMotoServer()
    server.start()
    url = "http://{}:{}".format(*server.get_host_and_port())
    client = moto_client("dynamodb", url)
    assert "TableNames" in client.list_tables()
    server.stop()
    with pytest.raises(EndpointConnectionError):
        client.list_tables()


def test_a_large_body_is_read_whole(dynamodb: Any) -> None:
    value = "x" * 300_000
    for n in range(3):  # on one kept connection, each body must end where the next request starts
        dynamodb.put_item(TableName="t", Item={"pk": {"S": f"k{n}"}, "v": {"S": value}})
    for n in range(3):
        assert dynamodb.get_item(TableName="t", Key={"pk": {"S": f"k{n}"}})["Item"]["v"]["S"] == value


def _own_address() -> str | None:
    """This machine's address on its default route (no packet is sent), or None if it has none."""
    import socket

    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1: connecting a UDP socket only picks the route
        address = str(probe.getsockname()[0])
    except OSError:
        return None
    finally:
        probe.close()
    return None if address.startswith("127.") else address


def _raw_get(port: int, headers: dict[str, str]) -> tuple[int, str]:
    import http.client

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request("GET", "/moto-api/data.json", headers=headers)
        answer = connection.getresponse()
        return answer.status, answer.read().decode()
    finally:
        connection.close()


def test_the_endpoint_serves_this_machines_sdk_clients_only(
    moto_server: tuple[SerializedMotoServer, str],
) -> None:
    server, url = moto_server
    host, port = server.get_host_and_port()
    # It listens on loopback: the machine's other addresses do not reach it
    assert host == "127.0.0.1"
    address = _own_address()
    if address is not None:
        import socket

        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((address, port), timeout=5).close()
    # An SDK client is served (by any of the loopback names)
    assert "TableNames" in moto_client("dynamodb", url).list_tables()
    assert "TableNames" in moto_client("dynamodb", f"http://localhost:{port}").list_tables()
    assert _raw_get(port, {"Host": f"localhost:{port}"})[0] == 200
    # What a web page in a browser would send is refused: another origin (moto answers any with
    # CORS headers), or its own domain resolving to 127.0.0.1 (DNS rebinding)
    status, body = _raw_get(port, {"Host": f"127.0.0.1:{port}", "Origin": "https://evil.example"})
    assert status == 403 and "SDK clients only" in body
    assert _raw_get(port, {"Host": f"evil.example:{port}"})[0] == 403
    # And it cannot be bound anywhere else
    with pytest.raises(ValueError, match="loopback only"):
        SerializedMotoServer(ip_address="0.0.0.0")
