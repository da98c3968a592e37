"""The Ledger table: GPUs in use per pool ("POOL#<name>") and per team ("TEAM#<team>").

A team's item also keeps its past GPU usage for fair-share, in buckets (attributes
`usage_<bucket start>`, `spotline.domain.usage`): the release of a job's GPUs adds its run to them in the
same transaction, so a run is counted exactly once.

The scheduling pass decides with its own working ledger (domain `Ledger`); this table is what
makes the decision safe when two passes race, or a pass races a release: every admission
reserves in the same transaction that moves the job to ADMITTED, under the condition
`used + gpus <= capacity`, so the pool can never be over-committed whatever runs concurrently.

Every admission and release also counts itself on the counter (`moves`), so the reconciler can
tell a counter that has not changed since it last looked from one that merely reads the same
value again (an admission and a release in between).
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
from spotline.aws.errors import storage_errors
from spotline.control import reservations
from spotline.control.errors import ConditionFailed
from spotline.control.records import Counter, pool_key, team_key
from spotline.domain.models import TeamQuota

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


USAGE_PREFIX = "usage_"
FAIRSHARE_KEY = "FAIRSHARE"
# On a counter: the (ledger, expected, moves) drift the reconciler saw last time (`repair_drift`).
DRIFT_MARK = "drift_seen"
# On a counter: how many admissions, releases and repairs have changed it.
MOVES = "moves"


class LedgerRepository:
    def __init__(self, client: DynamoDBClient, table_name: str, *, usage_half_life_s: float) -> None:
        self.table = DynamoTable(client, table_name)
        self.usage_half_life_s = usage_half_life_s

    def reserve_items(
        self,
        *,
        pool: str,
        capacity_gpus: int,
        team: str,
        gpus: int,
        quotas: Mapping[str, TeamQuota] | None = None,
        team_usage_hint: int | None = None,
    ) -> tuple[list[TransactItem], list[tuple[str, str]]]:
        """Updates that take `gpus` in `pool` and for `team`, each conditional on staying
        within its limit (`spotline.control.reservations.reserve`); with their roles for error
        mapping. To borrow, the team counters are read in one strongly consistent BatchGetItem."""
        steps, roles = reservations.reserve(
            pool=pool,
            capacity_gpus=capacity_gpus,
            team=team,
            gpus=gpus,
            quotas=quotas,
            team_usage_hint=team_usage_hint,
            counters=lambda teams: self.counters([], teams),
        )
        return [self._item(step) for step in steps], roles

    def reserve_together_items(
        self,
        *,
        pools: Mapping[str, tuple[int, int, int]],
        teams: Mapping[str, tuple[int, int | None, int]],
    ) -> tuple[list[TransactItem], list[tuple[str, str]]]:
        """The reservations of several admissions in one transaction
        (`spotline.control.reservations.reserve_together`)."""
        steps, roles = reservations.reserve_together(pools=pools, teams=teams)
        return [self._item(step) for step in steps], roles

    def release_items(
        self, *, pool: str, team: str, gpus: int, held_since: float | None = None, now: float | None = None
    ) -> tuple[list[TransactItem], list[tuple[str, str]]]:
        """Updates that give back `gpus`, and add the run (held from `held_since` to `now`) to
        the team's usage buckets (`spotline.control.reservations.release`: unconditional)."""
        steps, roles = reservations.release(
            pool=pool,
            team=team,
            gpus=gpus,
            held_since=held_since,
            now=now,
            usage_half_life_s=self.usage_half_life_s,
        )
        return [self._item(step) for step in steps], roles

    def _item(self, step: reservations.Take | reservations.NotAbove | reservations.Give) -> TransactItem:
        if isinstance(step, reservations.Take):
            return self._take(step.key, step.gpus, step.limit, moves=step.moves)
        if isinstance(step, reservations.NotAbove):
            return self._not_above(step.key, step.used)
        return self._give(step.key, step.gpus, dict(step.usage))

    def _not_above(self, key: str, used: int) -> TransactItem:
        """A check that the counter `key` holds at most `used` GPUs (a missing one holds 0)."""
        expr = Expression()
        name = expr.name("used_gpus")
        check = {
            "TableName": self.table.name,
            "Key": serialize_item({"pk": key}),
            "ConditionExpression": f"attribute_not_exists({name}) OR {name} <= {expr.value(used)}",
        }
        return {"ConditionCheck": expr.attach(check)}

    def _take(self, key: str, gpus: int, limit: int | None, *, moves: int = 1) -> TransactItem:
        """Add `gpus` to the counter `key` under `used <= limit` before it (None: no limit), and
        `moves` admissions to its moves."""
        expr = Expression()
        used, moved, zero = expr.name("used_gpus"), expr.name(MOVES), expr.value(0)
        update: dict[str, Any] = {
            "TableName": self.table.name,
            "Key": serialize_item({"pk": key}),
            "UpdateExpression": f"SET {used} = if_not_exists({used}, {zero}) + {expr.value(gpus)}, "
            f"{moved} = if_not_exists({moved}, {zero}) + {expr.value(moves)}",
        }
        if limit is not None:
            update["ConditionExpression"] = f"attribute_not_exists({used}) OR {used} <= {expr.value(limit)}"
        return {"Update": expr.attach(update)}

    def _give(self, key: str, gpus: int, usage: dict[int, float] | None = None) -> TransactItem:
        expr = Expression()
        used, moves, zero = expr.name("used_gpus"), expr.name(MOVES), expr.value(0)
        sets = [
            f"{used} = if_not_exists({used}, {zero}) - {expr.value(gpus)}",
            f"{moves} = if_not_exists({moves}, {zero}) + {expr.value(1)}",
        ]
        for begins, gpu_s in sorted((usage or {}).items()):
            bucket = expr.name(f"{USAGE_PREFIX}{begins}")
            sets.append(f"{bucket} = if_not_exists({bucket}, {zero}) + {expr.value(gpu_s)}")
        update = {
            "TableName": self.table.name,
            "Key": serialize_item({"pk": key}),
            "UpdateExpression": "SET " + ", ".join(sets),
        }
        return {"Update": expr.attach(update)}

    def usage_buckets(
        self, teams: Iterable[str], *, shown: dict[str, float] | None = None
    ) -> dict[str, dict[int, float]]:
        """Each team's usage buckets (bucket start -> scaled GPU-seconds; `spotline.domain.usage`), empty
        for a team that never released GPUs. `shown`, when given, gets the fair-share usage the
        latest pass kept (`fairshare_usage`), read in the same BatchGetItem."""
        teams = list(teams)
        buckets: dict[str, dict[int, float]] = {team: {} for team in teams}
        keys = [team_key(t) for t in teams]
        found = self._items([*keys, FAIRSHARE_KEY] if shown is not None else keys)
        kept = found.pop(FAIRSHARE_KEY, None)
        if shown is not None and kept is not None:
            usage = kept.get("usage_gpu_hours") or {}
            shown.update({str(team): float(value) for team, value in usage.items()})
        for key, item in found.items():
            buckets[key.removeprefix("TEAM#")] = {
                int(name.removeprefix(USAGE_PREFIX)): float(value)
                for name, value in item.items()
                if name.startswith(USAGE_PREFIX) and name.removeprefix(USAGE_PREFIX).isdigit()
            }
        return buckets

    def usage(self, pools: Iterable[str], teams: Iterable[str]) -> tuple[dict[str, int], dict[str, int]]:
        """GPUs in use per pool and per team, as the ledger counts them (one BatchGetItem per
        100 keys: the number of pools and teams, not of jobs)."""
        counters = self.counters(pools, teams)
        found = {key: counter.used for key, counter in counters.items()}
        pool_usage = {k.removeprefix("POOL#"): v for k, v in found.items() if k.startswith("POOL#")}
        team_usage = {k.removeprefix("TEAM#"): v for k, v in found.items() if k.startswith("TEAM#")}
        return pool_usage, team_usage

    def counters(self, pools: Iterable[str], teams: Iterable[str]) -> dict[str, Counter]:
        """Each counter item ("POOL#x", "TEAM#y") that exists. Strongly consistent reads."""
        items = self._items([*(pool_key(p) for p in pools), *(team_key(t) for t in teams)], consistent=True)
        counters: dict[str, Counter] = {}
        for key, item in items.items():
            seen = item.get(DRIFT_MARK)
            mark = (
                (int(seen[0]), int(seen[1]), int(seen[2]))
                if isinstance(seen, list) and len(seen) == 3
                else None
            )
            counters[key] = Counter(int(item.get("used_gpus", 0)), int(item.get(MOVES, 0)), mark)
        return counters

    def mark_drift(self, key: str, ledger: int, expected: int, moves: int) -> bool:
        """Note on a counter that it read `ledger` after `moves` changes where the jobs say
        `expected`, if no change came since. False when one did."""
        expr = Expression()
        update = {
            "TableName": self.table.name,
            "Key": serialize_item({"pk": key}),
            "UpdateExpression": f"SET {expr.name(DRIFT_MARK)} = {expr.value([ledger, expected, moves])}",
            "ConditionExpression": _reads(expr.name(MOVES), moves, expr),
        }
        return self._conditional_update(update, expr)

    def repair_drift(self, key: str, ledger: int, expected: int, moves: int) -> bool:
        """Set a counter to `expected` if an earlier reconciler run marked the same drift after
        the same number of changes, and none came since; False otherwise."""
        expr = Expression()
        used, mark, moved = expr.name("used_gpus"), expr.name(DRIFT_MARK), expr.name(MOVES)
        marked = expr.value([ledger, expected, moves])
        update = {
            "TableName": self.table.name,
            "Key": serialize_item({"pk": key}),
            "UpdateExpression": f"SET {used} = {expr.value(expected)}, "
            f"{moved} = if_not_exists({moved}, {expr.value(0)}) + {expr.value(1)} REMOVE {mark}",
            "ConditionExpression": f"({_reads(moved, moves, expr)}) AND {mark} = {marked}",
        }
        return self._conditional_update(update, expr)

    def clear_drift_mark(self, key: str) -> None:
        expr = Expression()
        update = {
            "TableName": self.table.name,
            "Key": serialize_item({"pk": key}),
            "UpdateExpression": f"REMOVE {expr.name(DRIFT_MARK)}",
            "ConditionExpression": f"attribute_exists({expr.name('pk')})",
        }
        self._conditional_update(update, expr)

    def _conditional_update(self, update: dict[str, Any], expr: Expression) -> bool:
        try:
            with storage_errors():
                self.table.client.update_item(**expr.attach(update))
        except ConditionFailed:
            return False
        return True

    def put_fairshare_usage(self, usage_gpu_hours: Mapping[str, float], now: float) -> None:
        """Keep the team usage that a scheduling pass used (the API reads it to show
        effective priorities); a pass that started earlier never overwrites a later one."""
        expr = Expression()
        at = expr.name("at")
        update: dict[str, Any] = {
            "TableName": self.table.name,
            "Key": serialize_item({"pk": FAIRSHARE_KEY}),
            "UpdateExpression": f"SET {at} = {expr.value(now)}, {expr.name('usage_gpu_hours')} = "
            f"{expr.value(dict(usage_gpu_hours))}",
            "ConditionExpression": f"attribute_not_exists({at}) OR {at} <= {expr.value(now)}",
        }
        try:
            with storage_errors():
                self.table.client.update_item(**expr.attach(update))
        except ConditionFailed:
            pass  # a later pass already wrote its usage

    def fairshare_usage(self) -> dict[str, float]:
        """The team usage (GPU-hours) of a recent scheduling pass: the latest one that found it
        moved past a tolerance (`spotline.control.scheduling.usage_moved`: 1%); empty before the
        first."""
        with storage_errors():
            response = self.table.client.get_item(
                TableName=self.table.name, Key=serialize_item({"pk": FAIRSHARE_KEY})
            )
        raw = response.get("Item")
        if raw is None:
            return {}
        usage = deserialize_item(raw).get("usage_gpu_hours") or {}
        return {str(team): float(value) for team, value in usage.items()}

    def _items(self, keys: Iterable[str], *, consistent: bool = False) -> dict[str, dict[str, Any]]:
        """The items with these keys (one BatchGetItem per 100 keys), by key."""
        keys = list(dict.fromkeys(keys))
        found: dict[str, dict[str, Any]] = {}
        for start in range(0, len(keys), 100):
            pending: Any = {
                self.table.name: {
                    "Keys": [serialize_item({"pk": k}) for k in keys[start : start + 100]],
                    "ConsistentRead": consistent,
                }
            }
            while pending:
                with storage_errors():
                    response = self.table.client.batch_get_item(RequestItems=pending)
                for raw in response.get("Responses", {}).get(self.table.name, []):
                    item = deserialize_item(raw)
                    found[str(item["pk"])] = item
                pending = response.get("UnprocessedKeys") or None
        return found

    def set_usage(self, pool_usage: Mapping[str, int], team_usage: Mapping[str, int]) -> None:
        """Overwrite the counters (tests and the local runtime's bootstrap)."""
        for key, used in [
            *((pool_key(p), u) for p, u in pool_usage.items()),
            *((team_key(t), u) for t, u in team_usage.items()),
        ]:
            self.table.put({"Item": {"pk": serialize(key), "used_gpus": serialize(used)}})


def _reads(name: str, value: int, expr: Expression) -> str:
    """A condition that the number `name` reads `value` (a missing one reads 0)."""
    condition = f"{name} = {expr.value(value)}"
    return f"attribute_not_exists({name}) OR {condition}" if value == 0 else condition
