"""What the control plane costs on AWS, counted on the local runtime.

Every request that reaches the emulated AWS is counted by service and operation (a WSGI layer in
front of moto), split between the control plane (this process) and the training agents (the
fleet's processes, tagged with `AWS_SDK_UA_APP_ID`); every Lambda invocation is counted by
function (the handlers run in this process), every Step Functions state entered is read back
from the executions' histories, and the API requests are the bench's own.

It runs in two phases, with the periodic tick and reconciler driven by the bench:
- **idle**: `--idle-runs` scheduler ticks and reconciler runs with no jobs: their cost at
  production's periods (a pass a minute, the reconciler every 5 minutes) is the idle cost;
- **lifecycles**: `--jobs` jobs submitted through the API and run to SUCCEEDED (a short real
  training run that checkpoints). The per-job figure is the control plane's event-driven part;
  the agents' calls grow with run time, not job count, so they are reported per job-hour at
  production's agent poll period.

Prices are AWS's us-east-1 list prices (named below). DynamoDB request units are estimated from
the items each call writes or reads and the mean size of each table's items at the end of the
run (DynamoDB's own size rule), so they are estimates, not metered units.

    .venv/bin/python -m bench.aws_costs [--jobs 20] [--idle-s 30]
"""

from __future__ import annotations

import argparse
import io
import json
import math
import os
import re
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx

# --- AWS list prices, us-east-1 (USD) ----------------------------------------------------------
PRICE_API_GATEWAY_REST_PER_M = 3.50  # REST API requests, first 333 M a month
PRICE_LAMBDA_REQUEST_PER_M = 0.20
PRICE_LAMBDA_GB_S = 0.0000166667  # x86_64
PRICE_SFN_STANDARD_PER_1K_TRANSITIONS = 0.025
PRICE_SFN_EXPRESS_PER_M = 1.00  # Express requests
PRICE_SFN_EXPRESS_GB_S = 0.00001667  # Express duration, first 1,000 h GB a month
EXPRESS_MEMORY_GB = 0.0625
PRICE_DDB_WRU_PER_M = 0.625  # on-demand write request units
PRICE_DDB_RRU_PER_M = 0.125  # on-demand read request units
PRICE_EVENTBRIDGE_CUSTOM_PER_M = 1.00  # custom events put (AWS service events are free)
PRICE_SQS_FIFO_PER_M = 0.50
PRICE_SQS_STANDARD_PER_M = 0.40
# SQS requests per message of a batched event queue: EventBridge's send, and its share of the
# event source mapping's receive and delete of up to 10 messages each (an estimate: AWS bills
# each request of up to 10 messages once).
SQS_BATCHED_REQUESTS_PER_MESSAGE = 1 + 2 / 10
PRICE_S3_PUT_PER_1K = 0.005
PRICE_S3_GET_PER_1K = 0.0004

LAMBDA_MEMORY_GB = 0.5  # every function's memory_mb (resources.FUNCTIONS) is 512
# Assumed latency of one AWS call from Lambda (DynamoDB, EventBridge, Step Functions in-region).
AWS_CALL_S = 0.010
PRODUCTION_TICK_S = 60.0  # the scheduler's periodic tick
PRODUCTION_RECONCILE_S = 300.0
PRODUCTION_AGENT_POLL_S = 5.0  # cdk.json's agent_poll_s default
SECONDS_PER_MONTH = 30 * 24 * 3600

AGENT_APP_ID = "spotline-bench-agent"
CHECKPOINT_INTERVAL_S = 1
PRODUCTION_HEARTBEAT_S = 30.0  # spotline.agent.settings.DEFAULT_HEARTBEAT_S
PRODUCTION_CHECKPOINT_INTERVAL_S = 1800.0  # a checkpoint every 30 minutes, for the per-hour figure


