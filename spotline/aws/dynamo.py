"""Plain-Python <-> DynamoDB attribute values, and a thin table handle over the low-level client.

Numbers travel as `Decimal` in DynamoDB; the rest of Spotline uses int and float, so the
conversion happens here and nowhere else. The low-level client is used (not the resource
API) because TransactWriteItems, which every transition needs, exists only there.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from spotline.aws.errors import storage_errors, transaction_errors

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

Item = dict[str, Any]
# One entry of TransactWriteItems, in the low-level client's shape ({"Put": {...}} etc.).
TransactItem = dict[str, Any]

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def _to_dynamo(value: Any) -> Any:
    if isinstance(value, bool):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot store a non-finite number: {value}")
        return Decimal(repr(value))
    if isinstance(value, Mapping):
        return {k: _to_dynamo(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_to_dynamo(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return {_to_dynamo(v) for v in value}
    return value


def _from_dynamo(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() and "." not in str(value) else float(value)
    if isinstance(value, dict):
        return {k: _from_dynamo(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_dynamo(v) for v in value]
    if isinstance(value, set):
        return {_from_dynamo(v) for v in value}
    return value


def serialize(value: Any) -> dict[str, Any]:
    """One attribute value in DynamoDB JSON ({"S": ...}, {"N": ...}, ...)."""
    return cast("dict[str, Any]", _serializer.serialize(_to_dynamo(value)))


def serialize_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """A whole item; attributes whose value is None are left out (absent, not NULL), which is
    what keeps the sparse indexes sparse."""
    return {k: serialize(v) for k, v in item.items() if v is not None}


def deserialize_item(raw: Mapping[str, Any]) -> Item:
    return {k: _from_dynamo(_deserializer.deserialize(v)) for k, v in raw.items()}


class Expression:
    """Builds an expression's placeholder names and values without collisions."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self.values: dict[str, Any] = {}

    def name(self, attribute: str) -> str:
        key = f"#n{len(self.names)}"
        for existing, attr in self.names.items():
            if attr == attribute:
                return existing
        self.names[key] = attribute
        return key

    def value(self, value: Any) -> str:
        key = f":v{len(self.values)}"
        self.values[key] = serialize(value)
        return key

    def attach(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.names:
            request["ExpressionAttributeNames"] = dict(self.names)
        if self.values:
            request["ExpressionAttributeValues"] = dict(self.values)
        return request


class DynamoTable:
    """One table: the calls the repositories make, with errors mapped (spotline.aws.errors)."""

    def __init__(self, client: DynamoDBClient, name: str) -> None:
        self.client = client
        self.name = name

    def get(
        self, key: Mapping[str, Any], *, consistent: bool = True, job_id: str | None = None
    ) -> Item | None:
        with storage_errors(job_id):
            response = self.client.get_item(
                TableName=self.name, Key=serialize_item(key), ConsistentRead=consistent
            )
        raw = response.get("Item")
        return None if raw is None else deserialize_item(raw)

    def update(self, request: dict[str, Any], *, job_id: str | None = None) -> Item:
        """UpdateItem; returns the item after the update (ALL_NEW) unless told otherwise."""
        request = {"TableName": self.name, "ReturnValues": "ALL_NEW", **request}
        with storage_errors(job_id):
            response = self.client.update_item(**request)
        return deserialize_item(response.get("Attributes", {}))

    def put(self, request: dict[str, Any], *, job_id: str | None = None) -> None:
        with storage_errors(job_id):
            self.client.put_item(TableName=self.name, **request)

    def query(self, request: dict[str, Any]) -> tuple[list[Item], dict[str, Any] | None]:
        """One Query page: the items and the LastEvaluatedKey (raw, for the next page)."""
        with storage_errors():
            response = self.client.query(TableName=self.name, **request)
        items = [deserialize_item(raw) for raw in response.get("Items", [])]
        return items, cast("dict[str, Any] | None", response.get("LastEvaluatedKey"))

    def transact(self, items: Sequence[TransactItem], roles: Sequence[tuple[str, str]]) -> None:
        """TransactWriteItems (all or nothing, up to 100 items); `roles` names each item for
        error mapping."""
        with transaction_errors(roles):
            self.client.transact_write_items(TransactItems=cast("Any", list(items)))

    def batch_get(self, keys: Sequence[Mapping[str, Any]]) -> list[Item]:
        """BatchGetItem (consistent) in chunks of 100 keys, asking again for unprocessed keys;
        the items found, in no particular order."""
        found: list[Item] = []
        for start in range(0, len(keys), 100):
            pending: Any = {
                self.name: {
                    "Keys": [serialize_item(k) for k in keys[start : start + 100]],
                    "ConsistentRead": True,
                }
            }
            while pending:
                with storage_errors():
                    response = self.client.batch_get_item(RequestItems=pending)
                found += [deserialize_item(raw) for raw in response.get("Responses", {}).get(self.name, [])]
                pending = response.get("UnprocessedKeys") or None
        return found

    def batch_put(self, items: Sequence[Mapping[str, Any]]) -> None:
        """BatchWriteItem in chunks of 25, resending unprocessed items (bulk loads and tests)."""
        for start in range(0, len(items), 25):
            pending: list[Any] = [
                {"PutRequest": {"Item": serialize_item(item)}} for item in items[start : start + 25]
            ]
            while pending:
                with storage_errors():
                    response = self.client.batch_write_item(RequestItems={self.name: pending})
                pending = list(response.get("UnprocessedItems", {}).get(self.name, []))
