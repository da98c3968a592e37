"""The Ledger table: GPUs in use per pool ("POOL#<name>") and per team ("TEAM#<team>").

The scheduling pass decides with its own working ledger (domain `Ledger`); this table is what
makes the decision safe when two passes race, or a pass races a release: every admission
reserves in the same transaction that moves the job to ADMITTED, under the condition
`used + gpus <= capacity`, so the pool can never be over-committed whatever runs concurrently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from spotline.aws.dynamo import (
    DynamoTable,
    Expression,
    TransactItem,
    deserialize_item,
    serialize,
    serialize_item,
)
from spotline.aws.errors import CapacityExhausted, storage_errors

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


def pool_key(pool: str) -> str:
    return f"POOL#{pool}"


def team_key(team: str) -> str:
    return f"TEAM#{team}"


class LedgerRepository:
    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self.table = DynamoTable(client, table_name)

    def reserve_items(
        self, *, pool: str, capacity_gpus: int, team: str, team_limit_gpus: int | None, gpus: int
    ) -> tuple[list[TransactItem], list[tuple[str, str]]]:
        """Updates that take `gpus` in `pool` and for `team`, each conditional on staying
        within its limit; with their roles for error mapping."""
        if gpus > capacity_gpus:
            raise CapacityExhausted(f"pool {pool} has {capacity_gpus} GPUs; {gpus} requested")
        items = [self._take(pool_key(pool), gpus, capacity_gpus - gpus)]
        roles = [("pool", pool)]
        limit = None if team_limit_gpus is None else team_limit_gpus - gpus
        if limit is not None and limit < 0:
            raise CapacityExhausted(f"team {team} may hold at most {team_limit_gpus} GPUs")
        items.append(self._take(team_key(team), gpus, limit))
        roles.append(("team", team))
        return items, roles

    def release_items(
        self, *, pool: str, team: str, gpus: int
    ) -> tuple[list[TransactItem], list[tuple[str, str]]]:
        """Updates that give back `gpus`.

        A release is not conditional on the counters: a job leaving must never be blocked by a
        drifted counter (admission is where the limit is enforced, and the reconciler reports
        drift between this table and the active index).
        """
        return (
            [self._give(pool_key(pool), gpus), self._give(team_key(team), gpus)],
            [("other", f"ledger {pool}"), ("other", f"ledger {team}")],
        )

    def _take(self, key: str, gpus: int, limit: int | None) -> TransactItem:
        expr = Expression()
        used = expr.name("used_gpus")
        update: dict[str, Any] = {
            "TableName": self.table.name,
            "Key": serialize_item({"pk": key}),
            "UpdateExpression": f"SET {used} = if_not_exists({used}, {expr.value(0)}) + {expr.value(gpus)}",
        }
        if limit is not None:
            update["ConditionExpression"] = f"attribute_not_exists({used}) OR {used} <= {expr.value(limit)}"
        return {"Update": expr.attach(update)}

    def _give(self, key: str, gpus: int) -> TransactItem:
        expr = Expression()
        used = expr.name("used_gpus")
        update = {
            "TableName": self.table.name,
            "Key": serialize_item({"pk": key}),
            "UpdateExpression": f"SET {used} = if_not_exists({used}, {expr.value(0)}) - {expr.value(gpus)}",
        }
        return {"Update": expr.attach(update)}

    def usage(self, pools: Iterable[str], teams: Iterable[str]) -> tuple[dict[str, int], dict[str, int]]:
        """GPUs in use per pool and per team, as the ledger counts them (one BatchGetItem per
        100 keys: the number of pools and teams, not of jobs)."""
        keys = [pool_key(p) for p in pools] + [team_key(t) for t in teams]
        found: dict[str, int] = {}
        for start in range(0, len(keys), 100):
            pending: Any = {
                self.table.name: {"Keys": [serialize_item({"pk": k}) for k in keys[start : start + 100]]}
            }
            while pending:
                with storage_errors():
                    response = self.table.client.batch_get_item(RequestItems=pending)
                for raw in response.get("Responses", {}).get(self.table.name, []):
                    item = deserialize_item(raw)
                    found[str(item["pk"])] = int(item.get("used_gpus", 0))
                pending = response.get("UnprocessedKeys") or None
        pool_usage = {k.removeprefix("POOL#"): v for k, v in found.items() if k.startswith("POOL#")}
        team_usage = {k.removeprefix("TEAM#"): v for k, v in found.items() if k.startswith("TEAM#")}
        return pool_usage, team_usage

    def set_usage(self, pool_usage: Mapping[str, int], team_usage: Mapping[str, int]) -> None:
        """Overwrite the counters (tests and the local runtime's bootstrap)."""
        for key, used in [
            *((pool_key(p), u) for p, u in pool_usage.items()),
            *((team_key(t), u) for t, u in team_usage.items()),
        ]:
            self.table.put({"Item": {"pk": serialize(key), "used_gpus": serialize(used)}})