@dataclass
class Meter:
    """Counts of what reached the emulated AWS and the handlers."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    # (caller, service, operation) -> requests
    requests: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    # (caller, table, kind) -> items; kind: write | transact-write | read | read-strong | transact-read
    items: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    # custom events put on a bus, by caller
    events_put: Counter[str] = field(default_factory=Counter)
    invocations: Counter[str] = field(default_factory=Counter)
    # messages that reached the scheduler's FIFO queue (from rules or from the control plane)
    scheduler_messages: Counter[str] = field(default_factory=Counter)
    # messages that reached an event queue (resources.EVENT_QUEUES: the heartbeats'), by function
    queue_messages: Counter[str] = field(default_factory=Counter)
    invocation_s: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))

    def snapshot(self) -> Meter:
        with self.lock:
            copy = Meter()
            copy.requests = Counter(self.requests)
            copy.items = Counter(self.items)
            copy.events_put = Counter(self.events_put)
            copy.invocations = Counter(self.invocations)
            copy.scheduler_messages = Counter(self.scheduler_messages)
            copy.queue_messages = Counter(self.queue_messages)
            copy.invocation_s = defaultdict(float, self.invocation_s)
            return copy

    def minus(self, other: Meter, scale: float = 1.0) -> Meter:
        """This meter less `other` times `scale` (never below 0)."""
        out = Meter()

        def sub(a: Counter[Any], b: Counter[Any]) -> Counter[Any]:
            return Counter({k: max(0.0, v - scale * b.get(k, 0)) for k, v in a.items()})

        out.requests = sub(self.requests, other.requests)
        out.items = sub(self.items, other.items)
        out.events_put = sub(self.events_put, other.events_put)
        out.invocations = sub(self.invocations, other.invocations)
        out.scheduler_messages = sub(self.scheduler_messages, other.scheduler_messages)
        out.queue_messages = sub(self.queue_messages, other.queue_messages)
        out.invocation_s = defaultdict(
            float,
            {k: max(0.0, v - scale * other.invocation_s.get(k, 0.0)) for k, v in self.invocation_s.items()},
        )
        return out

    def only(self, keep: Any) -> Meter:
        """What the callers for which `keep(caller)` is true sent (the handlers' invocations go
        with the `fn:<module>` callers kept)."""
        out = Meter()
        out.requests = Counter({k: v for k, v in self.requests.items() if keep(k[0])})
        out.items = Counter({k: v for k, v in self.items.items() if keep(k[0])})
        out.events_put = Counter({k: v for k, v in self.events_put.items() if keep(k)})
        out.invocations = Counter({k: v for k, v in self.invocations.items() if keep(f"fn:{k}")})
        out.invocation_s = defaultdict(float, {k: v for k, v in self.invocation_s.items() if keep(f"fn:{k}")})
        if keep("fn:scheduler"):
            out.scheduler_messages = Counter(self.scheduler_messages)
        out.queue_messages = Counter({k: v for k, v in self.queue_messages.items() if keep(f"fn:{k}")})
        return out


# Handlers whose invocations come from the agents' heartbeats and checkpoints: they grow with a
# job's run time (and its checkpoint interval), not with the number of jobs.
RUN_TIME_DRIVEN = frozenset({"fn:heartbeat", "fn:checkpoint_completed"})


def per_job_part(caller: str) -> bool:
    return caller != "agent" and caller not in RUN_TIME_DRIVEN


def run_time_part(caller: str) -> bool:
    return caller == "agent" or caller in RUN_TIME_DRIVEN


def is_handler(caller: str) -> bool:
    return caller.startswith("fn:")


_CREDENTIAL_SCOPE = re.compile(r"Credential=[^/]+/\d+/[^/]+/([^/]+)/aws4_request")


def classify(environ: dict[str, Any], body: bytes) -> tuple[str, str]:
    """(service, operation) of one SDK request."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    scope = _CREDENTIAL_SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
    service = scope.group(1) if scope else "unknown"
    if target:
        return service, target.rsplit(".", 1)[-1]
    if service == "s3":
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/").strip("/")
        if "/" not in path:
            return service, "ListObjects" if method == "GET" else f"{method}Bucket"
        return service, {
            "PUT": "PutObject",
            "GET": "GetObject",
            "HEAD": "HeadObject",
            "DELETE": "DeleteObject",
        }.get(method, method)
    action = parse_qs(body.decode("utf-8", "replace")).get("Action", [""])[0]
    if action:
        return service, action
    return service, f"{environ.get('REQUEST_METHOD', '')} {environ.get('PATH_INFO', '')}"


