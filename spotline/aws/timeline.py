"""The Timeline table: every transition of a job, in order (`GET /jobs/{id}/events`).

Items are written only inside the job's own transition transaction (see `JobRepository`), so
the timeline and the job item never disagree. The sort key `seq` is the job's version after
the write, which makes a duplicate append impossible (attribute_not_exists).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from spotline.aws.dynamo import DynamoTable, Expression, TransactItem, serialize_item
from spotline.control.records import TimelineEntry

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def encode_token(key: dict[str, Any] | None) -> str | None:
    """An opaque pagination token from a LastEvaluatedKey."""
    if key is None:
        return None
    return base64.urlsafe_b64encode(json.dumps(key, sort_keys=True).encode()).decode()


def decode_token(token: str | None) -> dict[str, Any] | None:
    if not token:
        return None
    try:
        key = json.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, json.JSONDecodeError) as error:
        raise ValueError("next_token: not a token this API issued") from error
    if not isinstance(key, dict):
        raise ValueError("next_token: not a token this API issued")
    return key


class TimelineRepository:
    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self.table = DynamoTable(client, table_name)

    def append_item(self, entry: TimelineEntry) -> TransactItem:
        """The Put of `entry`, for the transition's transaction."""
        return {
            "Put": {
                "TableName": self.table.name,
                "Item": serialize_item(
                    {
                        "job_id": entry.job_id,
                        "seq": entry.seq,
                        "at": entry.at,
                        "from": entry.source,
                        "to": entry.target,
                        "reason": entry.reason,
                        **({"kind": entry.kind} if entry.kind else {}),
                    }
                ),
                "ConditionExpression": "attribute_not_exists(seq)",
            }
        }

    def list(
        self, job_id: str, *, limit: int = 100, next_token: str | None = None
    ) -> tuple[Sequence[TimelineEntry], str | None]:
        """One page of a job's timeline, oldest first, and the token of the next page."""
        expr = Expression()
        request = expr.attach(
            {
                "KeyConditionExpression": f"{expr.name('job_id')} = {expr.value(job_id)}",
                "Limit": limit,
                "ConsistentRead": True,
            }
        )
        start = decode_token(next_token)
        if start is not None:
            request["ExclusiveStartKey"] = start
        items, last = self.table.query(request)
        entries = [
            TimelineEntry(
                job_id=item["job_id"],
                seq=int(item["seq"]),
                at=float(item["at"]),
                source=item["from"],
                target=item["to"],
                reason=item.get("reason", ""),
                kind=item.get("kind", ""),
            )
            for item in items
        ]
        return entries, encode_token(last)
