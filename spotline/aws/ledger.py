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
from spotline.control.errors import CapacityExhausted, ConditionFailed
from spotline.control.records import Counter, pool_key, team_key
from spotline.domain.models import TeamQuota
from spotline.domain.quota import lendable_gpus, quota_shortfall
from spotline.domain.usage import run_buckets

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient


USAGE_PREFIX = "usage_"
FAIRSHARE_KEY = "FAIRSHARE"
# On a counter: the (ledger, expected, moves) drift the reconciler saw last time (`repair_drift`).
DRIFT_MARK = "drift_seen"
# On a counter: how many admissions, releases and repairs have changed it.
MOVES = "moves"
# TransactWriteItems takes at most 100 items; an admission also writes the job and its timeline.
MAX_QUOTA_ITEMS = 96


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
        within its limit; with their roles for error mapping.

        A team with a quota may use its nominal GPUs, and borrow beyond them what the planner
        allows (`quota_shortfall`: at most its borrowing limit, and at most what the other teams
        lend, less what others already borrow). Within its nominal quota the team's counter alone
        decides (`used <= nominal - gpus`). To borrow, the team counters are read (strongly
        consistent, one BatchGetItem) and the transaction also checks that no other team's
        counter grew since: what the others lend only shrinks as their usage grows, so a
        concurrent admission elsewhere, or a pass deciding from a stale active index, makes
        this one fail cleanly instead of borrowing past the cohort's idle quota. A release in
        between only gives more room, and passes the checks.

        `team_usage_hint`: the team's usage as the caller counted it (the scheduling pass: its
        snapshot plus its own admissions since). Where that plus `gpus` is within the nominal
        quota, nothing is read: the team's own condition decides as it would after the read, and
        where the hint was low the transaction fails with the team's quota error
        (`admit` then reserves again, reading).
        """
        if gpus > capacity_gpus:
            raise CapacityExhausted(f"pool {pool} has {capacity_gpus} GPUs; {gpus} requested")
        items = [self._take(pool_key(pool), gpus, capacity_gpus - gpus)]
        roles = [("pool", pool)]
        quota = (quotas or {}).get(team)
        if quota is None or quotas is None:
            items.append(self._take(team_key(team), gpus, None))
            roles.append(("team", team))
            return items, roles
        if team_usage_hint is not None and team_usage_hint + gpus <= quota.nominal_gpus:
            items.append(self._take(team_key(team), gpus, quota.nominal_gpus - gpus))
            roles.append(("team", team))
            return items, roles
        counters = self.counters([], quotas)
        usage = {name: counters[team_key(name)].used for name in quotas if team_key(name) in counters}
        if usage.get(team, 0) + gpus <= quota.nominal_gpus:
            # Within its nominal quota: the team's own counter decides, whatever the others do.
            items.append(self._take(team_key(team), gpus, quota.nominal_gpus - gpus))
            roles.append(("team", team))
            return items, roles
        why = quota_shortfall(team, gpus, usage, quotas)
        if why is not None:
            raise CapacityExhausted(why)
        others = [name for name in quotas if name != team]
        if len(items) + 1 + len(others) > MAX_QUOTA_ITEMS:
            raise CapacityExhausted(
                f"team {team} may not borrow: {len(others)} other teams are more than one transaction"
                f" can check ({MAX_QUOTA_ITEMS - 2})"
            )
        borrow = lendable_gpus(team, usage, quotas)
        if quota.borrowing_limit_gpus is not None:
            borrow = min(borrow, quota.borrowing_limit_gpus)
        items.append(self._take(team_key(team), gpus, quota.nominal_gpus + borrow - gpus))
        roles.append(("team", team))
        for other in others:
            items.append(self._not_above(team_key(other), usage.get(other, 0)))
            roles.append(("lender", other))
        return items, roles

    def reserve_together_items(
        self,
        *,
        pools: Mapping[str, tuple[int, int, int]],
        teams: Mapping[str, tuple[int, int | None, int]],
    ) -> tuple[list[TransactItem], list[tuple[str, str]]]:
        """The reservations of several admissions in one transaction (`reserve_items` for each,
        summed per counter): `pools` maps a pool to (GPUs, capacity, admissions), and its counter
        takes the GPUs under `used + GPUs <= capacity`; `teams` maps a team to (GPUs, limit,
        admissions), and its counter takes them under `used + GPUs <= limit` (None: no limit).
        A counter counts each admission among its moves, as one at a time would. Borrowing
        beyond a nominal quota is not reserved this way: that admission reserves alone, reading
        the counters (`reserve_items`)."""
        items: list[TransactItem] = []
        roles: list[tuple[str, str]] = []
        for pool, (gpus, capacity, admissions) in sorted(pools.items()):
            if gpus > capacity:
                raise CapacityExhausted(f"pool {pool} has {capacity} GPUs; {gpus} requested")
            items.append(self._take(pool_key(pool), gpus, capacity - gpus, moves=admissions))
            roles.append(("pool", pool))
        for team, (gpus, limit, admissions) in sorted(teams.items()):
            items.append(
                self._take(team_key(team), gpus, None if limit is None else limit - gpus, moves=admissions)
            )
            roles.append(("team", team))
        return items, roles

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

    def release_items(
        self, *, pool: str, team: str, gpus: int, held_since: float | None = None, now: float | None = None
    ) -> tuple[list[TransactItem], list[tuple[str, str]]]:
        """Updates that give back `gpus`, and add the run (held from `held_since` to `now`) to
        the team's usage buckets.

        A release is not conditional on the counters: a job leaving must never be blocked by a
        drifted counter (admission is where the limit is enforced, and the reconciler reports and
        repairs drift between this table and the active index).
        """
        usage: dict[int, float] = {}
        if held_since is not None and now is not None:
            usage = run_buckets(gpus, held_since, now, self.usage_half_life_s)
        return (
            [self._give(pool_key(pool), gpus), self._give(team_key(team), gpus, usage)],
            [("other", f"ledger {pool}"), ("other", f"ledger {team}")],
        )

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