def count_items(
    meter: Meter, caller: str, operation: str, request: dict[str, Any], response: dict[str, Any]
) -> None:
    """The DynamoDB items one call writes or reads, by table and kind."""
    items = meter.items
    table = str(request.get("TableName", ""))
    if operation in ("PutItem", "UpdateItem", "DeleteItem"):
        items[(caller, table, "write")] += 1
    elif operation == "TransactWriteItems":
        for entry in request.get("TransactItems", []):
            for kind, spec in entry.items():
                if kind != "ConditionCheck":
                    items[(caller, spec.get("TableName", ""), "transact-write")] += 1
                else:  # a condition check is read at the transactional rate
                    items[(caller, spec.get("TableName", ""), "transact-read")] += 1
    elif operation == "BatchWriteItem":
        for name, writes in request.get("RequestItems", {}).items():
            items[(caller, name, "write")] += len(writes)
    elif operation == "GetItem":
        kind = "read-strong" if request.get("ConsistentRead") else "read"
        items[(caller, table, kind)] += 1 if response.get("Item") else 0
    elif operation == "BatchGetItem":
        for name, spec in request.get("RequestItems", {}).items():
            kind = "read-strong" if spec.get("ConsistentRead") else "read"
            items[(caller, name, kind)] += len(response.get("Responses", {}).get(name, []))
    elif operation == "TransactGetItems":
        for entry in request.get("TransactItems", []):
            items[(caller, entry.get("Get", {}).get("TableName", ""), "transact-read")] += 1
    elif operation in ("Query", "Scan"):
        kind = "read-strong" if request.get("ConsistentRead") else "read"
        # Query bills the items it evaluates; Count is what it returned, ScannedCount what it read.
        items[(caller, table, kind)] += int(response.get("ScannedCount", response.get("Count", 0)))


_current = threading.local()  # .module: the handler this thread is running


def caller_of(environ: dict[str, Any]) -> str:
    """Who sent a request: a training agent, a handler (by function), or the runtime itself."""
    if AGENT_APP_ID in environ.get("HTTP_USER_AGENT", ""):
        return "agent"
    module = environ.get("HTTP_X_SPOTLINE_FUNCTION")
    return f"fn:{module}" if module else "control"


def metered(app: Any, meter: Meter) -> Any:
    """`app` with every request counted into `meter`."""

    def serve(environ: dict[str, Any], start_response: Any) -> Any:
        length = int(environ.get("CONTENT_LENGTH") or 0)
        body = environ["wsgi.input"].read(length) if length else b""
        environ["wsgi.input"] = io.BytesIO(body)
        caller = caller_of(environ)
        service, operation = classify(environ, body)
        result = app(environ, start_response)
        out = b"".join(result)
        close = getattr(result, "close", None)
        if close is not None:
            close()
        with meter.lock:
            meter.requests[(caller, service, operation)] += 1
            try:
                if service == "dynamodb":
                    count_items(meter, caller, operation, json.loads(body or b"{}"), json.loads(out or b"{}"))
                elif service == "events" and operation == "PutEvents":
                    meter.events_put[caller] += len(json.loads(body or b"{}").get("Entries", []))
            except ValueError:
                pass
        return [out]

    return serve


