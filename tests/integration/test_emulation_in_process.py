"""This process's SDK calls served without HTTP (`SerializedMotoServer.serve_in_process`), and the
moto costs cut for them (`install_update_expression_cache`, `install_condition_lexing_cache`,
`install_shallow_read_copies`): the answers, the errors and what is stored are the same as over
HTTP; only the transport, the repeated parses and the copies go."""

from __future__ import annotations

import http.client
import json
import pickle
import urllib.request
from typing import Any

import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, EndpointConnectionError

from spotline.aws.emulation import SerializedMotoServer

from .helpers import moto_client


@pytest.fixture
def served(moto_server: tuple[SerializedMotoServer, str]) -> tuple[SerializedMotoServer, str]:
    """The server, with this process's SDK calls served in-process."""
    moto_server[0].serve_in_process()
    return moto_server


def _table(url: str, name: str = "t") -> Any:
    dynamodb = moto_client("dynamodb", url)
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "id", "AttributeType": "S"},
            {"AttributeName": "state", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by-state",
                "KeySchema": [{"AttributeName": "state", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return dynamodb


def test_this_process_calls_without_a_socket_and_other_clients_still_over_http(
    served: tuple[SerializedMotoServer, str],
) -> None:
    server, url = served
    dynamodb = _table(url)
    dynamodb.put_item(TableName="t", Item={"id": {"S": "a"}, "state": {"S": "PENDING"}})
    s3 = moto_client("s3", url)
    s3.create_bucket(Bucket="spotline-test")
    key = "checkpoints/ä b/step 1.json"  # quoted in the path: read back under the same key
    s3.put_object(Bucket="spotline-test", Key=key, Body=b"\x00\x01payload")
    assert s3.get_object(Bucket="spotline-test", Key=key)["Body"].read() == b"\x00\x01payload"
    assert s3.head_object(Bucket="spotline-test", Key=key)["ContentLength"] == 9
    sqs = moto_client("sqs", url)
    queue = sqs.create_queue(QueueName="q")["QueueUrl"]
    sqs.send_message(QueueUrl=queue, MessageBody="hello")
    assert [m["Body"] for m in sqs.receive_message(QueueUrl=queue)["Messages"]] == ["hello"]
    assert server._connections == set()  # not one TCP connection for all of that

    # Another process's client (here: a raw HTTP connection) is served as before, and sees the
    # same state.
    host, port = server.get_host_and_port()
    connection = http.client.HTTPConnection(host, port, timeout=10)
    connection.request(
        "POST",
        "/",
        body=json.dumps({"TableName": "t", "Key": {"id": {"S": "a"}}}),
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "DynamoDB_20120810.GetItem",
            "Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/dynamodb/aws4_request, "
            "SignedHeaders=host, Signature=x",
        },
    )
    response = connection.getresponse()
    assert response.status == 200
    assert json.loads(response.read())["Item"]["state"] == {"S": "PENDING"}
    assert len(server._connections) == 1
    connection.close()


def test_errors_are_the_answers_http_gives_and_a_stopped_server_refuses_calls() -> None:
    server = SerializedMotoServer()
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"))
    dynamodb = _table(url)
    dynamodb.put_item(TableName="t", Item={"id": {"S": "a"}, "state": {"S": "PENDING"}})
    failed = {
        "Update": {
            "TableName": "t",
            "Key": {"id": {"S": "a"}},
            "UpdateExpression": "SET #s = :n",
            "ConditionExpression": "#s = :o",
            "ExpressionAttributeNames": {"#s": "state"},
            "ExpressionAttributeValues": {":n": {"S": "RUNNING"}, ":o": {"S": "ADMITTED"}},
        }
    }

    def answers() -> tuple[str, list[str]]:
        with pytest.raises(ClientError) as error:
            dynamodb.transact_write_items(TransactItems=[failed])
        reasons = [r["Code"] for r in error.value.response["CancellationReasons"]]
        return error.value.response["Error"]["Code"], reasons

    over_http = answers()
    server.serve_in_process()
    assert answers() == over_http == ("TransactionCanceledException", ["ConditionalCheckFailed"])
    server.stop()
    with pytest.raises(EndpointConnectionError):
        dynamodb.get_item(TableName="t", Key={"id": {"S": "a"}})


def _shape(node: Any) -> Any:
    """A syntax tree as nested tuples: each node's class, its own values, its children."""
    if not hasattr(node, "__dict__"):
        return repr(node)
    own = sorted(
        (k, v)
        for k, v in vars(node).items()
        if k not in ("children", "parent") and not k.startswith("_spotline")
    )
    return type(node).__name__, repr(own), tuple(_shape(c) for c in getattr(node, "children", None) or ())


def test_an_update_expression_is_parsed_once_and_applied_with_each_calls_values(
    served: tuple[SerializedMotoServer, str],
) -> None:
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser
    from moto.dynamodb.parsing.tokens import ExpressionTokenizer

    _, url = served
    dynamodb = _table(url)
    text = "SET #s = :s, #n = :n, #l = list_append(if_not_exists(#l, :empty), :l) REMOVE #gone"
    for job, value in (("a", 1), ("b", 2), ("a", 3)):
        dynamodb.update_item(
            TableName="t",
            Key={"id": {"S": job}},
            UpdateExpression=text,
            ConditionExpression="attribute_not_exists(#s) OR #s <> :s",
            ExpressionAttributeNames={"#s": "state", "#n": "n", "#l": "log", "#gone": "gone"},
            ExpressionAttributeValues={
                ":s": {"S": f"S{value}"},
                ":n": {"N": str(value)},
                ":empty": {"L": []},
                ":l": {"L": [{"N": str(value)}]},
            },
        )
    items = {i["id"]["S"]: i for i in dynamodb.scan(TableName="t")["Items"]}
    assert items["a"]["n"] == {"N": "3"} and items["a"]["state"] == {"S": "S3"}
    assert items["a"]["log"] == {"L": [{"N": "1"}, {"N": "3"}]}
    assert items["b"]["log"] == {"L": [{"N": "2"}]}
    # The kept tree is the one parsed, untouched by the three updates made from it.
    tree = UpdateExpressionParser.make(text)
    assert UpdateExpressionParser.make(text) is tree
    fresh = UpdateExpressionParser(ExpressionTokenizer.make_list(text)).parse()
    assert pickle.dumps(fresh, protocol=pickle.HIGHEST_PROTOCOL) == tree._spotline_pickled
    assert _shape(tree) == _shape(fresh)
    # The checks of the text skipped for names it passed with still run for other names: the same
    # text may not update the key.
    with pytest.raises(ClientError, match="Cannot update attribute id"):
        dynamodb.update_item(
            TableName="t",
            Key={"id": {"S": "a"}},
            UpdateExpression=text,
            ExpressionAttributeNames={"#s": "id", "#n": "n", "#l": "log", "#gone": "gone"},
            ExpressionAttributeValues={
                ":s": {"S": "b"},
                ":n": {"N": "1"},
                ":empty": {"L": []},
                ":l": {"L": []},
            },
        )
    # A text that does not parse is not kept: it fails every time.
    for _ in range(2):
        with pytest.raises(ClientError, match="ValidationException"):
            dynamodb.update_item(
                TableName="t",
                Key={"id": {"S": "a"}},
                UpdateExpression="SET #s = = :s",
                ExpressionAttributeNames={"#s": "state"},
                ExpressionAttributeValues={":s": {"S": "x"}},
            )


def test_a_query_answers_what_is_stored_when_it_is_served(
    served: tuple[SerializedMotoServer, str],
) -> None:
    from moto.dynamodb.models import table as table_module

    _, url = served
    dynamodb = _table(url)
    for job in ("a", "b"):
        dynamodb.put_item(
            TableName="t",
            Item={"id": {"S": job}, "state": {"S": "RUNNING"}, "tags": {"M": {"k": {"L": [{"S": "v"}]}}}},
        )
    query = {
        "TableName": "t",
        "IndexName": "by-state",
        "KeyConditionExpression": "#s = :s",
        "ExpressionAttributeNames": {"#s": "state"},
        "ExpressionAttributeValues": {":s": {"S": "RUNNING"}},
    }
    # Behaviour only: a deep copy answers the same. What the shallow copy must not change (a stored
    # value changed in place by a later update, as list_append does) is checked on the answers.
    first = dynamodb.query(**query)["Items"]
    dynamodb.update_item(
        TableName="t",
        Key={"id": {"S": "a"}},
        UpdateExpression="SET tags.k = list_append(tags.k, :more)",
        ExpressionAttributeValues={":more": {"L": [{"S": "w"}]}},
    )
    second = dynamodb.query(**query, ProjectionExpression="id, tags")["Items"]
    assert sorted(i["id"]["S"] for i in first) == ["a", "b"]
    assert {i["id"]["S"]: i["tags"]["M"]["k"]["L"] for i in first}["a"] == [{"S": "v"}]
    assert {i["id"]["S"]: i["tags"]["M"]["k"]["L"] for i in second}["a"] == [{"S": "v"}, {"S": "w"}]
    assert all(set(i) == {"id", "tags"} for i in second)
    # Anything else the table module copies is still copied deeply.
    nested = {"a": [1, {"b": 2}]}
    copied = table_module.copy.deepcopy(nested)
    assert copied == nested and copied["a"][1] is not nested["a"][1]


def test_a_condition_lexed_once_is_evaluated_with_each_calls_names_and_values(
    served: tuple[SerializedMotoServer, str],
) -> None:
    _, url = served
    dynamodb = _table(url)
    dynamodb.put_item(
        TableName="t", Item={"id": {"S": "a"}, "state": {"S": "RUNNING"}, "n": {"N": "5"}, "tag": {"S": "ab"}}
    )
    text = "(#f = :v AND #n BETWEEN :lo AND :hi) OR (begins_with(#t, :p) AND size(#t) IN (:one, :three))"

    def holds(names: dict[str, str], values: dict[str, Any]) -> bool:
        try:
            dynamodb.update_item(
                TableName="t",
                Key={"id": {"S": "a"}},
                UpdateExpression="SET checked = :c",
                ConditionExpression=text,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues={**values, ":c": {"BOOL": True}},
            )
        except ClientError as error:
            assert error.response["Error"]["Code"] == "ConditionalCheckFailedException"
            return False
        return True

    names = {"#f": "state", "#n": "n", "#t": "tag"}
    values = {
        ":v": {"S": "RUNNING"},
        ":lo": {"N": "1"},
        ":hi": {"N": "9"},
        ":p": {"S": "zz"},
        ":one": {"N": "1"},
        ":three": {"N": "3"},
    }
    assert holds(names, values)  # the first half
    assert not holds(names, {**values, ":v": {"S": "PENDING"}})  # neither half
    assert holds(
        names, {**values, ":v": {"S": "PENDING"}, ":p": {"S": "a"}, ":one": {"N": "2"}}
    )  # the second
    assert not holds({**names, "#f": "tag"}, values)  # other names: tag is not RUNNING, and size 2
    # A text that does not parse: moto raises, and the call gets the server's 500, every time.
    once = moto_client("dynamodb", url, Config(retries={"total_max_attempts": 1}))
    for _ in range(2):
        with pytest.raises(ClientError) as error:
            once.update_item(
                TableName="t",
                Key={"id": {"S": "a"}},
                UpdateExpression="SET checked = :c",
                ConditionExpression="#f = = :v",
                ExpressionAttributeNames={"#f": "state"},
                ExpressionAttributeValues={":v": {"S": "x"}, ":c": {"BOOL": True}},
            )
        assert error.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
