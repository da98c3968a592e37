"""The local runtime at scale: pending jobs and memory, submissions and server errors, and
admissions per second from a backlog with free capacity.

    .venv/bin/python -m bench.local_runtime                       # 1,000 pending, 200 admitted
    .venv/bin/python -m bench.local_runtime --pending 10000 --admit 0

Everything runs in this process (moto's server, the handlers, the fleet, the API), so the
resident set size is the local runtime's memory. Submissions go through the HTTP API from
`--clients` threads. Admissions: the scheduler is held while the backlog is submitted (its
handler's invocation lock), then let go; the rate is the backlog over the time from the release
until no job is PENDING (its class's queue index read every 0.2 s), and until the fleet has started
every job. moto serves every request, one at a time (`spotline.local.moto_server`), unpatched:
its costs grow with the tables (a query reads every item of its table, a transaction copies the
tables it names), which is what these figures show.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from spotline import resources
from spotline.aws.job_items import QUEUE_PK_PREFIX
from spotline.local import lambdas
from spotline.local.runtime import LocalConfig, LocalControlPlane, LocalPool


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def submit_all(
    info: dict[str, Any], n: int, clients: int, body: dict[str, Any]
) -> tuple[list[str], Counter[int], float]:
    """Submit `n` jobs (two teams, alternately) from `clients` threads: ids, statuses, seconds."""
    teams = sorted(info["teams"])
    local = threading.local()

    def one(i: int) -> tuple[int, str]:
        if not hasattr(local, "http"):
            local.http = httpx.Client(base_url=info["api_url"], timeout=600)
        headers = info["teams"][teams[i % 2]]["headers"]
        try:
            response = local.http.post("/jobs", json={**body, "name": f"b{i}"}, headers=headers)
        except httpx.HTTPError:
            return -1, ""
        return response.status_code, response.json().get("id", "") if response.status_code < 300 else ""

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(one, range(n)))
    elapsed = time.perf_counter() - started
    return [job_id for _, job_id in results if job_id], Counter(status for status, _ in results), elapsed


def pending(n: int, clients: int) -> dict[str, Any]:
    """`n` jobs pending on the default cluster (12 GPUs, 3 of these 4-GPU jobs running)."""
    state = Path(tempfile.mkdtemp(prefix="spotline-bench-"))
    local = LocalControlPlane(LocalConfig(state_dir=state))
    info = local.start()
    try:
        before = rss_mb()
        cpu0 = time.process_time()
        body = {"priority": "low", "gpus": 4, "image": "x", "command": ["sleep", "3600"]}
        ids, statuses, elapsed = submit_all(info, n, clients, body)
        cpu = time.process_time() - cpu0
        time.sleep(2 * local.config.tick_s)  # a pass or two over the full backlog
        return {
            "submitted": n,
            "created": len(ids),
            "statuses": dict(statuses),
            "server_errors": sum(c for s, c in statuses.items() if s >= 500 or s < 0),
            "submit_s": round(elapsed, 1),
            "submissions_per_s": round(n / elapsed, 1),
            "cpu_s_per_submission": round(cpu / n, 4),
            "rss_mb_start": round(before),
            "rss_mb_pending": round(rss_mb()),
        }
    finally:
        local.stop()


def admissions(n: int, clients: int) -> dict[str, Any]:
    """A backlog of `n` one-GPU jobs, submitted while the scheduler is held, then admitted with
    capacity for all of them."""
    nodes = max(1, -(-n // 8))
    config = LocalConfig(
        state_dir=Path(tempfile.mkdtemp(prefix="spotline-bench-")),
        pools=(LocalPool("bench", "a100", "on-demand", nodes=nodes, gpus_per_node=8),),
        team_nominal_gpus=n,
    )
    local = LocalControlPlane(config)
    info = local.start()
    held = lambdas.invocation_lock("scheduler")
    try:
        body = {"priority": "normal", "gpus": 1, "image": "x", "command": ["sleep", "600"]}
        with held:
            ids, statuses, _ = submit_all(info, n, clients, body)
            released = time.time()
        deadline = time.time() + 1800
        # Admitted: the pending queue of the backlog's class is empty (polled every 0.2 s, one
        # Query of its index with Limit 1, as the pass reads the queue's head). Through the API
        # (GET /jobs?state=PENDING for each team) the poll itself took a twelfth of the CPU.
        jobs_table = os.environ[resources.ENV_JOBS_TABLE]
        assert local.aws is not None
        dynamodb = local.aws.client("dynamodb")

        def still_pending() -> bool:
            page = dynamodb.query(
                TableName=jobs_table,
                IndexName="queue",
                KeyConditionExpression="queue_pk = :q",
                ExpressionAttributeValues={":q": {"S": QUEUE_PK_PREFIX + body["priority"]}},
                Limit=1,
            )
            return bool(page["Items"])

        while still_pending():
            if time.time() > deadline:
                raise RuntimeError("backlog not admitted in 30 minutes")
            time.sleep(0.2)
        admitted = time.time() - released
        # Launched: every job's process started by the fleet (Batch RUNNING).
        assert local.fleet is not None
        while sum(1 for j in list(local.fleet.jobs.values()) if j.started_at is not None) < len(ids):
            if time.time() > deadline:
                raise RuntimeError("backlog not launched in 30 minutes")
            time.sleep(0.2)
        launched = max(j.started_at or 0 for j in list(local.fleet.jobs.values())) / 1000 - released
        return {
            "backlog": n,
            "statuses": dict(statuses),
            "seconds_to_admit_all": round(admitted, 2),
            "admissions_per_s": round(len(ids) / admitted, 1),
            "seconds_to_launch_all": round(launched, 2),
            "launches_per_s": round(len(ids) / launched, 1),
        }
    finally:
        local.stop()


def _count(text: str) -> int:
    """A flag's count: a whole number, 0 or more (argparse names the flag when it is not)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pending", type=_count, default=1000, help="jobs submitted and left pending")
    parser.add_argument("--admit", type=_count, default=200, help="backlog admitted with free capacity")
    parser.add_argument("--clients", type=_count, default=16, help="concurrent API clients")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.clients < 1:
        parser.error("argument --clients: at least 1 client submits")
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    figures: dict[str, Any] = {"server": "moto, one request at a time, over HTTP"}
    if args.pending:
        figures["pending"] = pending(args.pending, args.clients)
        print(json.dumps({"pending": figures["pending"]}), flush=True)
    if args.admit:
        figures["admissions"] = admissions(args.admit, args.clients)
        print(json.dumps({"admissions": figures["admissions"]}), flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
