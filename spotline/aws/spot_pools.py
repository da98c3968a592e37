"""What the control plane has seen of each Spot pool, on the Ledger table.

Item "SPOTPOOL#<pool>" holds the pool's `spotline.domain.spot_watch.PoolWatch`: its first
observation (`since`), its last observed state (`available`, `changed_at`) and its completed
outages over the last 14 days (`outages`, `[start, end]` pairs, at most `MAX_OUTAGES`), the time
of its latest rebalance recommendation (`at_risk_at`, one number), with a `version` that each
write checks and bumps. An observation reads the item and writes it back
only when it changes the state (a repeated or late one writes nothing), under the condition that
no other writer got there first (then it reads again). A pass reads the pools it plans with in
one BatchGetItem. No scans.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from spotline.aws.dynamo import DynamoTable, Expression, Item, serialize_item
from spotline.control.errors import ConditionFailed
from spotline.domain.models import SpotPoolSignal
from spotline.domain.spot_watch import PoolWatch

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

ATTEMPTS = 5  # conditional writes lost to other writers before giving up (logged by the caller)


def pool_key(pool: str) -> str:
    return f"SPOTPOOL#{pool}"


def _watch(item: Item) -> PoolWatch:
    return PoolWatch(
        since=float(item["since"]),
        available=bool(item["available"]),
        changed_at=float(item["changed_at"]),
        outages=tuple((float(o[0]), float(o[1])) for o in item.get("outages", [])),
        at_risk_at=None if item.get("at_risk_at") is None else float(item["at_risk_at"]),
    )


class SpotPoolHistory:
    """The `SpotPoolStore` port on DynamoDB."""

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self.table = DynamoTable(client, table_name)

    def watch(self, pool: str) -> tuple[PoolWatch, int] | None:
        item = self.table.get({"pk": pool_key(pool)})
        return None if item is None else (_watch(item), int(item.get("version", 0)))

    def observe(self, pool: str, available: bool, at: float) -> bool:
        return self._apply(
            pool,
            lambda watch: PoolWatch.first(available, at) if watch is None else watch.observe(available, at),
        )

    def observe_risk(self, pool: str, at: float) -> bool:
        # a recommendation for a running instance: capacity was there when it came
        return self._apply(
            pool,
            lambda watch: (PoolWatch.first(True, at) if watch is None else watch).observe_risk(at),
        )

    def _apply(self, pool: str, change: Callable[[PoolWatch | None], PoolWatch | None]) -> bool:
        """Read the pool's item, apply `change` (None: nothing to write), write it back under the
        condition that no other writer got there first (else read again)."""
        for _ in range(ATTEMPTS):
            found = self.watch(pool)
            before, version = (None, 0) if found is None else found
            after = change(before)
            if after is None:
                return False
            try:
                self._write(pool, after, version)
            except ConditionFailed:
                continue  # another writer got there first: read again
            return True
        raise ConditionFailed(f"Spot pool {pool}: {ATTEMPTS} writers raced this observation")

    def _write(self, pool: str, watch: PoolWatch, version: int) -> None:
        expr = Expression()
        item: dict[str, Any] = {
            "pk": pool_key(pool),
            "since": watch.since,
            "available": watch.available,
            "changed_at": watch.changed_at,
            "outages": [[start, end] for start, end in watch.outages],
            "at_risk_at": watch.at_risk_at,
            "version": version + 1,
        }
        condition = (
            f"attribute_not_exists({expr.name('pk')})"
            if version == 0
            else f"{expr.name('version')} = {expr.value(version)}"
        )
        self.table.put(expr.attach({"Item": serialize_item(item), "ConditionExpression": condition}))

    def signals(self, pools: Sequence[str], now: float) -> dict[str, SpotPoolSignal]:
        if not pools:
            return {}
        items = self.table.batch_get([{"pk": pool_key(p)} for p in dict.fromkeys(pools)])
        return {str(item["pk"]).removeprefix("SPOTPOOL#"): _watch(item).signal(now) for item in items}