def install_meter(meter: Meter) -> None:
    """Count every emulated request and every handler invocation of this process."""
    from spotline.local import lambdas, moto_server

    serialized = moto_server.serialized
    moto_server.serialized = lambda app: serialized(metered(app, meter))
    import_handler = lambdas.import_handler

    def counted_import(function: Any) -> Any:
        invoke = import_handler(function)

        def run(event: dict[str, Any], context: Any) -> Any:
            outer = getattr(_current, "module", None)
            _current.module = function.module
            started = time.thread_time()
            try:
                return invoke(event, context)
            finally:
                _current.module = outer
                with meter.lock:
                    meter.invocations[function.module] += 1
                    meter.invocation_s[function.module] += time.thread_time() - started

        return run

    lambdas.import_handler = counted_import

    from botocore.client import BaseClient

    make_request = getattr(BaseClient, "_make_request")  # noqa: B009 (a private hook, patched)

    def tagged(self: Any, operation_model: Any, request_dict: dict[str, Any], request_context: Any) -> Any:
        module = getattr(_current, "module", None)
        if module:
            request_dict.setdefault("headers", {})["X-Spotline-Function"] = module
        return make_request(self, operation_model, request_dict, request_context)

    setattr(BaseClient, "_make_request", tagged)  # noqa: B010

    from spotline import resources as r
    from spotline.local.router import Router

    deliver = Router._deliver

    def counted_deliver(
        self: Router, url: str, target: str, messages: list[dict[str, Any]], event: Any
    ) -> None:
        if target == r.SCHEDULER_QUEUE:
            with meter.lock:
                meter.scheduler_messages["scheduler"] += len(messages)
        elif (queue := r.event_queue(target)) is not None:
            with meter.lock:
                meter.queue_messages[queue.function] += len(messages)
        deliver(self, url, target, messages, event)

    Router._deliver = counted_deliver  # type: ignore[method-assign]


# --- DynamoDB item sizes ---------------------------------------------------------------------


def attribute_size(value: dict[str, Any]) -> int:
    """DynamoDB's size of one attribute value (wire form)."""
    ((kind, inner),) = value.items()
    if kind in ("S", "B"):
        return len(str(inner).encode())
    if kind == "N":
        return len(str(inner).lstrip("-").replace(".", "").lstrip("0")) // 2 + 2
    if kind in ("BOOL", "NULL"):
        return 1
    if kind in ("SS", "NS", "BS"):
        return sum(len(str(x).encode()) for x in inner)
    if kind == "L":
        return 3 + sum(1 + attribute_size(x) for x in inner)
    if kind == "M":
        return 3 + sum(len(k.encode()) + 1 + attribute_size(v) for k, v in inner.items())
    return 0


def mean_item_kb(dynamodb: Any, table: str) -> float:
    sizes = []
    for page in dynamodb.get_paginator("scan").paginate(TableName=table):
        for item in page["Items"]:
            sizes.append(sum(len(k.encode()) + attribute_size(v) for k, v in item.items()))
    return (sum(sizes) / len(sizes) / 1024) if sizes else 1.0


def request_units(meter: Meter, sizes_kb: dict[str, float]) -> tuple[float, float]:
    """(write request units, read request units), estimated from item counts and mean sizes."""
    wru = rru = 0.0
    for (_, table, kind), count in meter.items.items():
        kb = sizes_kb.get(table, 1.0)
        if kind == "write":
            wru += count * math.ceil(kb)
        elif kind == "transact-write":
            wru += 2 * count * math.ceil(kb)
        elif kind == "read":
            rru += 0.5 * count * math.ceil(kb / 4)
        elif kind == "read-strong":
            rru += count * math.ceil(kb / 4)
        elif kind == "transact-read":
            rru += 2 * count * math.ceil(kb / 4)
    return wru, rru


