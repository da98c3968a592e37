"""What `SerializedMotoServer` changes in moto for the local runtime's costs, and that it changes
nothing else: connections are kept alive (one TCP connection serves many calls), a request
body is read whole, a queue attribute asked for alone has the value GetQueueAttributes "All"
gives, and a failed transaction still leaves nothing written (tests/integration/test_emulation_server.py)."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from spotline.aws import emulation
from spotline.aws.emulation import SerializedMotoServer

from .helpers import moto_client


@pytest.fixture
def server(moto_server: tuple[SerializedMotoServer, str]) -> tuple[SerializedMotoServer, str]:
    return moto_server


def _list_tables(connection: http.client.HTTPConnection) -> tuple[int, dict[str, Any], str | None]:
    connection.request(
        "POST",
        "/",
        body=json.dumps({}),
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "DynamoDB_20120810.ListTables",
            "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, "
            "SignedHeaders=host, Signature=x",
        },
    )
    response = connection.getresponse()
    body = json.loads(response.read())
    return response.status, body, response.getheader("Connection")


def test_one_connection_serves_many_requests(server: tuple[SerializedMotoServer, str]) -> None:
    _, url = server
    moto_client("dynamodb", url).create_table(
        TableName="kept",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
    )
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.connect()
        first_socket = connection.sock
        for _ in range(3):
            status, body, header = _list_tables(connection)
            assert status == 200
            assert body["TableNames"] == ["kept"]
            assert header != "close"
            # The same socket answered: the server kept the connection open.
            assert connection.sock is first_socket
    finally:
        connection.close()


def test_stop_closes_the_kept_connections() -> None:
    server = SerializedMotoServer()
    server.start()
    host, port = server.get_host_and_port()
    connection = http.client.HTTPConnection(host, port, timeout=30)
    try:
        assert _list_tables(connection)[0] == 200
        server.stop()
        # A kept-alive connection is not served after the stop.
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            _list_tables(connection)
    finally:
        connection.close()


def test_a_large_body_is_read_whole(server: tuple[SerializedMotoServer, str]) -> None:
    _, url = server
    dynamodb = moto_client("dynamodb", url)
    dynamodb.create_table(
        TableName="big",
        BillingMode="PAY_PER_REQUEST",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
    )
    value = "x" * 300_000
    for n in range(3):  # on one kept connection, each body must end where the next request starts
        dynamodb.put_item(TableName="big", Item={"pk": {"S": f"k{n}"}, "v": {"S": value}})
    for n in range(3):
        item = dynamodb.get_item(TableName="big", Key={"pk": {"S": f"k{n}"}})["Item"]
        assert item["v"]["S"] == value


@pytest.mark.parametrize("fifo", [False, True])
def test_a_queue_attribute_alone_is_what_all_gives(
    server: tuple[SerializedMotoServer, str], fifo: bool
) -> None:
    _, url = server
    sqs = moto_client("sqs", url)
    dead = sqs.create_queue(
        QueueName="dead.fifo" if fifo else "dead", Attributes={"FifoQueue": "true"} if fifo else {}
    )
    dead_arn = sqs.get_queue_attributes(QueueUrl=dead["QueueUrl"], AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    attributes = {
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dead_arn, "maxReceiveCount": 3}),
        "VisibilityTimeout": "40",
    }
    if fifo:
        attributes |= {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
    queue = sqs.create_queue(QueueName="q.fifo" if fifo else "q", Attributes=attributes)["QueueUrl"]
    for n in range(3):
        extra = {"MessageGroupId": "g"} if fifo else {}
        sqs.send_message(QueueUrl=queue, MessageBody=f"m{n}", **extra)
    every = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    names = [
        "ApproximateNumberOfMessages",
        "MessageRetentionPeriod",
        "RedrivePolicy",
        "VisibilityTimeout",
        "ContentBasedDeduplication",
        "FifoQueue",
        "KmsMasterKeyId",
    ]
    for name in names:
        alone = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=[name]).get("Attributes", {})
        assert alone == ({name: every[name]} if name in every else {}), name
    assert every["ApproximateNumberOfMessages"] == "3"
    with pytest.raises(Exception, match=r"InvalidAttributeName|Unknown Attribute"):
        sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["NoSuchAttribute"])


def test_moto_modules_are_listed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from moto import backends

    emulation.install_serialized_moto()
    listed = list(backends.list_of_moto_modules())
    assert "dynamodb" in listed and "sqs" in listed

    def no_listing(path: str) -> list[str]:
        raise AssertionError(f"listed {path} again")

    # Routing a request no longer lists moto's package directory.
    monkeypatch.setattr(backends.os, "listdir", no_listing)
    assert list(backends.list_of_moto_modules()) == listed


def test_receiving_does_not_count_the_queue(
    server: tuple[SerializedMotoServer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.sqs.models import Queue

    _, url = server
    sqs = moto_client("sqs", url)
    queue = sqs.create_queue(QueueName="backlog")["QueueUrl"]
    for n in range(3):
        sqs.send_message(QueueUrl=queue, MessageBody=f"m{n}")

    def counted(self: Any) -> int:
        raise AssertionError("the queue's messages were counted")

    # ReceiveMessage reads the retention period once per message: that must not count the
    # whole queue each time (a backlog's length squared).
    monkeypatch.setattr(Queue, "approximate_number_of_messages", property(counted))
    received = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in received) == ["m0", "m1", "m2"]


@pytest.mark.parametrize("fifo", [False, True])
def test_sending_does_not_count_the_queue(
    server: tuple[SerializedMotoServer, str], monkeypatch: pytest.MonkeyPatch, fifo: bool
) -> None:
    from moto.sqs.models import Queue

    _, url = server
    sqs = moto_client("sqs", url)
    attributes = {"FifoQueue": "true", "ContentBasedDeduplication": "true"} if fifo else {}
    name = "backlog.fifo" if fifo else "backlog"
    queue = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
    extra = {"MessageGroupId": "g"} if fifo else {}

    def counted(self: Any) -> int:
        raise AssertionError("the queue's messages were counted")

    # SendMessage reads ContentBasedDeduplication from the queue's attributes: that must not
    # count the whole queue each time (a backlog's length squared).
    for name in (
        "approximate_number_of_messages",
        "approximate_number_of_messages_delayed",
        "approximate_number_of_messages_not_visible",
    ):
        monkeypatch.setattr(Queue, name, property(counted))
    for n in range(3):
        sqs.send_message(QueueUrl=queue, MessageBody=f"m{n}", **extra)
    if fifo:  # content-based deduplication still drops a repeat
        sqs.send_message(QueueUrl=queue, MessageBody="m0", **extra)
    monkeypatch.undo()
    counts = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert counts["ApproximateNumberOfMessages"] == "3"
    assert counts["ApproximateNumberOfMessagesNotVisible"] == "0"
    received = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in received) == ["m0", "m1", "m2"]
    counts = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["All"])["Attributes"]
    assert counts["ApproximateNumberOfMessages"] == "0"
    assert counts["ApproximateNumberOfMessagesNotVisible"] == "3"


EVERY_TYPE = {
    "pk": {"S": "job-1"},
    "n": {"N": "12.5"},
    "blob": {"B": b"\x00\xffcheckpoint"},
    "names": {"SS": ["a", "b"]},
    "numbers": {"NS": ["1", "2.5"]},
    "blobs": {"BS": [b"\x01", b"\x02\x03"]},
    "nested": {"M": {"inner": {"L": [{"S": "x"}, {"N": "3"}, {"B": b"y"}, {"NULL": True}]}}},
    "flag": {"BOOL": False},
    "nothing": {"NULL": True},
    "empty": {"S": ""},
}


def test_items_of_every_type_read_back_exactly_through_the_fast_path(
    server: tuple[SerializedMotoServer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = server
    dynamodb = moto_client("dynamodb", url)
    dynamodb.create_table(
        TableName="t",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    written = []
    original = emulation._attribute_value_json

    def counted(value: dict[str, Any]) -> dict[str, Any]:
        written.append(value)
        return original(value)

    monkeypatch.setattr(emulation, "_attribute_value_json", counted)
    dynamodb.put_item(TableName="t", Item=EVERY_TYPE)
    # Every read path returns what was written, binaries and nested values included.
    assert dynamodb.get_item(TableName="t", Key={"pk": {"S": "job-1"}})["Item"] == EVERY_TYPE
    queried = dynamodb.query(
        TableName="t", KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "job-1"}}
    )
    assert queried["Items"] == [EVERY_TYPE]
    updated = dynamodb.update_item(
        TableName="t",
        Key={"pk": {"S": "job-1"}},
        UpdateExpression="SET flag = :t",
        ExpressionAttributeValues={":t": {"BOOL": True}},
        ReturnValues="ALL_NEW",
    )["Attributes"]
    assert updated == {**EVERY_TYPE, "flag": {"BOOL": True}}
    assert written  # the values went through the fast path, not moto's shape walker


def _run_to_end(sfn: Any, machine: str, payload: dict[str, Any]) -> dict[str, Any]:
    import time
    import uuid

    execution = sfn.start_execution(
        stateMachineArn=machine, name=uuid.uuid4().hex, input=json.dumps(payload)
    )["executionArn"]
    for _ in range(200):
        described = sfn.describe_execution(executionArn=execution)
        if described["status"] != "RUNNING":
            return described  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError("the execution never ended")


def test_a_definition_is_parsed_once_and_each_execution_evaluates_its_own_input(
    server: tuple[SerializedMotoServer, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.stepfunctions.parser.asl.parse import asl_parser

    _, url = server
    emulation.enable_state_machine_execution()
    sfn = moto_client("stepfunctions", url)
    role = "arn:aws:iam::123456789012:role/sfn"

    def machine(name: str, suffix: str) -> str:
        definition = {
            "StartAt": "Shape",
            "States": {
                "Shape": {
                    "Type": "Pass",
                    "Parameters": {"job.$": "$.job", "tag": suffix},
                    "ResultPath": "$.shaped",
                    "Next": "Pick",
                },
                "Pick": {"Type": "Pass", "InputPath": "$.shaped", "End": True},
            },
        }
        return sfn.create_state_machine(name=name, definition=json.dumps(definition), roleArn=role)[  # type: ignore[no-any-return]
            "stateMachineArn"
        ]

    parses = []
    real = asl_parser.ASLParser.state_machine

    def counted(self: Any) -> Any:
        parses.append(1)
        return real(self)

    monkeypatch.setattr(asl_parser.ASLParser, "state_machine", counted)
    first, second = machine("first", "one"), machine("second", "two")
    outputs = [json.loads(_run_to_end(sfn, first, {"job": f"job-{n}"})["output"]) for n in range(3)]
    assert outputs == [{"job": f"job-{n}", "tag": "one"} for n in range(3)]
    assert json.loads(_run_to_end(sfn, second, {"job": "job-9"})["output"]) == {"job": "job-9", "tag": "two"}
    # One parse per definition (when the machine is created and validated); the four
    # executions reuse its tree (moto alone parses on every execution: six).
    assert len(parses) == 2
    # A JSONPath is parsed once wherever moto parses it (EventBridge's input transformer imports
    # the package's `parse` per event).
    import jsonpath_ng.ext

    assert jsonpath_ng.ext.parse("$.detail.job_id") is jsonpath_ng.ext.parse("$.detail.job_id")


def test_retries_count_per_execution_with_the_kept_program(
    server: tuple[SerializedMotoServer, str],
) -> None:
    """With the program of each execution unpickled from the one first built
    (`install_parse_caches`), retries still count per execution: what one execution counted
    never carries into the next."""
    _, url = server
    emulation.enable_state_machine_execution()
    sfn = moto_client("stepfunctions", url)
    definition = {
        "StartAt": "Flaky",
        "States": {
            "Flaky": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {"FunctionName": emulation.function_arn("flaky"), "Payload.$": "$"},
                "ResultSelector": {"attempts.$": "$.Payload.attempts"},
                "Retry": [
                    {"ErrorEquals": ["Flaked"], "IntervalSeconds": 1, "BackoffRate": 1, "MaxAttempts": 2}
                ],
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "GaveUp"}],
                "End": True,
            },
            "GaveUp": {"Type": "Pass", "Result": {"gave_up": True}, "End": True},
        },
    }
    machine = sfn.create_state_machine(
        name="flaky", definition=json.dumps(definition), roleArn="arn:aws:iam::123456789012:role/sfn"
    )["stateMachineArn"]
    attempts: dict[str, int] = {}

    class Flaked(Exception):
        pass

    def flaky(event: dict[str, Any], context: Any) -> dict[str, Any]:
        run = event["run"]
        attempts[run] = attempts.get(run, 0) + 1
        if attempts[run] <= event["failures"]:
            raise Flaked(run)
        return {"attempts": attempts[run]}

    with emulation.dispatch_lambda_tasks({"flaky": flaky}):
        # Each of these fails twice, and is retried twice: it succeeds on its third attempt only
        # if the two retries allowed are its own.
        for n in range(2):
            output = json.loads(_run_to_end(sfn, machine, {"run": f"r{n}", "failures": 2})["output"])
            assert output == {"attempts": 3}
        # Three failures exhaust its retries: caught.
        output = json.loads(_run_to_end(sfn, machine, {"run": "r9", "failures": 3})["output"])
        assert output == {"gave_up": True}
