"""The control plane in memory: every port of `spotline.control.ports` without AWS, for tests
(Spotline's fast tier, and a user's own tests of code that drives the services).

`memory_control_plane()` wires them into a `ControlPlane`. The stores keep DynamoDB's semantics,
and one contract suite checks each store against its DynamoDB adapter on moto
(`tests/integration/test_store_contract.py`):

- every write of a job is conditional: a transition on the state and version the caller read
  (`StaleJobError` otherwise), a new job on its id being free (`JobAlreadyExists`), a reservation
  on its ledger counter's limit (`CapacityExhausted`);
- a transaction is all or nothing, its conditions checked against the items as they were before
  it, and a refused one names the first refusing item (`spotline.control.errors.refused`); one
  transaction may not write an item twice;
- a job is stored as the item `spotline.control.items` lays out, and a write changes only the
  attributes it changed, so a concurrent heartbeat's fields survive a transition;
- the index reads return what the DynamoDB indexes would, in their order and with their limits.

What differs: reads are always consistent (DynamoDB's indexes are eventually consistent), nothing
is throttled, and a page that ends exactly at the last item has no next token (as moto answers).
The workflow starter, task tokens, pass trigger, event sink, Batch launcher and log reader record
what they are asked (`RecordingLauncher` answers like Batch about the runs it was given).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from spotline import resources
from spotline.control.errors import (
    ConditionFailed,
    ImageNotFound,
    InvalidTransition,
    JobAlreadyExists,
    JobNotFound,
    StaleJobError,
    refused,
)
from spotline.control.items import (
    ARRAY_KIND,
    DEADLINE_PK,
    FINISHED_PK_PREFIX,
    HELD_QUEUE_PK,
    QUEUE_PK_PREFIX,
    Item,
    active_pk_for,
    array_to_item,
    check_new_item_size,
    item_changes,
    item_to_array,
    item_to_record,
    new_job_record,
    order_key,
    record_to_item,
    signal_changes,
    transitioned,
)
from spotline.control.months import MonthUsage, month_of, month_segments
from spotline.control.page_tokens import SealedPages
from spotline.control.plane import Clock, ControlPlane, new_job_id
from spotline.control.ports import (
    BatchJobRequest,
    CommitListener,
    LogLine,
    LogPage,
    PreparedTransition,
    Quarantined,
    StoreWrite,
)
from spotline.control.publisher import EventPublisher
from spotline.control.records import (
    ACTIVE_STATES,
    ARRAY_CREATING,
    ARRAY_READY,
    ArrayRecord,
    Counter,
    EntryKind,
    JobRecord,
    TimelineEntry,
    entry_time,
    pool_key,
    team_key,
)
from spotline.control.reservations import Give, NotAbove, Take, release, reserve, reserve_together
from spotline.control.settings import Settings, SpotlineConfig
from spotline.domain import Job, JobSpec, JobState, Priority, TeamQuota
from spotline.domain.models import SpotPoolSignal
from spotline.domain.spot_watch import PoolWatch

# --- the tables ---------------------------------------------------------------------------------

JOBS = "jobs"
TIMELINE = "timeline"
LEDGER = "ledger"
INSTANCES = "instances"

# DynamoDB's TransactWriteItems takes at most this many items.
MAX_TRANSACTION_ITEMS = 100

Condition = Callable[[Item | None], bool]
Change = Callable[[Item | None], Item | None]


@dataclass(frozen=True)
class Write:
    """One write of a transaction: on the item `key` of `table`, if `condition` holds on the item
    as it was before the transaction (None: always), `change` makes the item it stores (None
    deletes it; no `change`: a check alone)."""

    table: str
    key: Any
    condition: Condition | None = None
    change: Change | None = None


def write(store_write: StoreWrite) -> Write:
    """The `Write` a memory store put in a `StoreWrite` (the ports' opaque transaction item)."""
    found = store_write.get("memory")
    if not isinstance(found, Write):
        raise TypeError(f"not a write of the memory store: {sorted(store_write)}")
    return found


def as_store_write(w: Write) -> StoreWrite:
    return {"memory": w}


class MemoryTables:
    """Every table's items by key, under one lock: what the memory stores share, as the DynamoDB
    adapters share a deployment's tables. Items go in and out as deep copies."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.items: dict[str, dict[Any, Item]] = {}

    def get(self, table: str, key: Any) -> Item | None:
        with self.lock:
            found = self.items.get(table, {}).get(key)
            return None if found is None else copy.deepcopy(found)

    def scan(self, table: str) -> list[Item]:
        """Every item of `table` (the stores' index reads filter and sort them as the index would)."""
        with self.lock:
            return [copy.deepcopy(item) for item in self.items.get(table, {}).values()]

    def put(self, table: str, key: Any, item: Item) -> None:
        with self.lock:
            self.items.setdefault(table, {})[key] = copy.deepcopy(item)

    def transact(self, writes: Sequence[Write], roles: Sequence[tuple[str, str]]) -> None:
        """All of `writes` or none: each condition is checked on the items as they were before,
        the first that fails refuses the whole (its role names the error, as DynamoDB's
        cancellation reasons do); an item written twice is refused before anything is checked."""
        keys = [(w.table, w.key) for w in writes]
        if len(keys) > MAX_TRANSACTION_ITEMS:
            raise ValueError(f"a transaction takes at most {MAX_TRANSACTION_ITEMS} items, not {len(keys)}")
        if len(set(keys)) != len(keys):
            raise ValueError("a transaction may not write one item twice")
        with self.lock:
            before = [self.items.get(w.table, {}).get(w.key) for w in writes]
            for index, (w, item) in enumerate(zip(writes, before, strict=True)):
                if w.condition is not None and not w.condition(copy.deepcopy(item)):
                    kind, name = roles[index] if index < len(roles) else ("other", str(w.key))
                    raise refused(kind, name)
            for w, item in zip(writes, before, strict=True):
                if w.change is None:
                    continue
                after = w.change(copy.deepcopy(item))
                if after is None:
                    self.items.get(w.table, {}).pop(w.key, None)
                else:
                    self.items.setdefault(w.table, {})[w.key] = after

    def update(self, w: Write) -> None:
        """One conditional write alone (ConditionFailed when its condition fails)."""
        self.transact([w], [("other", str(w.key))])


def _encode(position: Mapping[str, Any] | None) -> str | None:
    if position is None:
        return None
    return base64.urlsafe_b64encode(json.dumps(dict(position), sort_keys=True).encode()).decode()


def _decode(token: str | None) -> dict[str, Any] | None:
    if not token:
        return None
    try:
        position = json.loads(base64.urlsafe_b64decode(token.encode()))
    except ValueError as error:  # bad base64 and bad JSON are both ValueErrors
        raise ValueError("next_token: not a token this API issued") from error
    if not isinstance(position, dict):
        raise ValueError("next_token: not a token this API issued")
    return position


# --- item updates, as DynamoDB's UpdateExpression applies them --------------------------------


def _reads(item: Item | None, name: str, op: str, value: Any) -> bool:
    """One condition of `update_fields` on `item`, as DynamoDB evaluates it: "?" also accepts a
    missing attribute; a missing one is unequal to anything and in no order; "contains" tests a
    set member (or a substring); "attribute_not_exists" ignores `value`."""
    present = item is not None and name in item
    optional = op.endswith("?")
    op = op.rstrip("?")
    if op == "attribute_not_exists":
        return not present
    if not present:
        return optional or op == "<>"
    assert item is not None
    stored = item[name]
    if op == "contains":
        try:
            return value in stored
        except TypeError:
            return False
    comparisons: dict[str, Callable[[Any, Any], bool]] = {
        "=": lambda a, b: bool(a == b),
        "<>": lambda a, b: bool(a != b),
        "<": lambda a, b: bool(a < b),
        "<=": lambda a, b: bool(a <= b),
        ">": lambda a, b: bool(a > b),
        ">=": lambda a, b: bool(a >= b),
    }
    if op not in comparisons:
        raise ValueError(f"unknown condition operator {op!r}")
    if isinstance(stored, bool) != isinstance(value, bool):
        return op == "<>"
    try:
        return comparisons[op](stored, value)
    except TypeError:  # a string against a number: DynamoDB's types never compare
        return op == "<>"


def _applied(
    item: Item,
    *,
    sets: Mapping[str, Any] | None = None,
    removes: Iterable[str] = (),
    adds: Mapping[str, Iterable[str]] | None = None,
    deletes: Mapping[str, Iterable[str]] | None = None,
) -> Item:
    """`item` after SET, REMOVE, ADD (to a string set) and DELETE (from one); a set emptied by a
    DELETE is removed, as DynamoDB stores no empty set. One attribute in two actions is refused."""
    sets, removes, adds, deletes = sets or {}, list(removes), adds or {}, deletes or {}
    touched = [*sets, *removes, *adds, *deletes]
    if len(set(touched)) != len(touched):
        raise ValueError(f"an update names an attribute twice: {sorted(touched)}")
    for name, value in sets.items():
        item[name] = copy.deepcopy(value)
    for name in removes:
        item.pop(name, None)
    for name, values in adds.items():
        item[name] = set(item.get(name) or ()) | set(values)
    for name, values in deletes.items():
        left = set(item.get(name) or ()) - set(values)
        if left:
            item[name] = left
        else:
            item.pop(name, None)
    return item


# --- the timeline ---------------------------------------------------------------------------------


class MemoryTimeline:
    """The `TimelineStore` port: every transition of a job, oldest first."""

    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables

    def append_write(self, entry: TimelineEntry) -> Write:
        """The put of `entry` in a transition's transaction (refused if its seq is taken)."""
        item = {
            "job_id": entry.job_id,
            "seq": entry.seq,
            "at": entry.at,
            "from": entry.source,
            "to": entry.target,
            "reason": entry.reason,
            **({"kind": entry.kind} if entry.kind else {}),
        }
        return Write(TIMELINE, (entry.job_id, entry.seq), lambda found: found is None, lambda _: dict(item))

    def list(
        self, job_id: str, *, limit: int = 100, next_token: str | None = None
    ) -> tuple[Sequence[TimelineEntry], str | None]:
        start = _decode(next_token)
        after = int(start["seq"]) if start is not None else None
        items = sorted(
            (
                i
                for i in self.tables.scan(TIMELINE)
                if i["job_id"] == job_id and (after is None or i["seq"] > after)
            ),
            key=lambda i: int(i["seq"]),
        )
        page = items[:limit]
        entries = [
            TimelineEntry(
                i["job_id"],
                int(i["seq"]),
                float(i["at"]),
                i["from"],
                i["to"],
                i.get("reason", ""),
                i.get("kind", ""),
            )
            for i in page
        ]
        more = len(items) > limit
        return entries, _encode({"job_id": job_id, "seq": page[-1]["seq"]}) if more else None


# --- the ledger -----------------------------------------------------------------------------------

USAGE_PREFIX = "usage_"
FAIRSHARE_KEY = "FAIRSHARE"
DRIFT_MARK = "drift_seen"
MOVES = "moves"


def _used(item: Item | None) -> int:
    return 0 if item is None else int(item.get("used_gpus", 0))


class MemoryLedger:
    """The `LedgerStore` port: GPUs in use per pool and per team, taken under their limits in the
    admission's transaction (`spotline.control.reservations`), and the teams' usage buckets."""

    def __init__(self, tables: MemoryTables, *, usage_half_life_s: float) -> None:
        self.tables = tables
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
    ) -> tuple[list[StoreWrite], list[tuple[str, str]]]:
        steps, roles = reserve(
            pool=pool,
            capacity_gpus=capacity_gpus,
            team=team,
            gpus=gpus,
            quotas=quotas,
            team_usage_hint=team_usage_hint,
            counters=lambda teams: self.counters([], teams),
        )
        return [as_store_write(self._write(step)) for step in steps], roles

    def reserve_together_items(
        self,
        *,
        pools: Mapping[str, tuple[int, int, int]],
        teams: Mapping[str, tuple[int, int | None, int]],
    ) -> tuple[list[StoreWrite], list[tuple[str, str]]]:
        steps, roles = reserve_together(pools=pools, teams=teams)
        return [as_store_write(self._write(step)) for step in steps], roles

    def release_writes(
        self, *, pool: str, team: str, gpus: int, held_since: float | None, now: float | None
    ) -> tuple[list[Write], list[tuple[str, str]]]:
        steps, roles = release(
            pool=pool,
            team=team,
            gpus=gpus,
            held_since=held_since,
            now=now,
            usage_half_life_s=self.usage_half_life_s,
        )
        return [self._write(step) for step in steps], roles

    def _write(self, step: Take | NotAbove | Give) -> Write:
        if isinstance(step, Take):
            take = step

            def fits(item: Item | None) -> bool:
                return (
                    take.limit is None or item is None or "used_gpus" not in item or _used(item) <= take.limit
                )

            def taken(item: Item | None) -> Item:
                item = item or {"pk": take.key}
                item["used_gpus"] = _used(item) + take.gpus
                item[MOVES] = int(item.get(MOVES, 0)) + take.moves
                return item

            return Write(LEDGER, step.key, fits, taken)
        if isinstance(step, NotAbove):
            limit = step.used
            return Write(LEDGER, step.key, lambda item: _used(item) <= limit)
        give = step

        def given(item: Item | None) -> Item:
            item = item or {"pk": give.key}
            item["used_gpus"] = _used(item) - give.gpus
            item[MOVES] = int(item.get(MOVES, 0)) + 1
            for begins, gpu_s in give.usage.items():
                name = f"{USAGE_PREFIX}{begins}"
                item[name] = float(item.get(name, 0)) + gpu_s
            return item

        return Write(LEDGER, step.key, None, given)

    def usage_buckets(
        self, teams: Iterable[str], *, shown: dict[str, float] | None = None
    ) -> dict[str, dict[int, float]]:
        buckets: dict[str, dict[int, float]] = {}
        for team in teams:
            item = self.tables.get(LEDGER, team_key(team)) or {}
            buckets[team] = {
                int(name.removeprefix(USAGE_PREFIX)): float(value)
                for name, value in item.items()
                if name.startswith(USAGE_PREFIX) and name.removeprefix(USAGE_PREFIX).isdigit()
            }
        if shown is not None:
            shown.update(self.fairshare_usage())
        return buckets

    def usage(self, pools: Iterable[str], teams: Iterable[str]) -> tuple[dict[str, int], dict[str, int]]:
        """GPUs in use per pool and per team, as the ledger counts them."""
        counters = self.counters(pools, teams)
        found = {key: counter.used for key, counter in counters.items()}
        return (
            {k.removeprefix("POOL#"): v for k, v in found.items() if k.startswith("POOL#")},
            {k.removeprefix("TEAM#"): v for k, v in found.items() if k.startswith("TEAM#")},
        )

    def counters(self, pools: Iterable[str], teams: Iterable[str]) -> dict[str, Counter]:
        counters: dict[str, Counter] = {}
        for key in dict.fromkeys([*(pool_key(p) for p in pools), *(team_key(t) for t in teams)]):
            item = self.tables.get(LEDGER, key)
            if item is None:
                continue
            seen = item.get(DRIFT_MARK)
            mark = (
                (int(seen[0]), int(seen[1]), int(seen[2]))
                if isinstance(seen, list) and len(seen) == 3
                else None
            )
            counters[key] = Counter(_used(item), int(item.get(MOVES, 0)), mark)
        return counters

    def _conditional(self, key: str, condition: Condition, change: Change) -> bool:
        try:
            self.tables.update(Write(LEDGER, key, condition, change))
        except ConditionFailed:
            return False
        return True

    def mark_drift(self, key: str, ledger: int, expected: int, moves: int) -> bool:
        def marked(item: Item | None) -> Item:
            item = item or {"pk": key}
            item[DRIFT_MARK] = [ledger, expected, moves]
            return item

        return self._conditional(key, lambda item: int((item or {}).get(MOVES, 0)) == moves, marked)

    def repair_drift(self, key: str, ledger: int, expected: int, moves: int) -> bool:
        def still(item: Item | None) -> bool:
            return (
                int((item or {}).get(MOVES, 0)) == moves
                and item is not None
                and item.get(DRIFT_MARK) == [ledger, expected, moves]
            )

        def repaired(item: Item | None) -> Item:
            assert item is not None
            item["used_gpus"] = expected
            item[MOVES] = int(item.get(MOVES, 0)) + 1
            item.pop(DRIFT_MARK, None)
            return item

        return self._conditional(key, still, repaired)

    def clear_drift_mark(self, key: str) -> None:
        def cleared(item: Item | None) -> Item:
            assert item is not None
            item.pop(DRIFT_MARK, None)
            return item

        self._conditional(key, lambda item: item is not None, cleared)

    def put_fairshare_usage(self, usage_gpu_hours: Mapping[str, float], now: float) -> None:
        def later(item: Item | None) -> bool:
            return item is None or "at" not in item or float(item["at"]) <= now

        def kept(item: Item | None) -> Item:
            item = item or {"pk": FAIRSHARE_KEY}
            item.update(at=now, usage_gpu_hours=dict(usage_gpu_hours))
            return item

        self._conditional(FAIRSHARE_KEY, later, kept)  # refused: a later pass already wrote

    def fairshare_usage(self) -> dict[str, float]:
        item = self.tables.get(LEDGER, FAIRSHARE_KEY) or {}
        return {str(team): float(value) for team, value in (item.get("usage_gpu_hours") or {}).items()}

    def set_usage(self, pool_usage: Mapping[str, int], team_usage: Mapping[str, int]) -> None:
        """Overwrite the counters (tests and bootstraps), as a put of the whole item."""
        for key, used in [
            *((pool_key(p), u) for p, u in pool_usage.items()),
            *((team_key(t), u) for t, u in team_usage.items()),
        ]:
            self.tables.put(LEDGER, key, {"pk": key, "used_gpus": used})


# --- costs -----------------------------------------------------------------------------------------

GPU_S = "gpu_s#"
LOST_GPU_S = "lost_gpu_s#"
BUDGET_MARK = "budget_notified"


def cost_key(team: str, month: str) -> str:
    return f"COST#{team}#{month}"


def run_cost_writes(
    *, team: str, pool: str, gpus: int, held_since: float, now: float, lost_gpu_s: float
) -> list[Write]:
    """The adds of a run that held `gpus` in `pool` from `held_since` to `now` (and lost
    `lost_gpu_s` of work) to its team's months, split at month boundaries."""
    segments = month_segments(held_since, now) or [(month_of(now), 0.0)]
    writes = []
    for index, (month, seconds) in enumerate(segments):
        adds: dict[str, float] = {GPU_S + pool: round(gpus * seconds, 3)}
        if index == len(segments) - 1:
            adds["runs"] = 1
            if lost_gpu_s > 0:
                adds[LOST_GPU_S + pool] = round(lost_gpu_s, 3)
        key = cost_key(team, month)

        def added(item: Item | None, key: str = key, adds: dict[str, float] = adds) -> Item:
            item = item or {"pk": key}
            for name, value in adds.items():
                item[name] = item.get(name, 0) + value
            return item

        writes.append(Write(LEDGER, key, None, added))
    return writes


def lost_credit_write(*, team: str, pool: str, at: float, gpu_s: float) -> Write:
    """Give back `gpu_s` of lost work charged to `pool` in the month of `at`."""
    key = cost_key(team, month_of(at))

    def credited(item: Item | None) -> Item:
        item = item or {"pk": key}
        item[LOST_GPU_S + pool] = item.get(LOST_GPU_S + pool, 0) - round(gpu_s, 3)
        return item

    return Write(LEDGER, key, None, credited)


class MemoryCosts:
    """The `CostStore` port: each team's ended runs per month (added with each release)."""

    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables

    def months(
        self, teams: Iterable[str], month: str, active: Sequence[JobRecord], now: float
    ) -> dict[str, MonthUsage]:
        usage = {team: MonthUsage(team, month) for team in dict.fromkeys(teams)}
        for team, found in usage.items():
            item = self.tables.get(LEDGER, cost_key(team, month))
            if item is None:
                continue
            for name, value in item.items():
                if name.startswith(GPU_S):
                    found.gpu_s[name.removeprefix(GPU_S)] = float(value)
                elif name.startswith(LOST_GPU_S):
                    found.lost_gpu_s[name.removeprefix(LOST_GPU_S)] = float(value)
            found.runs = int(item.get("runs", 0))
            mark = item.get(BUDGET_MARK)
            found.notified = str(mark) if mark else None
        for record in active:
            if (
                record.team in usage
                and record.gpus_held > 0
                and record.admitted_at is not None
                and record.job.pool
            ):
                usage[record.team].add_running(record.job.pool, record.gpus_held, record.admitted_at, now)
        return usage

    def mark_notified(self, team: str, month: str, level: str, previous: str | None) -> bool:
        key = cost_key(team, month)

        def unchanged(item: Item | None) -> bool:
            mark = (item or {}).get(BUDGET_MARK)
            return mark is None if previous is None else mark == previous

        def marked(item: Item | None) -> Item:
            item = item or {"pk": key}
            item[BUDGET_MARK] = level
            return item

        try:
            self.tables.update(Write(LEDGER, key, unchanged, marked))
        except ConditionFailed:
            return False
        return True


# --- Spot pools -----------------------------------------------------------------------------------

SPOT_POOL_ATTEMPTS = 5


class MemorySpotPools:
    """The `SpotPoolStore` port: one versioned record per Spot pool, each observation a conditional
    write that changes it only when it changes the pool's state."""

    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables

    def watch(self, pool: str) -> tuple[PoolWatch, int] | None:
        item = self.tables.get(LEDGER, f"SPOTPOOL#{pool}")
        return None if item is None else (item["watch"], int(item["version"]))

    def observe(self, pool: str, available: bool, at: float) -> bool:
        return self._apply(
            pool,
            lambda watch: PoolWatch.first(available, at) if watch is None else watch.observe(available, at),
        )

    def observe_risk(self, pool: str, at: float) -> bool:
        return self._apply(
            pool, lambda watch: (PoolWatch.first(True, at) if watch is None else watch).observe_risk(at)
        )

    def _apply(self, pool: str, change: Callable[[PoolWatch | None], PoolWatch | None]) -> bool:
        key = f"SPOTPOOL#{pool}"
        for _ in range(SPOT_POOL_ATTEMPTS):
            found = self.watch(pool)
            before, version = (None, 0) if found is None else found
            after = change(before)
            if after is None:
                return False

            def same_version(item: Item | None, version: int = version) -> bool:
                return item is None if version == 0 else item is not None and item["version"] == version

            def written(_: Item | None, watch: PoolWatch = after, version: int = version) -> Item:
                return {"pk": key, "watch": watch, "version": version + 1}

            try:
                self.tables.update(Write(LEDGER, key, same_version, written))
            except ConditionFailed:
                continue  # another writer got there first: read again
            return True
        raise ConditionFailed(f"Spot pool {pool}: {SPOT_POOL_ATTEMPTS} writers raced this observation")

    def signals(self, pools: Sequence[str], now: float) -> dict[str, SpotPoolSignal]:
        found = {pool: self.watch(pool) for pool in dict.fromkeys(pools)}
        return {pool: w[0].signal(now) for pool, w in found.items() if w is not None}


# --- instances and page tokens --------------------------------------------------------------------

INSTANCE_TTL_S = 7 * 24 * 3600


class MemoryInstances:
    """The `InstanceStore` port: which jobs run on each EC2 instance."""

    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables

    def add_job(self, instance_ids: Iterable[str], job_id: str, now: float) -> None:
        for instance_id in sorted(set(instance_ids)):

            def added(item: Item | None, instance_id: str = instance_id) -> Item:
                item = item or {"instance_id": instance_id}
                item["job_ids"] = set(item.get("job_ids") or ()) | {job_id}
                item["expires_at"] = int(now) + INSTANCE_TTL_S
                return item

            self.tables.update(Write(INSTANCES, instance_id, None, added))

    def remove_job(self, instance_ids: Iterable[str], job_id: str) -> None:
        for instance_id in sorted(set(instance_ids)):
            with contextlib.suppress(ConditionFailed):  # never recorded: nothing to remove
                self.tables.update(
                    Write(
                        INSTANCES,
                        instance_id,
                        lambda item: item is not None,
                        lambda item: _applied(item or {}, deletes={"job_ids": [job_id]}),
                    )
                )

    def jobs_on(self, instance_id: str) -> list[str]:
        item = self.tables.get(INSTANCES, instance_id)
        return [] if item is None else sorted(str(j) for j in item.get("job_ids", set()))


class MemoryPageTokens(SealedPages):
    """The `PageTokenStore` port: tokens sealed with a key made on first use and kept in the
    tables, so every process (plane) on the same tables agrees on it."""

    KEY = "PAGE_TOKEN_KEY#v1"

    def __init__(self, tables: MemoryTables) -> None:
        self.tables = tables

    def key(self) -> bytes:
        with self.tables.lock:
            item = self.tables.get(LEDGER, self.KEY)
            if item is None:
                item = {"pk": self.KEY, "key": secrets.token_bytes(32)}
                self.tables.put(LEDGER, self.KEY, item)
            return bytes(item["key"])


# --- jobs -----------------------------------------------------------------------------------------


def _job_condition(old: JobRecord) -> Condition:
    return lambda item: (
        item is not None and item.get("state") == old.state.value and item.get("version") == old.version
    )


class MemoryJobs:
    """The `JobStore` port: jobs as `spotline.control.items` lays them out, each state change a
    conditional write with its timeline entries (and ledger and cost items) in one transaction,
    and the index reads of the scheduling pass and the API."""

    def __init__(
        self,
        tables: MemoryTables,
        timeline: MemoryTimeline,
        ledger: MemoryLedger,
        listeners: Iterable[CommitListener] = (),
    ) -> None:
        self.tables = tables
        self.timeline = timeline
        self.ledger = ledger
        self.listeners = list(listeners)
        self.arrays = MemoryArrays(self)

    # --- writes ---------------------------------------------------------------------------

    def new_job_writes(
        self,
        job: Job,
        reason: str,
        *,
        now: float,
        request_digest: str | None,
        staged_for_array: str | None = None,
    ) -> tuple[JobRecord, TimelineEntry, list[Write], list[tuple[str, str]]]:
        """What storing `job`, new and PENDING, writes: its item (refused if its id is taken;
        ItemTooLarge first if it would not fit) and its first timeline entry."""
        record, entry = new_job_record(
            job, reason, now=now, request_digest=request_digest, staged_for_array=staged_for_array
        )
        item = record_to_item(record)
        check_new_item_size(item)
        put = Write(JOBS, job.id, lambda found: found is None, lambda _: copy.deepcopy(item))
        return (
            record,
            entry,
            [put, self.timeline.append_write(entry)],
            [("new-job", job.id), ("timeline", job.id)],
        )

    def create(self, job: Job, *, now: float, reason: str, request_digest: str | None = None) -> JobRecord:
        return self.create_many([job], now=now, reasons=[reason], request_digest=request_digest)[0]

    def create_many(
        self, jobs: Sequence[Job], *, now: float, reasons: Sequence[str], request_digest: str | None = None
    ) -> list[JobRecord]:
        writes: list[Write] = []
        roles: list[tuple[str, str]] = []
        created: list[tuple[JobRecord, TimelineEntry]] = []
        for job, reason in zip(jobs, reasons, strict=True):
            record, entry, job_writes, job_roles = self.new_job_writes(
                job, reason, now=now, request_digest=request_digest
            )
            writes += job_writes
            roles += job_roles
            created.append((record, entry))
        self.tables.transact(writes, roles)
        for record, entry in created:
            self.notify(record, [entry])
        return [record for record, _ in created]

    def transition(
        self,
        record: JobRecord,
        target: JobState,
        reason: str,
        *,
        now: float,
        via: JobState | None = None,
        via_reason: str | None = None,
        job: Mapping[str, Any] | None = None,
        changes: Mapping[str, Any] | None = None,
    ) -> JobRecord:
        prepared = self.prepare_transition(
            record, target, reason, now=now, via=via, via_reason=via_reason, job=job, changes=changes
        )
        self.commit_together([prepared])
        return prepared.new

    def prepare_transition(
        self,
        record: JobRecord,
        target: JobState,
        reason: str,
        *,
        now: float,
        via: JobState | None = None,
        via_reason: str | None = None,
        job: Mapping[str, Any] | None = None,
        changes: Mapping[str, Any] | None = None,
    ) -> PreparedTransition:
        now = entry_time(record, now)  # the stamp its timeline entries get, for the ledger too
        new, entries, releasing = transitioned(
            record, target, reason, now=now, via=via, via_reason=via_reason, job=job, changes=changes
        )
        extra: list[Write] = []
        roles: list[tuple[str, str]] = []
        if releasing and record.job.pool is not None:
            extra, roles = self.ledger.release_writes(
                pool=record.job.pool,
                team=record.team,
                gpus=record.gpus_held,
                held_since=record.admitted_at,
                now=now,
            )
            lost_s = max(0.0, new.job.lost_work_s - record.job.lost_work_s)
            costs = run_cost_writes(
                team=record.team,
                pool=record.job.pool,
                gpus=record.gpus_held,
                held_since=record.admitted_at if record.admitted_at is not None else now,
                now=now,
                lost_gpu_s=lost_s * record.gpus_held,
            )
            extra = [*extra, *costs]
            roles = [*roles, *[("other", f"cost {record.team}")] * len(costs)]
        items, item_roles = self.transition_items(record, new, entries, extra, roles)
        return PreparedTransition(record, new, entries, items, item_roles)

    def transition_items(
        self,
        old: JobRecord,
        new: JobRecord,
        entries: Sequence[TimelineEntry],
        extra: Sequence[Write],
        extra_roles: Sequence[tuple[str, str]],
    ) -> tuple[list[StoreWrite], list[tuple[str, str]]]:
        """The writes of a change from `old` (as read) to `new`: the job's item, conditional on
        `old`'s state and version, changed only where `new` differs; each timeline entry; `extra`;
        and the job's signal item when an agent-facing field changed."""
        before, after = record_to_item(old), record_to_item(new)
        diff = item_changes(before, after)

        def changed(item: Item | None) -> Item:
            assert item is not None
            return _applied(item, sets=diff.sets, removes=diff.removes, adds=diff.adds, deletes=diff.deletes)

        writes = [
            Write(JOBS, old.id, _job_condition(old), changed),
            *(self.timeline.append_write(e) for e in entries),
            *extra,
        ]
        roles = [("job", old.id), *(("timeline", old.id) for _ in entries), *extra_roles]
        signals = signal_changes(before, after)
        if signals:
            writes.append(self._signal_write(new.team, new.id, signals))
            roles.append(("signal", new.id))
        return [as_store_write(w) for w in writes], roles

    def commit_together(
        self,
        prepared: Sequence[PreparedTransition],
        extra: Sequence[StoreWrite] = (),
        extra_roles: Sequence[tuple[str, str]] = (),
    ) -> None:
        writes = [write(item) for p in prepared for item in p.items] + [write(item) for item in extra]
        roles = [role for p in prepared for role in p.roles] + list(extra_roles)
        self.tables.transact(writes, roles)
        for p in prepared:
            self.notify(p.new, p.entries)

    def update_spec(
        self,
        record: JobRecord,
        spec: JobSpec,
        reason: str,
        *,
        now: float,
        changes: Mapping[str, Any] | None = None,
        job: Mapping[str, Any] | None = None,
    ) -> JobRecord:
        at = entry_time(record, now)
        new = record.with_changes(
            job={"spec": spec, "version": record.version + 1, **dict(job or {})},
            updated_at=at,
            **dict(changes or {}),
        )
        entry = TimelineEntry(
            record.id, new.version, at, record.state.value, record.state.value, reason, EntryKind.CHANGE.value
        )
        items, roles = self.transition_items(record, new, [entry], [], [])
        self.commit_together([PreparedTransition(record, new, (entry,), items, roles)])
        return new

    def annotate(
        self,
        record: JobRecord,
        reason: str,
        *,
        now: float,
        job: Mapping[str, Any] | None = None,
        changes: Mapping[str, Any] | None = None,
        lost_gpu_s_returned: float = 0.0,
    ) -> JobRecord:
        at = entry_time(record, now)
        new = record.with_changes(
            job={**(job or {}), "version": record.version + 1}, updated_at=at, **dict(changes or {})
        )
        entry = TimelineEntry(
            record.id,
            new.version,
            at,
            record.state.value,
            record.state.value,
            reason,
            EntryKind.CHECKPOINT.value,
        )
        extra: list[Write] = []
        loss = record.lost_work
        if lost_gpu_s_returned > 0 and loss is not None and loss.pool is not None:
            extra = [
                lost_credit_write(team=record.team, pool=loss.pool, at=loss.until, gpu_s=lost_gpu_s_returned)
            ]
        roles = [("other", f"cost {record.team}")] * len(extra)
        items, item_roles = self.transition_items(record, new, [entry], extra, roles)
        self.commit_together([PreparedTransition(record, new, (entry,), items, item_roles)])
        return new

    def _signal_write(self, team: str, job_id: str, values: Mapping[str, Any]) -> Write:
        key = resources.signal_key(team, job_id)

        def signalled(item: Item | None) -> Item:
            item = item or {"job_id": key}
            item.update({k: v for k, v in values.items() if v is not None})
            for name in [k for k, v in values.items() if v is None]:
                item.pop(name, None)
            item["job"] = job_id
            return item

        return Write(JOBS, key, None, signalled)

    def read_signals(self, team: str, job_id: str) -> Item | None:
        """A job's signal item (what its agent reads), or None."""
        return self.tables.get(JOBS, resources.signal_key(team, job_id))

    def notify(self, record: JobRecord, entries: Sequence[TimelineEntry]) -> None:
        for listener in self.listeners:
            listener(record, entries)

    def update_fields(
        self,
        job_id: str,
        *,
        states: Iterable[JobState],
        set_fields: Mapping[str, Any] | None = None,
        remove_fields: Iterable[str] = (),
        version: int | None = None,
        conditions: Sequence[tuple[str, str, Any]] = (),
        add_to_set: Mapping[str, Iterable[str]] | None = None,
        team: str | None = None,
        delete_from_set: Mapping[str, Iterable[str]] | None = None,
        any_of: Sequence[Sequence[tuple[str, str, Any]]] = (),
    ) -> JobRecord:
        allowed = {s.value for s in states}
        remove_fields = list(remove_fields)
        adds = {n: list(v) for n, v in (add_to_set or {}).items() if v}
        deletes = {n: list(v) for n, v in (delete_from_set or {}).items() if v}

        def holds(item: Item | None) -> bool:
            if item is None or item.get("state") not in allowed:
                return False
            if version is not None and item.get("version") != version:
                return False
            if not all(_reads(item, *c) for c in conditions):
                return False
            return all(any(_reads(item, *c) for c in group) for group in any_of if group)

        def changed(item: Item | None) -> Item:
            assert item is not None
            return _applied(
                item, sets=dict(set_fields or {}), removes=remove_fields, adds=adds, deletes=deletes
            )

        signals = {
            **{n: v for n, v in (set_fields or {}).items() if n in resources.SIGNAL_FIELDS},
            **{n: None for n in remove_fields if n in resources.SIGNAL_FIELDS},
        }
        job_write = Write(JOBS, job_id, holds, changed)
        if signals:
            if team is None:
                team = self.get(job_id).team
            self.tables.transact(
                [job_write, self._signal_write(team, job_id, signals)], [("job", job_id), ("signal", job_id)]
            )
        else:
            self.tables.transact([job_write], [("job", job_id)])
        return self.get(job_id)

    def mark_terminating(self, job_id: str, batch_job_ids: Iterable[str]) -> JobRecord | None:
        ids = sorted(set(batch_job_ids))
        if not ids:
            return self.find(job_id)
        try:
            return self.update_fields(
                job_id,
                states=list(JobState),
                set_fields={"active_pk": active_pk_for(job_id)},
                add_to_set={"terminating_batch_job_ids": ids},
            )
        except StaleJobError:
            return None

    def confirm_stopped(self, job_id: str, batch_job_id: str) -> JobRecord | None:
        try:
            record = self.update_fields(
                job_id,
                states=list(JobState),
                delete_from_set={"terminating_batch_job_ids": [batch_job_id]},
                conditions=[("terminating_batch_job_ids", "contains", batch_job_id)],
            )
        except StaleJobError:
            return None
        if not record.terminating_batch_job_ids and record.state not in ACTIVE_STATES:
            with contextlib.suppress(StaleJobError):  # unless a transition or termination came between
                self.update_fields(
                    job_id,
                    states=[s for s in JobState if s not in ACTIVE_STATES],
                    remove_fields=["active_pk"],
                    conditions=[("terminating_batch_job_ids", "attribute_not_exists", None)],
                )
        return record

    def bulk_load(self, records: Sequence[JobRecord]) -> None:
        """Write many records without transitions (benchmarks and tests), with their signal items."""
        for record in records:
            item = record_to_item(record)
            self.tables.put(JOBS, record.id, item)
            signals = {n: item[n] for n in resources.SIGNAL_FIELDS if n in item}
            if signals:
                key = resources.signal_key(record.team, record.id)
                self.tables.put(JOBS, key, {"job_id": key, "job": record.id, **signals})

    # --- reads ----------------------------------------------------------------------------

    def _job_item(self, job_id: str) -> Item | None:
        item = self.tables.get(JOBS, job_id)
        return None if item is None or item.get("kind") == ARRAY_KIND or "state" not in item else item

    def find(self, job_id: str) -> JobRecord | None:
        item = self._job_item(job_id)
        return None if item is None else item_to_record(item)

    def get(self, job_id: str) -> JobRecord:
        record = self.find(job_id)
        if record is None:
            raise JobNotFound(job_id)
        return record

    def find_many(self, job_ids: Iterable[str]) -> dict[str, JobRecord]:
        found = {}
        for job_id in dict.fromkeys(job_ids):
            record = self.find(job_id)
            if record is not None:
                found[job_id] = record
        return found

    def _index(self, key: str, value: str, sort_key: str, limit: int) -> list[JobRecord]:
        items = sorted(
            (i for i in self.tables.scan(JOBS) if i.get(key) == value and sort_key in i),
            key=lambda i: i[sort_key],
        )
        return [r for r in (item_to_record(i) for i in items[:limit]) if r.state is JobState.PENDING]

    def queue_head(
        self, priority: Priority, limit: int, *, skipped: Quarantined | None = None
    ) -> list[JobRecord]:
        return self._index("queue_pk", QUEUE_PK_PREFIX + priority.value, "queue_sk", limit)

    def held_head(self, limit: int, *, skipped: Quarantined | None = None) -> list[JobRecord]:
        return self._index("queue_pk", HELD_QUEUE_PK, "queue_sk", limit)

    def deadline_head(self, limit: int, *, skipped: Quarantined | None = None) -> list[JobRecord]:
        return self._index("deadline_pk", DEADLINE_PK, "deadline_sk", limit)

    def _active_index(self) -> list[JobRecord]:
        items = [i for i in self.tables.scan(JOBS) if "active_pk" in i and "state" in i]
        return sorted((item_to_record(i) for i in items), key=lambda record: record.id)

    def active(self, *, skipped: Quarantined | None = None) -> list[JobRecord]:
        return [r for r in self._active_index() if r.state in ACTIVE_STATES]

    def terminating(self, *, skipped: Quarantined | None = None) -> list[JobRecord]:
        return [r for r in self._active_index() if r.terminating_batch_job_ids]

    def list_team(
        self,
        team: str,
        *,
        state: JobState | None = None,
        limit: int = 50,
        next_token: str | None = None,
        max_pages: int = 5,
    ) -> tuple[list[JobRecord], str | None]:
        """A team's jobs, newest first, optionally of one state: one page and the next token. As
        on DynamoDB the limit counts the items read before the state filter, and up to
        `max_pages` reads are made to fill a page."""
        start = _decode(next_token)
        index = sorted(
            (i for i in self.tables.scan(JOBS) if i.get("team") == team and "team_sk" in i),
            key=lambda i: i["team_sk"],
            reverse=True,
        )
        if start is not None:
            index = [i for i in index if i["team_sk"] < str(start.get("team_sk", ""))]
        found: list[JobRecord] = []
        position: dict[str, Any] | None = None
        for _ in range(max_pages):
            page, index = index[: limit - len(found)], index[limit - len(found) :]
            found += [r for r in (item_to_record(i) for i in page) if state is None or r.state is state]
            position = (
                {"job_id": page[-1]["job_id"], "team": team, "team_sk": page[-1]["team_sk"]}
                if index and page
                else None
            )
            if position is None or len(found) >= limit:
                break
        return found, _encode(position)

    def list_finished(
        self,
        team: str,
        *,
        since: float | None = None,
        state: JobState | None = None,
        limit: int = 50,
        next_token: str | None = None,
        max_pages: int = 5,
    ) -> tuple[list[JobRecord], str | None]:
        """A team's finished jobs, the latest to end first (the `finished` index), ended at
        `since` or later; as on DynamoDB the limit counts the items read before the state filter."""
        start = _decode(next_token)
        low = order_key(since, "") if since is not None else ""
        index = sorted(
            (
                i
                for i in self.tables.scan(JOBS)
                if i.get("finished_pk") == FINISHED_PK_PREFIX + team and str(i.get("finished_sk", "")) >= low
            ),
            key=lambda i: i["finished_sk"],
            reverse=True,
        )
        if start is not None:
            index = [i for i in index if i["finished_sk"] < str(start.get("finished_sk", ""))]
        found: list[JobRecord] = []
        position: dict[str, Any] | None = None
        for _ in range(max_pages):
            page, index = index[: limit - len(found)], index[limit - len(found) :]
            found += [r for r in (item_to_record(i) for i in page) if state is None or r.state is state]
            position = (
                {
                    "job_id": page[-1]["job_id"],
                    "finished_pk": page[-1]["finished_pk"],
                    "finished_sk": page[-1]["finished_sk"],
                }
                if index and page
                else None
            )
            if position is None or len(found) >= limit:
                break
        return found, _encode(position)


# --- arrays ---------------------------------------------------------------------------------------

ELEMENTS_PER_TRANSACTION = 49


class MemoryArrays:
    """The `ArrayStore` port: an array's record, then its elements staged in chunks (each
    conditional on the array being CREATING), the flip to READY, and the elements' release."""

    def __init__(self, jobs: MemoryJobs) -> None:
        self.jobs = jobs

    def find(self, array_id: str) -> ArrayRecord | None:
        item = self.jobs.tables.get(JOBS, array_id)
        return None if item is None or item.get("kind") != ARRAY_KIND else item_to_array(item)

    def begin(self, array: ArrayRecord, jobs: Sequence[Job]) -> None:
        if array.state != ARRAY_CREATING:
            raise InvalidTransition(f"array {array.id} starts {ARRAY_CREATING}, not {array.state}")
        for job in jobs:
            check_new_item_size(record_to_item(JobRecord(job=job, updated_at=0.0, staged_for_array=array.id)))
        item = array_to_item(array)
        check_new_item_size(item)
        self.jobs.tables.transact(
            [Write(JOBS, array.id, lambda found: found is None, lambda _: copy.deepcopy(item))],
            [("new-job", array.id)],
        )

    def add_elements(
        self, array: ArrayRecord, jobs: Sequence[Job], reasons: Sequence[str], *, now: float
    ) -> list[JobRecord]:
        found = self.jobs.find_many(job.id for job in jobs)
        missing = [(job, reason) for job, reason in zip(jobs, reasons, strict=True) if job.id not in found]
        for start in range(0, len(missing), ELEMENTS_PER_TRANSACTION):
            chunk = missing[start : start + ELEMENTS_PER_TRANSACTION]
            try:
                for record in self._put_chunk(array, chunk, now):
                    found[record.id] = record
            except JobAlreadyExists:
                # A concurrent retry wrote some of them: write the rest, one at a time.
                for job, reason in chunk:
                    with contextlib.suppress(JobAlreadyExists):
                        self._put_chunk(array, [(job, reason)], now)
                found.update(self.jobs.find_many(job.id for job, _ in chunk))
        return [found[job.id] for job in jobs if job.id in found]

    def _put_chunk(self, array: ArrayRecord, chunk: Sequence[tuple[Job, str]], now: float) -> list[JobRecord]:
        def creating(item: Item | None) -> bool:
            return item is not None and item.get("state") == ARRAY_CREATING

        writes: list[Write] = [Write(JOBS, array.id, creating)]
        roles: list[tuple[str, str]] = [("array", array.id)]
        created: list[tuple[JobRecord, TimelineEntry]] = []
        for job, reason in chunk:
            record, entry, job_writes, job_roles = self.jobs.new_job_writes(
                job, reason, now=now, request_digest=array.request_digest, staged_for_array=array.id
            )
            writes += job_writes
            roles += job_roles
            created.append((record, entry))
        self.jobs.tables.transact(writes, roles)
        for record, entry in created:
            self.jobs.notify(record, [entry])
        return [record for record, _ in created]

    def finish(self, array: ArrayRecord, *, now: float) -> ArrayRecord:
        def ready(item: Item | None) -> Item:
            assert item is not None
            item.update(state=ARRAY_READY, ready_at=now)
            return item

        try:
            self.jobs.tables.transact(
                [
                    Write(
                        JOBS,
                        array.id,
                        lambda item: item is not None and item.get("state") == ARRAY_CREATING,
                        ready,
                    )
                ],
                [("array", array.id)],
            )
        except ConditionFailed:
            stored = self.find(array.id)
            if stored is None or stored.state != ARRAY_READY:
                raise
            return stored
        return array.model_copy(update={"state": ARRAY_READY})

    def release(self, records: Sequence[JobRecord], reason: str, *, now: float) -> list[JobRecord]:
        out = {r.id: r for r in records}
        staged = [r for r in records if r.staged_for_array is not None and r.state is JobState.PENDING]
        for start in range(0, len(staged), ELEMENTS_PER_TRANSACTION):
            chunk = [
                self._release_one(r, reason, now) for r in staged[start : start + ELEMENTS_PER_TRANSACTION]
            ]
            try:
                self.jobs.commit_together(chunk)
                out.update((p.new.id, p.new) for p in chunk)
            except StaleJobError:
                for prepared in chunk:
                    try:
                        self.jobs.commit_together([prepared])
                        out[prepared.new.id] = prepared.new
                    except StaleJobError:
                        fresh = self.jobs.find(prepared.old.id)
                        if fresh is not None and fresh.staged_for_array is not None:
                            raise  # still staged but changed: the caller's retry releases it
                        if fresh is not None:
                            out[fresh.id] = fresh
        return [out[r.id] for r in records]

    def _release_one(self, record: JobRecord, reason: str, now: float) -> PreparedTransition:
        at = entry_time(record, now)
        new = record.with_changes(job={"version": record.version + 1}, updated_at=at, staged_for_array=None)
        entry = TimelineEntry(
            record.id, new.version, at, record.state.value, record.state.value, reason, EntryKind.CHANGE.value
        )
        items, roles = self.jobs.transition_items(record, new, [entry], [], [])
        return PreparedTransition(record, new, (entry,), items, roles)


# --- the outside world, recorded ------------------------------------------------------------------


@dataclass
class RecordingLauncher:
    """A `BatchLauncher` that records what it was asked, and answers like Batch about the jobs it
    submitted: `find_live` by queue and name, `stopped` for the ended ones (and unknown ids).

    Faults: `failures` are raised by the next submits instead of submitting;
    `crash_after_submit` by the next submits after the job was submitted (a crash after the
    call); `terminate_failures` by the next terminates. A terminate ends the job at once
    unless `terminate_ends` is False (then only `end` does, as Batch's terminal event would)."""

    submitted: list[BatchJobRequest] = field(default_factory=list)
    terminated: list[tuple[str, str]] = field(default_factory=list)
    failures: list[Exception] = field(default_factory=list)
    crash_after_submit: list[Exception] = field(default_factory=list)
    terminate_failures: list[Exception] = field(default_factory=list)
    terminate_ends: bool = True
    names: dict[str, tuple[str, str]] = field(default_factory=dict)
    ended: set[str] = field(default_factory=set)

    def submit(self, request: BatchJobRequest) -> str:
        if self.failures:
            raise self.failures.pop(0)
        self.submitted.append(request)
        batch_job_id = f"batch-{request.job_id}-{len(self.submitted)}"
        self.names[batch_job_id] = (request.job_queue, request.job_name)
        if self.crash_after_submit:
            raise self.crash_after_submit.pop(0)
        return batch_job_id

    def find_live(self, job_queue: str, job_name: str) -> list[str]:
        return [b for b, key in self.names.items() if key == (job_queue, job_name) and b not in self.ended]

    def terminate(self, batch_job_id: str, reason: str) -> None:
        if self.terminate_failures:
            raise self.terminate_failures.pop(0)
        self.terminated.append((batch_job_id, reason))
        if self.terminate_ends:
            self.ended.add(batch_job_id)

    def stopped(self, batch_job_ids: Sequence[str]) -> set[str]:
        return {b for b in batch_job_ids if b in self.ended or b not in self.names}

    def end(self, batch_job_id: str) -> None:
        """The Batch job stops (its terminal event is the test's to send)."""
        self.ended.add(batch_job_id)

    def live(self) -> list[str]:
        return [b for b in self.names if b not in self.ended]


@dataclass
class RecordingStarter:
    """A `WorkflowStarter` that records every start (a repeated name included, as a handler
    delivered twice asks twice) and answers the execution's ARN."""

    started: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def start(self, state_machine_arn: str, name: str, payload: Mapping[str, Any]) -> str:
        self.started.append((state_machine_arn, name, dict(payload)))
        return f"{state_machine_arn}:{name}"

    def names(self) -> list[str]:
        return [name for _, name, _ in self.started]


@dataclass
class StaticInstanceResolver:
    """An `InstanceResolver`: container instance ARN -> EC2 instance id, as ECS would answer."""

    mapping: dict[str, str] = field(default_factory=dict)

    def resolve(self, container_instances: Sequence[str]) -> list[str]:
        return sorted(
            {self.mapping.get(c, c) for c in container_instances if self.mapping.get(c, c).startswith("i-")}
        )


@dataclass
class RecordingTaskTokens:
    """`TaskTokens` that record every answer (`answers`: ("succeed", token, output) or ("fail",
    token, error and cause)); an answer is taken (True) only for a token a test says is
    `waiting`, once, as Step Functions answers a task still waiting and no other."""

    waiting: set[str] = field(default_factory=set)
    answers: list[tuple[str, str, Any]] = field(default_factory=list)

    def succeed(self, token: str, output: Mapping[str, Any]) -> bool:
        self.answers.append(("succeed", token, dict(output)))
        return self._take(token)

    def fail(self, token: str, error: str, cause: str) -> bool:
        self.answers.append(("fail", token, (error, cause)))
        return self._take(token)

    def _take(self, token: str) -> bool:
        if token not in self.waiting:
            return False
        self.waiting.discard(token)
        return True


@dataclass
class RecordingTrigger:
    """A `PassTrigger` that records each request for a pass (reason, dedup key)."""

    requests: list[tuple[str, str]] = field(default_factory=list)

    def request(self, reason: str, dedup_key: str) -> None:
        self.requests.append((reason, dedup_key))


@dataclass
class RecordingEventSink:
    """An `EventSink` that records every event put (source, detail-type, detail)."""

    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def put(self, source: str, detail_type: str, details: Sequence[Mapping[str, Any]]) -> None:
        self.events += [(source, detail_type, json.loads(json.dumps(dict(d), default=str))) for d in details]

    def of(self, detail_type: str) -> list[dict[str, Any]]:
        return [detail for _, kind, detail in self.events if kind == detail_type]


@dataclass
class MemoryRunLogs:
    """`RunLogs`: each run's lines as a test writes them (`write`), paged as CloudWatch pages."""

    lines: dict[str, list[LogLine]] = field(default_factory=dict)
    # Each run's number, as a test names it (`write(..., run=N)`).
    runs: dict[str, int] = field(default_factory=dict)

    def numbers(self, batch_job_ids: Sequence[str]) -> dict[str, int]:
        return {i: self.runs[i] for i in batch_job_ids if i in self.runs}

    def write(self, batch_job_id: str, *messages: str, at: float | None = None) -> None:
        self.lines.setdefault(batch_job_id, []).extend(LogLine(m, at) for m in messages)

    def read(self, batch_job_id: str, *, next_token: str | None, limit: int, tail: bool) -> LogPage:
        lines = self.lines.get(batch_job_id)
        if lines is None:
            return LogPage()
        if next_token is not None:
            start = int(next_token)
        elif tail:
            start = max(0, len(lines) - limit)
        else:
            start = 0
        page = lines[start : start + limit]
        return LogPage(lines=list(page), next_token=str(start + len(page)))


@dataclass
class MemoryImages:
    """An `ImageResolver` over a registry held in memory: `digests` maps an image as submitted
    (`<repository>:<tag>`; no tag is `latest`) to the digest its tag names. An image given by
    digest, or of a repository the registry does not hold, runs as given; a tag the registry does
    not hold in one of its repositories is `ImageNotFound`, as ECR answers."""

    digests: dict[str, str] = field(default_factory=dict)

    def pin(self, image: str) -> str:
        if "@" in image:
            return image
        name = image.rsplit("/", 1)[-1]
        repository, tag = image.rsplit(":", 1) if ":" in name else (image, "latest")
        digest = self.digests.get(f"{repository}:{tag}")
        if digest is not None:
            return f"{repository}@{digest}"
        if any(known.rsplit(":", 1)[0] == repository for known in self.digests):
            raise ImageNotFound(f"{image}: the registry has no image tagged {tag!r} in {repository!r}")
        return image


# --- idempotency for the handlers -----------------------------------------------------------------


def memory_idempotency() -> Any:
    """A Powertools idempotency persistence layer in memory, for the handlers that run once per
    event id (`functions.runtime.idempotent_on_event_id`) on a memory control plane."""
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyItemAlreadyExistsError,
        IdempotencyItemNotFoundError,
    )
    from aws_lambda_powertools.utilities.idempotency.persistence.base import BasePersistenceLayer
    from aws_lambda_powertools.utilities.idempotency.persistence.datarecord import DataRecord

    class MemoryIdempotency(BasePersistenceLayer):
        def __init__(self) -> None:
            super().__init__()  # type: ignore[no-untyped-call]
            self.records: dict[str, DataRecord] = {}
            self.lock = threading.Lock()

        def _get_record(self, idempotency_key: str) -> DataRecord:
            with self.lock:
                if idempotency_key not in self.records:
                    raise IdempotencyItemNotFoundError
                return self.records[idempotency_key]

        def _put_record(self, data_record: DataRecord) -> None:
            with self.lock:
                found = self.records.get(data_record.idempotency_key)
                # As the DynamoDB layer: a record may be taken over once expired, or once its
                # invocation's in-progress expiry (the Lambda timeout) has passed.
                stale = found is not None and (
                    found.is_expired
                    or (
                        found.status == "INPROGRESS"
                        and found.in_progress_expiry_timestamp is not None
                        and found.in_progress_expiry_timestamp < time.time() * 1000
                    )
                )
                if found is not None and not stale:
                    raise IdempotencyItemAlreadyExistsError(old_data_record=found)
                self.records[data_record.idempotency_key] = data_record

        def _update_record(self, data_record: DataRecord) -> None:
            with self.lock:
                self.records[data_record.idempotency_key] = data_record

        def _delete_record(self, data_record: DataRecord) -> None:
            with self.lock:
                self.records.pop(data_record.idempotency_key, None)

    return MemoryIdempotency()