def dollars(
    meter: Meter, sizes_kb: dict[str, float], workflows: Workflows | None, api_requests: float
) -> dict[str, float]:
    """Dollars by service for what `meter` counted (and the given workflows and API calls)."""
    wru, rru = request_units(meter, sizes_kb)
    invocations = sum(meter.invocations.values())
    # Billed duration: the handler's CPU time here plus AWS_CALL_S for each AWS call it made
    # (its wait on the network in AWS; the local emulation's waits are not AWS's).
    calls = sum(n for (caller, _, _), n in meter.requests.items() if caller.startswith("fn:"))
    gb_s = LAMBDA_MEMORY_GB * (sum(meter.invocation_s.values()) + AWS_CALL_S * calls)
    s3_puts = sum(
        n for (_, s, op), n in meter.requests.items() if s == "s3" and op in ("PutObject", "ListObjects")
    )
    s3_gets = sum(
        n for (_, s, op), n in meter.requests.items() if s == "s3" and op in ("GetObject", "HeadObject")
    )
    return {
        "api_gateway": api_requests * PRICE_API_GATEWAY_REST_PER_M / 1e6,
        "lambda": invocations * PRICE_LAMBDA_REQUEST_PER_M / 1e6 + gb_s * PRICE_LAMBDA_GB_S,
        "step_functions": workflows.dollars() if workflows is not None else 0.0,
        "dynamodb": wru * PRICE_DDB_WRU_PER_M / 1e6 + rru * PRICE_DDB_RRU_PER_M / 1e6,
        "eventbridge": sum(meter.events_put.values()) * PRICE_EVENTBRIDGE_CUSTOM_PER_M / 1e6,
        # On AWS the scheduler's queue and the event queues are real (the other rules invoke their
        # functions): a scheduler message is sent, received and deleted; an event-queue message is
        # sent, and received and deleted in batches (SQS_BATCHED_REQUESTS_PER_MESSAGE). The local
        # router's polls of its stand-in rule queues are not AWS's, so SQS calls are not read from
        # the request counts.
        "sqs": 3 * sum(meter.scheduler_messages.values()) * PRICE_SQS_FIFO_PER_M / 1e6
        + sum(meter.queue_messages.values())
        * SQS_BATCHED_REQUESTS_PER_MESSAGE
        * PRICE_SQS_STANDARD_PER_M
        / 1e6,
        "s3": s3_puts * PRICE_S3_PUT_PER_1K / 1e3 + s3_gets * PRICE_S3_GET_PER_1K / 1e3,
    }


@dataclass
class Workflows:
    """What the workflows' executions bill: Standard by state transition, Express by execution
    and duration (64 MB, the smallest memory step Express bills)."""

    standard_transitions: int = 0
    express_executions: int = 0
    express_s: float = 0.0

    def dollars(self) -> float:
        return (
            self.standard_transitions * PRICE_SFN_STANDARD_PER_1K_TRANSITIONS / 1e3
            + self.express_executions * PRICE_SFN_EXPRESS_PER_M / 1e6
            + self.express_s * EXPRESS_MEMORY_GB * PRICE_SFN_EXPRESS_GB_S
        )


def workflow_usage(sfn: Any) -> Workflows:
    """Every execution of every state machine, read back from the emulated Step Functions."""
    usage = Workflows()
    for machine in sfn.list_state_machines()["stateMachines"]:
        express = sfn.describe_state_machine(stateMachineArn=machine["stateMachineArn"])["type"] == "EXPRESS"
        for page in sfn.get_paginator("list_executions").paginate(stateMachineArn=machine["stateMachineArn"]):
            for execution in page["executions"]:
                if express:
                    usage.express_executions += 1
                    stop = execution.get("stopDate")
                    if stop is not None:
                        # Wall time on the local runtime, where every task waits on the shared
                        # emulation: an upper bound of AWS's duration.
                        usage.express_s += (stop - execution["startDate"]).total_seconds()
                    continue
                history = sfn.get_execution_history(executionArn=execution["executionArn"], maxResults=1000)
                usage.standard_transitions += sum(
                    1 for e in history["events"] if e["type"].endswith("StateEntered")
                )
    return usage


