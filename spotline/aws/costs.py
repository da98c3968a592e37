"""What each team's runs cost, per calendar month (UTC), on the Ledger table.

Item "COST#<team>#<YYYY-MM>" holds, per pool, the GPU-seconds of the runs that ended in the
month (`gpu_s#<pool>`, split at month boundaries) and the GPU-seconds of work they lost to
preemptions and interruptions (`lost_gpu_s#<pool>`), plus `runs`. The release of a job's GPUs
adds its run in the same transaction that moves the job out of its active state (the one that
also adds the run to the fair-share buckets), so a run is counted exactly once, and never
before it ends. A run still going is costed from the `active` index whenever it is read (each
scheduling pass, `GET /usage`, a submission checking the budget), from its admission to now.

Dollars are GPU-hours times the pool's configured price per GPU-hour (On-Demand, or Spot at
its configured price), computed when read, so a change of price re-prices nothing stored.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from spotline.aws.dynamo import DynamoTable, Expression, TransactItem, deserialize_item, serialize_item
from spotline.aws.errors import storage_errors
from spotline.control.errors import ConditionFailed
from spotline.control.months import MonthUsage, month_of, month_segments
from spotline.control.records import JobRecord

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

GPU_S = "gpu_s#"
LOST_GPU_S = "lost_gpu_s#"
BUDGET_MARK = "budget_notified"


def cost_key(team: str, month: str) -> str:
    return f"COST#{team}#{month}"


def run_items(
    table_name: str, *, team: str, pool: str, gpus: int, held_since: float, now: float, lost_gpu_s: float
) -> list[TransactItem]:
    """Updates that add a run that held `gpus` in `pool` from `held_since` to `now` (and lost
    `lost_gpu_s` of work) to its team's months."""
    segments = month_segments(held_since, now) or [(month_of(now), 0.0)]
    items: list[TransactItem] = []
    for index, (month, seconds) in enumerate(segments):
        last = index == len(segments) - 1
        expr = Expression()
        adds = [f"{expr.name(GPU_S + pool)} {expr.value(round(gpus * seconds, 3))}"]
        if last:
            adds.append(f"{expr.name('runs')} {expr.value(1)}")
            if lost_gpu_s > 0:
                adds.append(f"{expr.name(LOST_GPU_S + pool)} {expr.value(round(lost_gpu_s, 3))}")
        items.append(
            {
                "Update": expr.attach(
                    {
                        "TableName": table_name,
                        "Key": serialize_item({"pk": cost_key(team, month)}),
                        "UpdateExpression": "ADD " + ", ".join(adds),
                    }
                )
            }
        )
    return items


def lost_credit_items(
    table_name: str, *, team: str, pool: str, at: float, gpu_s: float
) -> list[TransactItem]:
    """The update that gives back `gpu_s` of lost work charged to `pool` in the month of `at` (a
    late checkpoint showed it was saved after all)."""
    if gpu_s <= 0:
        return []
    expr = Expression()
    add = f"{expr.name(LOST_GPU_S + pool)} {expr.value(-round(gpu_s, 3))}"
    return [
        {
            "Update": expr.attach(
                {
                    "TableName": table_name,
                    "Key": serialize_item({"pk": cost_key(team, month_of(at))}),
                    "UpdateExpression": "ADD " + add,
                }
            )
        }
    ]


class CostBook:
    """Reads the cost items (writes go with the job's release, `run_items`)."""

    def __init__(self, client: DynamoDBClient, table_name: str) -> None:
        self.table = DynamoTable(client, table_name)

    def months(
        self, teams: Iterable[str], month: str, active: Sequence[JobRecord], now: float
    ) -> dict[str, MonthUsage]:
        """Each team's month: its ended runs (one BatchGetItem per 100 teams) plus its runs
        going now (from `active`, the jobs holding GPUs)."""
        teams = list(dict.fromkeys(teams))
        usage = {team: MonthUsage(team, month) for team in teams}
        keys = [cost_key(t, month) for t in teams]
        for start in range(0, len(keys), 100):
            pending: Any = {
                self.table.name: {
                    "Keys": [serialize_item({"pk": k}) for k in keys[start : start + 100]],
                    "ConsistentRead": True,
                }
            }
            while pending:
                with storage_errors():
                    response = self.table.client.batch_get_item(RequestItems=pending)
                for raw in response.get("Responses", {}).get(self.table.name, []):
                    item = deserialize_item(raw)
                    team = str(item["pk"]).split("#", 2)[1]
                    found = usage[team]
                    for name, value in item.items():
                        if name.startswith(GPU_S):
                            found.gpu_s[name.removeprefix(GPU_S)] = float(value)
                        elif name.startswith(LOST_GPU_S):
                            found.lost_gpu_s[name.removeprefix(LOST_GPU_S)] = float(value)
                    found.runs = int(item.get("runs", 0))
                    mark = item.get(BUDGET_MARK)
                    found.notified = str(mark) if mark else None
                pending = response.get("UnprocessedKeys") or None
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
        """Record that the team was told it crossed `level` this month; False when another
        writer did it first (so the event goes out once)."""
        expr = Expression()
        mark = expr.name(BUDGET_MARK)
        condition = (
            f"attribute_not_exists({mark})" if previous is None else f"{mark} = {expr.value(previous)}"
        )
        try:
            self.table.update(
                expr.attach(
                    {
                        "Key": serialize_item({"pk": cost_key(team, month)}),
                        "UpdateExpression": f"SET {mark} = {expr.value(level)}",
                        "ConditionExpression": condition,
                        "ReturnValues": "NONE",
                    }
                )
            )
        except ConditionFailed:
            return False
        return True
