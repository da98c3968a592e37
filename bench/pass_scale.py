"""The control plane's scheduling pass at scale, on moto (in-process, no local runtime).

Two measures, each on fresh tables:

1. **Pass cost by queue length**: 100, 1,000 and 10,000 pending jobs (bulk-loaded, spread over
   the four classes, every fifth with a deadline) that fit no pool (their GPU type has none), so
   every pass leaves them all waiting and the queue keeps its length. The first pass writes each
   window job's wait reason; the second changes nothing, and must write nothing. For each: the
   pass's wall time, the DynamoDB items it read, and its write calls by operation.
2. **A freed cluster**: 1,000 GPUs free (one On-Demand pool) and 1,000 pending 1-GPU jobs of one
   class. Passes run back to back (as `more_work` asks) until none is pending: how many passes,
   the admissions per second of pass time, once with the pass window scaled by the free GPUs
   (`pass_window`) and once with a fixed window of 256 per class (before).

The AWS calls are counted by hooking botocore (`BaseClient._make_request`). moto runs as it is
(in-process, unpatched), and its speed is not DynamoDB's: a query reads every item of its table
and a transaction copies the tables it names, so the times say how the pass scales on moto, not
what it takes on AWS; the items read and the writes are what to compare.

    .venv/bin/python -m bench.pass_scale [--pending 100,1000,10000] [--backlog 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

REGION = "us-east-1"
ACCOUNT = "123456789012"
WRITE_OPERATIONS = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems", "BatchWriteItem"})
READ_OPERATIONS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem"})
FIXED_WINDOW = 256  # the window per class before it scaled with free GPUs


def config(capacity_gpus: int) -> dict[str, Any]:
    """One On-Demand a100 pool of `capacity_gpus`, one team whose quota is the pool."""
    settings: dict[str, Any] = {
        "pools": [
            {
                "name": "a100-on-demand",
                "gpu_type": "a100",
                "purchase": "on-demand",
                "capacity_gpus": capacity_gpus,
                "gpus_per_node": 8,
                "job_queue": f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/spotline-a100-on-demand",
            }
        ],
        "job_definition": f"arn:aws:batch:{REGION}:{ACCOUNT}:job-definition/spotline-training:1",
        "teams": [{"team": "vision", "nominal_gpus": capacity_gpus}],
        "scheduler": {"protection_period_s": 0, "preemption_delay_s": 0},
    }
    return settings


@dataclass
class Meter:
    """AWS calls by (service, operation), and the items DynamoDB's reads returned."""

    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    items_read: int = 0

    def writes(self) -> Counter[str]:
        return Counter({op: n for (service, op), n in self.calls.items() if op in WRITE_OPERATIONS})

    def count(self, operation: str) -> int:
        return sum(n for (_, op), n in self.calls.items() if op == operation)


@contextmanager
def metered() -> Iterator[list[Meter]]:
    """Count every botocore call made while inside; the list's last meter gets them (the
    caller appends a fresh meter to start a new count)."""
    from botocore.client import BaseClient

    meters = [Meter()]
    original = getattr(BaseClient, "_make_request")  # noqa: B009 (a private hook, patched)

    def counted(self: Any, operation_model: Any, request_dict: dict[str, Any], request_context: Any) -> Any:
        response = original(self, operation_model, request_dict, request_context)
        meter = meters[-1]
        meter.calls[(operation_model.service_model.service_name, operation_model.name)] += 1
        parsed = response[1] if isinstance(response, tuple) else {}
        if operation_model.name in READ_OPERATIONS:
            if "Items" in parsed:
                meter.items_read += len(parsed["Items"])
            elif "Item" in parsed:
                meter.items_read += 1
            elif "Responses" in parsed:
                meter.items_read += sum(len(v) for v in parsed["Responses"].values())
        return response

    setattr(BaseClient, "_make_request", counted)  # noqa: B010
    try:
        yield meters
    finally:
        setattr(BaseClient, "_make_request", original)  # noqa: B010