# --- the run ---------------------------------------------------------------------------------


def run(jobs: int, idle_runs: int) -> dict[str, Any]:
    from spotline.local.runtime import LocalConfig, LocalControlPlane

    meter = Meter()
    install_meter(meter)
    # The periodic tick and reconciler are driven by the bench (an hour apart otherwise), so the
    # idle figures are per run and the lifecycles' figures hold no periodic work.
    config = LocalConfig(
        state_dir=Path(tempfile.mkdtemp(prefix="spotline-costs-")), tick_s=3600.0, reconcile_s=3600.0
    )
    local = LocalControlPlane(config)
    info = local.start()
    try:
        fleet: Any = local.fleet
        fleet._base_env["AWS_SDK_UA_APP_ID"] = AGENT_APP_ID
        endpoint = info["aws_endpoint_url"]
        sfn = local.aws.client("stepfunctions")  # type: ignore[union-attr]
        dynamodb = local.aws.client("dynamodb")  # type: ignore[union-attr]
        del endpoint
        time.sleep(1.0)
        # Idle: what one scheduler pass (the tick) and one reconciler run cost with no jobs.
        idle_from = meter.snapshot()
        for _ in range(idle_runs):
            invoke_scheduler_tick()
        time.sleep(0.5)
        per_tick = meter.snapshot().minus(idle_from)
        idle_from = meter.snapshot()
        for _ in range(idle_runs):
            local._reconcile()
        per_reconcile = meter.snapshot().minus(idle_from)
        # Lifecycles.
        teams = sorted(info["teams"])
        http = httpx.Client(base_url=info["api_url"], timeout=120)
        body = {
            "priority": "normal",
            "gpus": 1,
            "image": "local",
            "command": ["python", "-m", "spotline.examples.train", "--steps", "40", "--step-time-s", "0.05"],
            "checkpoint_interval_s": CHECKPOINT_INTERVAL_S,
        }
        started = meter.snapshot()
        t0 = time.time()
        ids: list[tuple[str, str]] = []
        for i in range(jobs):
            team = teams[i % len(teams)]
            response = http.post(
                "/jobs", json={**body, "name": f"cost-{i}"}, headers=info["teams"][team]["headers"]
            )
            response.raise_for_status()
            ids.append((response.json()["id"], team))
        # Progress is read from the jobs table by this thread (its calls are the runtime's, not
        # a handler's, so they are not counted as the workload's).
        from functions.runtime import control_plane

        jobs_repo = control_plane().jobs
        runtime_s = 0.0
        deadline = time.time() + 900
        for job_id, _ in ids:
            while True:
                record = jobs_repo.get(job_id)
                if record.state.value in ("SUCCEEDED", "FAILED", "CANCELLED"):
                    if record.state.value != "SUCCEEDED":
                        raise RuntimeError(f"{job_id} ended {record.state.value}: {record.state_reason}")
                    runtime_s += record.job.runtime_s
                    break
                if time.time() > deadline:
                    raise RuntimeError(f"{job_id} still {record.state.value} after 15 minutes")
                time.sleep(1.0)
        elapsed = time.time() - t0
        lifecycle = meter.snapshot().minus(started)
        workflows = workflow_usage(sfn)
        sizes = {name: mean_item_kb(dynamodb, name) for name in dynamodb.list_tables()["TableNames"]}
    finally:
        local.stop()
    control = lifecycle.only(per_job_part)
    run_time = lifecycle.only(run_time_part)
    per_job = {k: v / jobs for k, v in dollars(control, sizes, workflows, jobs).items()}
    tick = {k: v / idle_runs for k, v in dollars(per_tick.only(is_handler), sizes, None, 0).items()}
    reconcile = {k: v / idle_runs for k, v in dollars(per_reconcile.only(is_handler), sizes, None, 0).items()}
    run_time_per_s = {k: v / max(runtime_s, 1e-9) for k, v in dollars(run_time, sizes, None, 0).items()}
    return {
        "jobs": jobs,
        "lifecycle_s": round(elapsed, 1),
        "job_runtime_s": round(runtime_s, 1),
        "workflows": {
            "standard_transitions_per_job": workflows.standard_transitions / jobs,
            "express_executions_per_job": workflows.express_executions / jobs,
            "express_s_per_execution": workflows.express_s / max(workflows.express_executions, 1),
        },
        "item_kb": {k: round(v, 2) for k, v in sizes.items()},
        "calls_per_job": {
            f"{service}:{operation}": round(n / jobs, 2)
            for (_, service, operation), n in sorted(control.requests.items())
            if n / jobs >= 0.005
        },
        "invocations_per_job": {k: round(v / jobs, 2) for k, v in sorted(control.invocations.items()) if v},
        "dollars_per_1000_jobs": {k: round(v * 1000, 4) for k, v in per_job.items()},
        "calls_per_tick": {f"{s}:{o}": n / idle_runs for (_, s, o), n in sorted(per_tick.requests.items())},
        "calls_per_reconcile": {
            f"{s}:{o}": n / idle_runs for (_, s, o), n in sorted(per_reconcile.requests.items())
        },
        "dollars_per_tick": tick,
        "dollars_per_reconcile": reconcile,
        "run_time_calls_per_run_s": {
            f"{c}:{s}:{o}": n / max(runtime_s, 1e-9) for (c, s, o), n in sorted(run_time.requests.items())
        },
        "run_time_invocations_per_run_s": {
            k: v / max(runtime_s, 1e-9) for k, v in sorted(run_time.invocations.items()) if v
        },
        "run_time_dollars_per_run_s_local": run_time_per_s,
        "unit_dollars": unit_costs(lifecycle, sizes),
        "local_agent_poll_s": config.agent_poll_s,
    }


