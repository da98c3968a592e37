"""The Instances table: EC2 instance id -> the jobs running on it.

A Spot interruption warning or a rebalance recommendation names an instance, not a job; this
table answers "which jobs?" with one GetItem instead of a search through the jobs. Entries
expire by TTL, so an instance that vanished without an event does not linger.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import TYPE_CHECKING

from spotline.aws.dynamo import DynamoTable, Expression, serialize_item
from spotline.control.errors import ConditionFailed

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

ENTRY_TTL_S = 7 * 24 * 3600


class InstanceRepository:
    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self.table = DynamoTable(client, table_name)

    def add_job(self, instance_ids: Iterable[str], job_id: str, now: float) -> None:
        """Record that `job_id` runs on each of `instance_ids` (idempotent: a string set)."""
        for instance_id in sorted(set(instance_ids)):
            expr = Expression()
            self.table.update(
                expr.attach(
                    {
                        "Key": serialize_item({"instance_id": instance_id}),
                        "UpdateExpression": (
                            f"ADD {expr.name('job_ids')} {expr.value({job_id})} "
                            f"SET {expr.name('expires_at')} = {expr.value(int(now) + ENTRY_TTL_S)}"
                        ),
                        "ReturnValues": "NONE",
                    }
                )
            )

    def remove_job(self, instance_ids: Iterable[str], job_id: str) -> None:
        for instance_id in sorted(set(instance_ids)):
            expr = Expression()
            request = expr.attach(
                {
                    "Key": serialize_item({"instance_id": instance_id}),
                    "UpdateExpression": f"DELETE {expr.name('job_ids')} {expr.value({job_id})}",
                    # Do not create an empty entry for an instance that was never recorded.
                    "ConditionExpression": f"attribute_exists({expr.name('instance_id')})",
                    "ReturnValues": "NONE",
                }
            )
            with contextlib.suppress(ConditionFailed):
                self.table.update(request)

    def jobs_on(self, instance_id: str) -> list[str]:
        item = self.table.get({"instance_id": instance_id})
        if item is None:
            return []
        return sorted(str(j) for j in item.get("job_ids", set()))