@contextmanager
def control_plane(settings_config: dict[str, Any], now: float) -> Iterator[Any]:
    """A control plane on fresh moto tables (workflow starts recorded by moto, not run)."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
        "POWERTOOLS_TRACE_DISABLED": "true",
        "POWERTOOLS_LOG_LEVEL": "ERROR",
    }.items():
        os.environ[name] = value
    os.environ.pop("AWS_ENDPOINT_URL", None)
    import logging

    logging.getLogger("spotline").setLevel(logging.ERROR)
    from moto import mock_aws

    from spotline.aws.clients import AwsClients
    from spotline.aws.plane import build_control_plane
    from spotline.control.settings import Settings
    from spotline.local.provision import create_state_machines, create_tables, environment

    with mock_aws(config={"stepfunctions": {"execute_state_machine": False}}):  # type: ignore[arg-type]
        clients = AwsClients(region=REGION)
        tables = create_tables(clients.client("dynamodb"), prefix="bench")
        clients.client("events").create_event_bus(Name="bench")
        machines = create_state_machines(clients.client("stepfunctions"), prefix="bench")
        settings = Settings.from_env(
            environment(tables, event_bus="bench", state_machines=machines, config=settings_config)
        )
        yield build_control_plane(settings, clients, clock=lambda: now)


def pending_records(count: int, base: float, *, gpu_type: str, gpus: int, one_class: bool) -> list[Any]:
    from spotline.control.records import JobRecord
    from spotline.domain import PRIORITIES_HIGH_FIRST, Job, JobSpec, Priority

    records = []
    for i in range(count):
        priority = Priority.NORMAL if one_class else PRIORITIES_HIGH_FIRST[i % 4]
        deadline = None
        if not one_class and i % 5 == 0:
            deadline = datetime.fromtimestamp(base + 86_400 + i, UTC)
        spec = JobSpec(
            name=f"bench-{i}",
            priority=priority,
            gpus=gpus,
            image="img",
            command=["train"],
            gpu_type=gpu_type,
            deadline=deadline,
        )
        at = base + i
        job = Job(id=f"job-bench-{i:07d}", team="vision", spec=spec, submitted_at=at, enqueued_at=at)
        records.append(JobRecord(job=job, updated_at=at))
    return records


@dataclass
class PassFigures:
    seconds: float
    cpu_seconds: float
    items_read: int
    writes: Counter[str]
    admitted: int = 0
    window: int = 0
    more_work: bool = False


def timed_pass(plane: Any, meters: list[Meter]) -> PassFigures:
    from spotline.control.scheduling import scheduling_pass

    meters.append(Meter())
    started, cpu = time.perf_counter(), time.process_time()
    result = scheduling_pass(plane)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu
    meter = meters[-1]
    return PassFigures(
        seconds,
        cpu_seconds,
        meter.items_read,
        meter.writes(),
        len(result.admitted),
        result.window,
        result.more_work,
    )


def queue_length_rows(sizes: list[int]) -> list[dict[str, Any]]:
    """Measure 1: a pass at each queue length, then a pass that changes nothing."""
    rows = []
    now = 1_800_000_000.0
    for size in sizes:
        with control_plane(config(64), now) as plane, metered() as meters:
            started = time.perf_counter()
            plane.jobs.bulk_load(
                pending_records(size, now - size - 1, gpu_type="h100", gpus=8, one_class=False)
            )
            load_s = time.perf_counter() - started
            first = timed_pass(plane, meters)
            unchanged = timed_pass(plane, meters)
        rows.append({"pending": size, "load_s": load_s, "first": first, "unchanged": unchanged})
    return rows


def backlog_run(backlog: int, *, max_window: int | None) -> dict[str, Any]:
    """Measure 2: `backlog` 1-GPU jobs and as many free GPUs; passes back to back."""
    now = 1_800_000_000.0
    from spotline.control import scheduling

    widest = scheduling.MAX_WINDOW_PER_CLASS
    # The fixed-window run caps the window at the fixed one (the pass's constant, for this run).
    scheduling.MAX_WINDOW_PER_CLASS = widest if max_window is None else max_window
    try:
        return _backlog_run(backlog, now)
    finally:
        scheduling.MAX_WINDOW_PER_CLASS = widest


def _backlog_run(backlog: int, now: float) -> dict[str, Any]:
    with control_plane(config(backlog), now) as plane, metered() as meters:
        plane.jobs.bulk_load(
            pending_records(backlog, now - backlog - 1, gpu_type="a100", gpus=1, one_class=True)
        )
        passes: list[PassFigures] = []
        while True:
            figures = timed_pass(plane, meters)
            passes.append(figures)
            if not figures.admitted or not figures.more_work or len(passes) >= 20:
                break
        from spotline.domain import Priority

        left = len(plane.jobs.queue_head(Priority.NORMAL, backlog))
    admitted = sum(p.admitted for p in passes)
    seconds = sum(p.seconds for p in passes)
    cpu_seconds = sum(p.cpu_seconds for p in passes)
    return {
        "cpu_seconds": cpu_seconds,
        "per_cpu_s": admitted / cpu_seconds if cpu_seconds else 0.0,
        "passes": passes,
        "admitted": admitted,
        "left": left,
        "seconds": seconds,
        "per_s": admitted / seconds if seconds else 0.0,
        # Passes until the backlog was admitted (the last pass may be one that found nothing).
        "passes_to_admit": next(
            (i + 1 for i in range(len(passes)) if sum(p.admitted for p in passes[: i + 1]) >= backlog),
            None,
        ),
    }


def writes_text(writes: Counter[str]) -> str:
    return ", ".join(f"{op} {n}" for op, n in sorted(writes.items())) or "none"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", default="100,1000,10000", help="queue lengths, comma-separated")
    parser.add_argument("--backlog", type=int, default=1000, help="pending jobs and free GPUs")
    parser.add_argument("--skip-fixed", action="store_true", help="leave out the fixed-window run")
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.pending.split(",") if s.strip()]
    except ValueError:
        parser.error("--pending: comma-separated whole numbers")
    if any(s <= 0 for s in sizes) or args.backlog <= 0:
        parser.error("--pending and --backlog must be positive")

    print(
        "scheduling pass by queue length (moto in-process, this process's CPU s and wall s; the jobs"
        " fit no pool, so all wait)"
    )
    print(
        f"  {'pending':>8} | {'1st pass cpu':>12} {'wall':>6} {'items':>6} {'writes':>7}"
        f" | {'unchanged pass cpu':>18} {'wall':>6} {'items':>6} writes"
    )
    for row in queue_length_rows(sizes):
        first, unchanged = row["first"], row["unchanged"]
        print(
            f"  {row['pending']:>8,} | {first.cpu_seconds:>12.2f} {first.seconds:>6.1f}"
            f" {first.items_read:>6,}"
            f" {sum(first.writes.values()):>7,} | {unchanged.cpu_seconds:>18.2f} {unchanged.seconds:>6.1f}"
            f" {unchanged.items_read:>6,} {writes_text(unchanged.writes)}"
        )
        sys.stdout.flush()

    runs = [("window scaled by free GPUs", None)]
    if not args.skip_fixed:
        runs.append((f"fixed window {FIXED_WINDOW} (before)", FIXED_WINDOW))
    print(f"\nfreed cluster: {args.backlog:,} pending 1-GPU jobs (one class), {args.backlog:,} GPUs free")
    for label, max_window in runs:
        run = backlog_run(args.backlog, max_window=max_window)
        per_pass = ", ".join(
            f"{p.admitted} in {p.cpu_seconds:.1f} cpu s / {p.seconds:.1f} wall s (window {p.window})"
            for p in run["passes"]
        )
        print(
            f"  {label}: {run['admitted']:,} admitted, {run['left']:,} left, in"
            f" {run['passes_to_admit'] or '-'} pass(es); {run['per_cpu_s']:.1f} admissions per CPU s,"
            f" {run['per_s']:.1f} per wall s of pass time"
        )
        print(f"    passes: {per_pass}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