def unit_costs(lifecycle: Meter, sizes: dict[str, float]) -> dict[str, float]:
    """Dollars per heartbeat, per checkpoint and per agent poll: each handler's share, the
    agent's event put, and the agent's own calls for a checkpoint (S3) or a poll (DynamoDB)."""

    def cost(keep: Any) -> float:
        return sum(dollars(lifecycle.only(keep), sizes, None, 0).values())

    # A heartbeat's share of the batches its function handled (not one invocation each).
    heartbeats = lifecycle.queue_messages.get("heartbeat", 0) or 1
    checkpoints = lifecycle.invocations.get("checkpoint_completed", 0) or 1
    agent = lifecycle.only(lambda c: c == "agent")
    reads = Meter()
    reads.items = Counter({k: v for k, v in agent.items.items() if k[2].startswith("read")})
    polls = sum(reads.items.values()) or 1
    s3 = Meter()
    s3.requests = Counter({k: v for k, v in agent.requests.items() if k[1] == "s3"})
    event = PRICE_EVENTBRIDGE_CUSTOM_PER_M / 1e6
    return {
        # (its SQS requests are in the function's cost: Meter.only keeps its queue's messages)
        "heartbeat": cost(lambda c: c == "fn:heartbeat") / heartbeats + event,
        "checkpoint": cost(lambda c: c == "fn:checkpoint_completed") / checkpoints
        + event
        + sum(dollars(s3, sizes, None, 0).values()) / checkpoints,
        "agent_poll": sum(dollars(reads, sizes, None, 0).values()) / polls,
    }


def invoke_scheduler_tick() -> None:
    """One scheduler invocation as the periodic rule makes it (a scheduled event)."""
    from spotline import resources as r
    from spotline.local import lambdas

    scheduler = next(f for f in r.FUNCTIONS if f.name == "scheduler")
    event = {
        "version": "0",
        "id": "tick",
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "detail": {},
    }
    lambdas.import_handler(scheduler)(event, lambdas.LambdaContextStub.for_function("spotline-scheduler"))