# --- the plane ------------------------------------------------------------------------------------

REGION = "us-east-1"
ACCOUNT = "000000000000"


def memory_settings(config: Mapping[str, Any] | SpotlineConfig) -> Settings:
    """Settings for a memory control plane: `config` (the deployment's configuration, as the
    stack publishes it), with made-up table names and workflow ARNs."""
    parsed = config if isinstance(config, SpotlineConfig) else SpotlineConfig.model_validate(dict(config))
    machine = f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:spotline"
    return Settings(
        jobs_table=JOBS,
        timeline_table=TIMELINE,
        ledger_table=LEDGER,
        instances_table=INSTANCES,
        idempotency_table="idempotency",
        event_bus="spotline",
        preempt_state_machine_arn=f"{machine}-preempt",
        launch_state_machine_arn=f"{machine}-launch",
        config=parsed,
    )


@dataclass
class MemoryPlane:
    """A memory control plane and the recording adapters it was built with."""

    plane: ControlPlane
    tables: MemoryTables
    launcher: RecordingLauncher
    starter: RecordingStarter
    tokens: RecordingTaskTokens
    trigger: RecordingTrigger
    events: RecordingEventSink
    resolver: StaticInstanceResolver
    logs: MemoryRunLogs


def memory_control_plane(
    settings: Settings,
    *,
    clock: Clock | None = None,
    tables: MemoryTables | None = None,
    launcher: RecordingLauncher | None = None,
    images: MemoryImages | None = None,
    rng_seed: int | None = None,
    new_id: Callable[[], str] | None = None,
) -> MemoryPlane:
    """A `ControlPlane` over the memory stores (on `tables`, fresh ones by default), with every
    outside service recorded. `clock` defaults to the wall clock; `images` pins image tags (None:
    images run as given)."""
    tables = tables or MemoryTables()
    events = RecordingEventSink()
    publisher = EventPublisher(events)
    timeline = MemoryTimeline(tables)
    ledger = MemoryLedger(tables, usage_half_life_s=settings.config.scheduler.usage_half_life_s)
    jobs = MemoryJobs(tables, timeline, ledger, listeners=[publisher.on_commit])
    launcher = launcher or RecordingLauncher()
    starter, tokens, trigger = RecordingStarter(), RecordingTaskTokens(), RecordingTrigger()
    resolver, logs = StaticInstanceResolver(), MemoryRunLogs()
    plane = ControlPlane(
        settings=settings,
        jobs=jobs,
        timeline=timeline,
        ledger=ledger,
        instances=MemoryInstances(tables),
        publisher=publisher,
        workflows=starter,
        tokens=tokens,
        launcher=launcher,
        instance_resolver=resolver,
        trigger=trigger,
        pages=MemoryPageTokens(tables),
        costs=MemoryCosts(tables),
        clock=clock or time.time,
        rng=random.Random(settings.config.seed if rng_seed is None else rng_seed),
        new_job_id=new_id or new_job_id,
        run_logs=logs,
        spot_pools=MemorySpotPools(tables),
        images=images,
        idempotency=memory_idempotency(),
    )
    return MemoryPlane(plane, tables, launcher, starter, tokens, trigger, events, resolver, logs)