# An SQS event source mapping polls its queue with long polls (20 s) from at least 5 pollers, and
# SQS bills each poll: AWS documents the pollers, the count is an estimate, not measured here.
ESM_POLLS_PER_MONTH = 5 * (SECONDS_PER_MONTH / 20)


def production_scaled(figures: dict[str, Any]) -> dict[str, float]:
    """Idle dollars a month at production's periods, and agent dollars per job-hour."""
    from spotline import resources as r

    ticks = SECONDS_PER_MONTH / PRODUCTION_TICK_S
    reconciles = SECONDS_PER_MONTH / PRODUCTION_RECONCILE_S
    idle_month = (
        sum(figures["dollars_per_tick"].values()) * ticks
        + sum(figures["dollars_per_reconcile"].values()) * reconciles
    )
    unit = figures["unit_dollars"]
    agent_hour = (
        unit["heartbeat"] * 3600 / PRODUCTION_HEARTBEAT_S
        + unit["checkpoint"] * 3600 / PRODUCTION_CHECKPOINT_INTERVAL_S
        + unit["agent_poll"] * 3600 / PRODUCTION_AGENT_POLL_S
    )
    return {
        "idle_dollars_per_month": idle_month,
        # The scheduler's FIFO queue and each event queue (the heartbeats') have a mapping polling.
        "queue_polls_per_month_estimate": ESM_POLLS_PER_MONTH
        * (PRICE_SQS_FIFO_PER_M + len(r.EVENT_QUEUES) * PRICE_SQS_STANDARD_PER_M)
        / 1e6,
        "agent_dollars_per_job_hour": agent_hour,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument(
        "--idle-runs", type=int, default=10, help="scheduler ticks and reconciler runs timed idle"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    os.environ.setdefault("POWERTOOLS_LOG_LEVEL", "ERROR")
    figures = run(args.jobs, args.idle_runs)
    figures["production"] = production_scaled(figures)
    total = sum(figures["dollars_per_1000_jobs"].values())
    print(
        f"control plane cost per 1,000 jobs (event-driven part, {args.jobs} lifecycles on the local runtime)"
    )
    for service, value in sorted(figures["dollars_per_1000_jobs"].items(), key=lambda kv: -kv[1]):
        print(f"  {service:16s} ${value:8.4f}")
    print(f"  {'total':16s} ${total:8.4f}   goal <= $0.10: {'met' if total <= 0.10 else 'missed'}")
    flows = figures["workflows"]
    print(
        f"  per job: {flows['standard_transitions_per_job']:.1f} Standard transitions, "
        f"{flows['express_executions_per_job']:.1f} Express executions "
        f"({flows['express_s_per_execution']:.1f} s each, local wall time)"
    )
    print(f"  Lambda invocations per job: {figures['invocations_per_job']}")
    print(
        f"  Lambda duration: the handlers' CPU time here + {AWS_CALL_S * 1000:.0f} ms per AWS call"
        " (an ASSUMED in-region latency, not measured)"
    )
    production = figures["production"]
    idle = production["idle_dollars_per_month"]
    polls = production["queue_polls_per_month_estimate"]
    print(
        f"idle: ${idle:.2f} a month measured (a pass every {PRODUCTION_TICK_S:.0f} s, the reconciler every "
        f"{PRODUCTION_RECONCILE_S:.0f} s) + ${polls:.2f} estimated for the queues' Lambda pollers "
        "(scheduler, heartbeats), "
        f"before CloudWatch, KMS and NAT   goal < $1: {'met' if idle + polls < 1 else 'missed'}"
    )
    print(
        f"running job: ${production['agent_dollars_per_job_hour']:.4f} per job-hour (a heartbeat every "
        f"{PRODUCTION_HEARTBEAT_S:.0f} s, a checkpoint every "
        f"{PRODUCTION_CHECKPOINT_INTERVAL_S / 60:.0f} min, "
        f"the agent's poll every {PRODUCTION_AGENT_POLL_S:.0f} s)"
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
