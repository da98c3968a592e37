"""A stateful property test of the whole control plane on moto (hypothesis `RuleBasedStateMachine`).

The machine drives the control functions and workflow tasks directly, as the other integration
tests do (moto's Step Functions and Batch are not executed): a fake Batch keeps the world's live
runs (which job, which instance, which step), a fake Step Functions keeps each started
execution and the machine runs its tasks step by step (as the ASL would: retries, backoff, task
tokens, timeouts), and every event (Batch state changes, heartbeats, checkpoints) goes through a
delivery queue from which the rules deliver in any order, and deliver again.

Rules: submit, cancel, priority change, a scheduling pass and two interleaved ones (and one that
reads writes made after its clock), launch and
preempt workflow steps (a task run twice included), Batch RUNNING / SUCCEEDED / FAILED /
host-loss for current and earlier runs, heartbeats and checkpoints (a new run resumes from the
latest checkpoint, so its step goes back), Spot warnings (unknown instances, an instance running
two jobs, a job being preempted), duplicate and reordered deliveries, time passing with the
reconciler, SubmitJob and TerminateJob throttling, and SubmitJob failing.

Invariants after every step:
- the ledger equals the GPUs the active jobs hold, per pool and per team;
- no pool counter above its capacity; no team above nominal + borrowing limit, and right after
  every admission no team borrows more than the cohort lends (`quota_shortfall`);
- every job is in one state, reached through legal transitions only (its timeline chains);
- every job's timeline is monotonic: no entry stamped before the one it follows, even when a
  pass read its clock before the writes it then reads; each entry has a kind, and says
  spot-warning only in a run on an instance a Spot warning was sent for;
- no job lost; a finished job never changes; no healthy run is killed;
- at most one live Batch run per job, and every live run belongs to its job's current admission.

CI runs `EXAMPLES x STEPS` (derandomized, so every run is the same); a long run:
    SPOTLINE_STATEFUL_EXAMPLES=2000 SPOTLINE_STATEFUL_STEPS=80 \\
        .venv/bin/pytest tests/integration/test_stateful_control_plane.py -q
(random seeds then; a failure prints the shortest sequence of rules that breaks an invariant).
"""

from __future__ import annotations

import inspect
import itertools
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from moto import mock_aws

from spotline import resources
from spotline.aws import batch as batch_module
from spotline.aws.clients import AwsClients
from spotline.aws.job_items import item_to_record
from spotline.aws.plane import build_control_plane
from spotline.control import events as control_events
from spotline.control import scheduling
from spotline.control.errors import (
    BatchThrottled,
    CapacityExhausted,
    ConditionFailed,
    LaunchFailed,
    StaleJobError,
    StorageUnavailable,
)
from spotline.control.jobs import JobChanges, cancel_job, submit_job, update_job
from spotline.control.plane import ControlPlane
from spotline.control.ports import BatchJobRequest
from spotline.control.reconciler import reconcile
from spotline.control.records import ACTIVE_STATES, JobRecord
from spotline.control.settings import Settings
from spotline.control.workflow_tasks import (
    CheckpointAlreadyDurable,
    JobNotCheckpointing,
    confirm_checkpointing,
    finish_preemption,
    mark_launch_failed,
    record_batch_job,
    request_checkpoint,
    submit_batch_job,
    terminate_batch_job,
)
from spotline.domain import JobState, Priority
from spotline.domain.models import TERMINAL_STATES, can_transition
from spotline.domain.quota import quota_shortfall
from spotline.local.provision import create_tables, environment

from .helpers import ACCOUNT, REGION

EXAMPLES = int(os.environ.get("SPOTLINE_STATEFUL_EXAMPLES", "40"))
STEPS = int(os.environ.get("SPOTLINE_STATEFUL_STEPS", "60"))
LONG_RUN = "SPOTLINE_STATEFUL_EXAMPLES" in os.environ
# What CI must execute at least, counted (not assumed from the settings).
MIN_STEPS_PER_RUN = 2000

# rel-runs' run identity (RUN_IDENTITY.md): with it, agent events name their run, and the
# faults it fixes (a SubmitJob retried after it succeeded, TerminateJob throttled) are in play.
RUN_IDENTITY = hasattr(batch_module, "run_id_for")

START = 1_700_000_000.0
SPOT, ON_DEMAND = "a100-spot", "a100-on-demand"
NODES = {
    SPOT: ("i-0spot00000000001", "i-0spot00000000002", "i-0spot00000000003"),
    ON_DEMAND: ("i-0odem00000000001",),
}
UNKNOWN_INSTANCE = "i-0unknown00000001"
GPUS_PER_NODE = 8
TEAMS = ("nlp", "vision", "audio")

CONFIG: dict[str, Any] = {
    "pools": [
        {
            "name": SPOT,
            "gpu_type": "a100",
            "purchase": "spot",
            "capacity_gpus": 24,
            "gpus_per_node": GPUS_PER_NODE,
            "price": 0.35,
            "interruption_rate_per_hour": 0.05,
            "job_queue": f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/spotline-{SPOT}",
        },
        {
            "name": ON_DEMAND,
            "gpu_type": "a100",
            "purchase": "on-demand",
            "capacity_gpus": 8,
            "gpus_per_node": GPUS_PER_NODE,
            "job_queue": f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/spotline-{ON_DEMAND}",
        },
    ],
    "job_definition": f"arn:aws:batch:{REGION}:{ACCOUNT}:job-definition/spotline-training:1",
    # 32 GPUs, 24 of them in quotas: a team may borrow past its nominal quota while the pools
    # have room, so the quota (not the capacity) is what stops it. nlp borrows without a limit;
    # vision lends at most 4; audio borrows at most 4.
    "teams": [
        {"team": "nlp", "nominal_gpus": 8},
        {"team": "vision", "nominal_gpus": 8, "lending_limit_gpus": 4},
        {"team": "audio", "nominal_gpus": 8, "borrowing_limit_gpus": 4},
    ],
    "scheduler": {"protection_period_s": 0, "preemption_delay_s": 0},
    "grace_period_s": 60,
    "spot_notice_s": 120,
    "spot_notice_margin_s": 10,
    "heartbeat_timeout_s": 300,
    "start_timeout_s": 900,
    "seed": 11,
}
# The launch workflow's SubmitBatchJob retries BatchThrottled 6 times (statemachines/launch.asl.json),
# TerminateBatchJob 6 times (preempt.asl.json).
SUBMIT_ATTEMPTS = 7
TERMINATE_ATTEMPTS = 7


class Violation(AssertionError):
    pass


# --- the world: Batch, its instances, the agents ----------------------------------------------


@dataclass
class Run:
    """One Batch job in the world."""

    batch_id: str
    name: str
    job_id: str
    pool: str
    gpus: int
    status: str = "SUBMITTED"  # SUBMITTED -> RUNNING -> SUCCEEDED | FAILED
    instance: str | None = None
    step: int = 0
    heartbeats_delivered: list[float] = field(default_factory=list)

    @property
    def live(self) -> bool:
        return self.status in ("SUBMITTED", "RUNNING")


@dataclass
class World:
    now: float = START
    runs: dict[str, Run] = field(default_factory=dict)
    # The latest durable checkpoint of each job (its checkpoint store): a new run resumes there.
    stored_step: dict[str, int] = field(default_factory=dict)
    reclaim_at: dict[str, float] = field(default_factory=dict)  # instance -> when EC2 takes it
    throttle_submits: int = 0
    throttle_terminates: int = 0
    fail_submits: int = 0
    ids: Iterator[int] = field(default_factory=itertools.count)
    kills: list[tuple[str, str]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    queue: list[dict[str, Any]] = field(default_factory=list)  # events not yet delivered
    delivered: list[dict[str, Any]] = field(default_factory=list)  # for redelivery

    def live_runs(self, job_id: str | None = None) -> list[Run]:
        return [r for r in self.runs.values() if r.live and (job_id is None or r.job_id == job_id)]

    def free_gpus(self, instance: str) -> int:
        return GPUS_PER_NODE - sum(r.gpus for r in self.runs.values() if r.live and r.instance == instance)

    def emit(self, kind: str, run: Run, **fields: Any) -> None:
        run_fields = {"batch_id": run.batch_id, "name": run.name, "job_id": run.job_id, "pool": run.pool}
        self.queue.append({"kind": kind, **run_fields, **fields})


class FakeBatch:
    """A BatchLauncher over the world: SubmitJob creates a run, TerminateJob stops it (Batch
    reports FAILED with the reason given); either may be throttled."""

    def __init__(self, world: World, machine: ControlPlaneMachine) -> None:
        self.world = world
        self.machine = machine

    def submit(self, request: BatchJobRequest) -> str:
        world = self.world
        if world.throttle_submits:
            world.throttle_submits -= 1
            raise BatchThrottled("Too Many Requests (SubmitJob)")
        if world.fail_submits:
            world.fail_submits -= 1
            raise LaunchFailed("CLIENT_ERROR: job definition not found")
        batch_id = f"batch-{next(world.ids):05d}"
        pool = next(p["name"] for p in CONFIG["pools"] if p["job_queue"] == request.job_queue)
        gpus = request.gpus_per_node * request.nodes
        # The agent resumes from the job's latest durable checkpoint
        step = world.stored_step.get(request.job_id, 0)
        world.runs[batch_id] = Run(batch_id, request.job_name, request.job_id, pool, gpus, step=step)
        return batch_id

    def terminate(self, batch_job_id: str, reason: str) -> None:
        world = self.world
        if world.throttle_terminates:
            world.throttle_terminates -= 1
            raise BatchThrottled("Too Many Requests (TerminateJob)")
        run = world.runs.get(batch_job_id)
        if run is None or not run.live:
            return
        self.machine.check_kill(run, reason)
        run.status = "FAILED"
        world.kills.append((batch_job_id, reason))
        world.emit("batch", run, status="FAILED", reason=reason)

    def find_live(self, job_queue: str, job_name: str) -> list[str]:
        """ListJobs by name in a queue, the live ones (RUN_IDENTITY's idempotent submit)."""
        queue = {p["name"]: p["job_queue"] for p in CONFIG["pools"]}
        return [
            r.batch_id
            for r in sorted(self.world.runs.values(), key=lambda r: r.batch_id)
            if r.live and r.name == job_name and queue[r.pool] == job_queue
        ]

    def stopped(self, batch_job_ids: Sequence[str]) -> set[str]:
        return {b for b in batch_job_ids if b not in self.world.runs or not self.world.runs[b].live}


@dataclass
class Execution:
    machine: str  # "launch" | "preempt"
    name: str
    payload: dict[str, Any]
    stage: str = "start"
    attempts: int = 0
    timeout_s: int = 1
    batch_job_id: str | None = None
    wait_started: float = 0.0
    token: str = ""

    @property
    def done(self) -> bool:
        return self.stage in ("done", "failed")


class FakeStepFunctions:
    """WorkflowStarter + TaskTokens: executions by name (a second start of a name is the same
    execution, as Standard workflows are), tokens answered at most once."""

    def __init__(self) -> None:
        self.executions: dict[str, Execution] = {}
        self.answered: set[str] = set()
        self.waiting: set[str] = set()

    def start(self, state_machine_arn: str, name: str, payload: Mapping[str, Any]) -> str:
        if name not in self.executions:
            kind = "launch" if state_machine_arn.endswith(":launch") else "preempt"
            self.executions[name] = Execution(kind, name, dict(payload))
        return f"{state_machine_arn}:{name}"

    def succeed(self, token: str, output: Mapping[str, Any]) -> bool:
        if token not in self.waiting or token in self.answered:
            return False
        self.answered.add(token)
        return True

    def fail(self, token: str, error: str, cause: str) -> bool:
        return self.succeed(token, {})


class NullTrigger:
    def request(self, reason: str, dedup_key: str) -> None:
        pass


class NullSink:
    def put(self, source: str, detail_type: str, details: Sequence[Mapping[str, Any]]) -> None:
        pass


class WorldResolver:
    """Container instance ARN -> instance id: the world names container instances after them."""

    def resolve(self, container_instances: Sequence[str]) -> list[str]:
        names = (c.rsplit("/", 1)[-1] for c in container_instances)
        return sorted({name for name in names if name.startswith("i-")})


def host_lost(instance: str | None) -> str:
    """Batch's statusReason when EC2 took the instance (a Spot reclaim)."""
    return f"Host EC2 (instance {instance}) terminated."


def container_arn(pool: str, instance: str) -> str:
    return f"arn:aws:ecs:{REGION}:{ACCOUNT}:container-instance/spotline-{pool}/{instance}"


# --- calling the control plane as the handlers do ------------------------------------------------

_HEARTBEAT_TAKES_RUN = "run_id" in inspect.signature(control_events.record_heartbeat).parameters
_CHECKPOINT_TAKES_RUN = "run_id" in inspect.signature(control_events.record_checkpoint).parameters


def deliver(cp: ControlPlane, event: Mapping[str, Any]) -> None:
    kind = event["kind"]
    if kind == "batch":
        change = control_events.BatchJobChange(
            batch_job_id=event["batch_id"],
            job_name=event["name"],
            status=event["status"],
            status_reason=event.get("reason", ""),
            started_at=event.get("started_at"),
            container_instances=tuple(event.get("containers", ())),
            **_queue(event),
        )
        control_events.handle_batch_job_change(cp, change)
    elif kind == "heartbeat":
        extra = {"run_id": event["name"]} if _HEARTBEAT_TAKES_RUN else {}
        control_events.record_heartbeat(
            cp, event["job_id"], step=event["step"], instance_id=event.get("instance"), **extra
        )
    elif kind == "checkpoint":
        extra = {"run_id": event["name"]} if _CHECKPOINT_TAKES_RUN else {}
        control_events.record_checkpoint(
            cp,
            event["job_id"],
            checkpoint_uri=f"s3://checkpoints/{event['job_id']}/{event['step']}",
            step=event["step"],
            captured_at=event["captured_at"],
            requested_at=event.get("requested_at"),
            **extra,
        )
    else:  # pragma: no cover
        raise AssertionError(kind)


_CHANGE_HAS_QUEUE = "job_queue" in inspect.signature(control_events.BatchJobChange).parameters
_QUEUES = {p["name"]: p["job_queue"] for p in CONFIG["pools"]}


def _queue(event: Mapping[str, Any]) -> dict[str, Any]:
    return {"job_queue": _QUEUES[event["pool"]]} if _CHANGE_HAS_QUEUE else {}


def run_of(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The run a launch workflow's input names (RUN_IDENTITY), passed on to its tasks."""
    return {"run": payload["run"]} if "run" in payload else {}


# Errors after which the caller (Lambda's retry, EventBridge's redelivery, the client) tries again.
RETRIED = (BatchThrottled, StorageUnavailable, StaleJobError, ConditionFailed, CapacityExhausted)


@contextmanager
def retried_later() -> Iterator[None]:
    with suppress(*RETRIED):
        yield


# --- the machine ---------------------------------------------------------------------------------

_shared: dict[str, Any] = {}


def fresh_tables() -> tuple[AwsClients, dict[str, str]]:
    """One set of clients and tables for the whole run (making them costs more than a sequence
    of steps), emptied for each sequence."""
    if "tables" not in _shared:
        clients = AwsClients(region=REGION)
        _shared["clients"] = clients
        _shared["tables"] = create_tables(clients.client("dynamodb"), prefix="stateful")
        return clients, _shared["tables"]
    clients, tables = _shared["clients"], _shared["tables"]
    dynamodb = clients.client("dynamodb")
    for name in tables.values():
        keys = [k["AttributeName"] for k in dynamodb.describe_table(TableName=name)["Table"]["KeySchema"]]
        scan: dict[str, Any] = {
            "TableName": name,
            "ProjectionExpression": ", ".join(f"#k{i}" for i in range(len(keys))),
            "ExpressionAttributeNames": {f"#k{i}": k for i, k in enumerate(keys)},
        }
        while True:
            page = dynamodb.scan(**scan)
            for start in range(0, len(page["Items"]), 25):
                dynamodb.batch_write_item(
                    RequestItems={
                        name: [{"DeleteRequest": {"Key": item}} for item in page["Items"][start : start + 25]]
                    }
                )
            if "LastEvaluatedKey" not in page:
                break
            scan["ExclusiveStartKey"] = page["LastEvaluatedKey"]
    return clients, tables


# [machines built, invariant checks]: a check runs after the build and after every step.
counts = [0, 0]


class ControlPlaneMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        counts[0] += 1
        self.world = World()
        self.sfn = FakeStepFunctions()
        clients, tables = fresh_tables()
        settings_ = Settings.from_env(
            environment(
                tables,
                event_bus="spotline-stateful",
                state_machines={
                    "launch": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:launch",
                    "preempt": f"arn:aws:states:{REGION}:{ACCOUNT}:stateMachine:preempt",
                },
                config=CONFIG,
            )
        )
        self.cp = build_control_plane(
            settings_,
            clients,
            launcher=FakeBatch(self.world, self),
            event_sink=NullSink(),
            workflows=self.sfn,
            tokens=self.sfn,
            trigger=NullTrigger(),
            instance_resolver=WorldResolver(),
            clock=lambda: self.world.now,
            # Job ids break ties in the queue's order: the same ids make every CI run the same
            new_id=lambda: f"job-{next(self.world.ids):016x}",
        )
        self.submitted: list[str] = []
        self.finished: dict[str, dict[str, Any]] = {}
        self.seen_version: dict[str, int] = {}
        self.cancelled: set[str] = set()
        # (job, run) of each run on an instance a Spot warning was sent for: only those runs'
        # timeline entries may say spot-warning.
        self.warned_runs: set[tuple[str, int]] = set()
        self._admit = scheduling.admit
        scheduling.admit = self._checked_admit  # type: ignore[assignment]
        self._flush = scheduling.AdmissionBatch.flush

        def checked_flush(batch: scheduling.AdmissionBatch) -> None:
            self._checked_flush(batch)

        scheduling.AdmissionBatch.flush = checked_flush  # type: ignore[assignment]

    def teardown(self) -> None:
        scheduling.admit = self._admit  # type: ignore[assignment]
        scheduling.AdmissionBatch.flush = self._flush  # type: ignore[method-assign]

    # --- the checks that run inside the control plane's calls --------------------------------

    def _checked_admit(
        self,
        cp: ControlPlane,
        record: JobRecord,
        pool: str,
        reason: str,
        *,
        now: float,
        team_usage_hint: int | None = None,
    ) -> JobRecord:
        admitted = self._admit(cp, record, pool, reason, now=now, team_usage_hint=team_usage_hint)
        self._check_quota(cp, [admitted.id], admitted.team)
        return admitted

    def _checked_flush(self, batch: scheduling.AdmissionBatch) -> None:
        """Admissions committed together: the same check for each team they admitted."""
        pending = [(record.id, record.team) for record, *_ in batch.pending]
        self._flush(batch)
        for team in {t for _, t in pending}:
            self._check_quota(batch.cp, [i for i, t in pending if t == team], team)

    def _check_quota(self, cp: ControlPlane, admitted: list[str], team: str) -> None:
        quotas = cp.config.teams_by_name
        _, usage = cp.ledger.usage([], quotas)
        why = quota_shortfall(team, 0, usage, quotas)
        if why is not None:
            self.world.violations.append(f"admitted {admitted} past the team quota: {why} ({usage})")

    def check_kill(self, run: Run, reason: str) -> None:
        """Called by TerminateJob on a live run: was it healthy, and owned?"""
        record = self.cp.jobs.find(run.job_id)
        if record is None:
            return
        if record.batch_job_id == run.batch_id and record.state is JobState.RUNNING:
            self.world.violations.append(
                f"run {run.batch_id} of {run.job_id} killed while its job RUNNING: {reason}"
            )
        timeout = self.cp.config.heartbeat_timeout_s
        heard = run.heartbeats_delivered
        if "heartbeat" in reason and heard and self.world.now - heard[-1] <= timeout:
            self.world.violations.append(
                f"healthy run {run.batch_id} of {run.job_id} killed as lost: last heartbeat delivered"
                f" {self.world.now - run.heartbeats_delivered[-1]:.0f}s ago ({reason})"
            )

    # --- API ----------------------------------------------------------------------------------

    @precondition(lambda self: len(self.submitted) < 10)
    @rule(
        # nlp (the unlimited borrower) submits most, so that borrowing is common
        team=st.sampled_from(["nlp", "nlp", "vision", "audio"]),
        gpus=st.sampled_from([4, 8, 8]),
        priority=st.sampled_from([Priority.LOW, Priority.NORMAL, Priority.HIGH]),
        spot=st.sampled_from(["auto", "never"]),
    )
    def submit(self, team: str, gpus: int, priority: Priority, spot: str) -> None:
        spec = {
            "name": "train",
            "gpus": gpus,
            "priority": priority.value,
            "image": "spotline/train:latest",
            "command": ["python", "-m", "spotline.examples.train"],
            "checkpoint_interval_s": 60,
            "spot": spot,
        }
        record, _ = submit_job(self.cp, team, spec)
        self.submitted.append(record.id)

    @precondition(lambda self: self.submitted)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(self.submitted))
        record = self.cp.jobs.get(job_id)
        if record.state in TERMINAL_STATES:
            return
        try:
            cancel_job(self.cp, record.team, job_id)
        except RETRIED:
            pass  # the client gets a 5xx and retries; the next cancel rule may
        except Exception as error:
            if type(error).__name__ != "Conflict":
                raise
        if self.cp.jobs.get(job_id).state is JobState.CANCELLED:
            self.cancelled.add(job_id)

    @precondition(lambda self: self.submitted)
    @rule(data=st.data(), priority=st.sampled_from([Priority.LOW, Priority.NORMAL, Priority.HIGH]))
    def change_priority(self, data: st.DataObject, priority: Priority) -> None:
        job_id = data.draw(st.sampled_from(self.submitted))
        record = self.cp.jobs.get(job_id)
        try:
            update_job(self.cp, record.team, job_id, JobChanges(priority=priority))
        except Exception as error:
            if type(error).__name__ != "Conflict":
                raise

    # --- scheduling ---------------------------------------------------------------------------

    @rule()
    def scheduling_pass(self) -> None:
        scheduling.scheduling_pass(self.cp)

    @rule()
    def two_interleaved_passes(self) -> None:
        """The second pass runs whole between the first's reads and its decisions."""
        real = scheduling.plan_with_stats
        ran: list[bool] = []

        def plan(*args: Any, **kwargs: Any) -> Any:
            if not ran:
                ran.append(True)
                scheduling.scheduling_pass(self.cp)
            return real(*args, **kwargs)

        scheduling.plan_with_stats = plan  # type: ignore[assignment]
        try:
            scheduling.scheduling_pass(self.cp)
        finally:
            scheduling.plan_with_stats = real  # type: ignore[assignment]

    @rule(seconds=st.sampled_from([1, 5]), team=st.sampled_from(TEAMS), deliver_all=st.booleans())
    def a_pass_reads_later_writes(self, seconds: int, team: str, deliver_all: bool) -> None:
        """A pass reads its clock, then, before it reads the queue, time moves on and the world
        writes: a job is submitted, and the queued events (a requeue among them) are handled."""
        real = scheduling.plan_with_stats

        def plan(*args: Any, **kwargs: Any) -> Any:
            scheduling.plan_with_stats = real  # type: ignore[assignment]
            self.world.now += seconds
            self.submit(team, 4, Priority.HIGH, "auto")
            if deliver_all and self.world.queue:
                self.deliver_everything()
            return real(*args, **kwargs)

        scheduling.plan_with_stats = plan  # type: ignore[assignment]
        try:
            scheduling.scheduling_pass(self.cp)
        finally:
            scheduling.plan_with_stats = real  # type: ignore[assignment]

    # --- workflows ----------------------------------------------------------------------------

    def _running(self) -> list[Execution]:
        return [e for e in self.sfn.executions.values() if not e.done]

    @precondition(lambda self: self._running())
    @rule(data=st.data(), twice=st.booleans())
    def workflow_step(self, data: st.DataObject, twice: bool) -> None:
        """One task of a running execution; `twice`: the task ran, its result was lost (a
        Lambda crash after its side effects) and Step Functions runs it again."""
        execution = data.draw(st.sampled_from(sorted(self._running(), key=lambda e: e.name)))
        if execution.machine == "launch":
            self._launch_step(execution, twice)
        else:
            self._preempt_step(execution, twice)

    def _launch_step(self, ex: Execution, twice: bool) -> None:
        cp, payload = self.cp, ex.payload
        job_id, version = payload["job_id"], payload["version"]
        if ex.stage == "start":
            try:
                if twice and RUN_IDENTITY:
                    submit_batch_job(cp, job_id, version=version, pool=payload.get("pool"), **run_of(payload))
                result = submit_batch_job(
                    cp, job_id, version=version, pool=payload.get("pool"), **run_of(payload)
                )
            except BatchThrottled:
                ex.attempts += 1
                if ex.attempts >= SUBMIT_ATTEMPTS:
                    self._mark_launch_failed(ex, "BatchThrottled", "Too Many Requests")
                return
            except LaunchFailed as error:
                self._mark_launch_failed(ex, "LaunchFailed", str(error))
                return
            except StorageUnavailable:
                return
            if not result["submitted"]:
                ex.stage = "done"
                return
            ex.batch_job_id = result["batch_job_id"]
            ex.stage = "record"
        elif ex.stage == "record":
            assert ex.batch_job_id is not None
            with retried_later():
                for _ in range(2 if twice else 1):
                    record_batch_job(
                        cp, job_id, version=version, batch_job_id=ex.batch_job_id, **run_of(payload)
                    )
                ex.stage = "done"
        elif ex.stage == "mark_failed":
            self._mark_launch_failed(ex, ex.payload.get("error", "LaunchFailed"), "")

    def _mark_launch_failed(self, ex: Execution, error: str, cause: str) -> None:
        ex.payload["error"] = error
        ex.stage = "mark_failed"
        with retried_later():
            job_id, version = ex.payload["job_id"], ex.payload["version"]
            mark_launch_failed(
                self.cp, job_id, version=version, error=error, cause=cause, **run_of(ex.payload)
            )
            ex.stage = "failed"

    def _preempt_step(self, ex: Execution, twice: bool) -> None:
        cp, payload = self.cp, ex.payload
        job_id = payload["job_id"]
        if ex.stage == "start":
            with retried_later():
                for _ in range(2 if twice else 1):
                    confirmed = confirm_checkpointing(
                        cp,
                        job_id,
                        version=payload["version"],
                        disruption=payload["disruption"],
                        timeout_s=payload["timeout_s"],
                    )
                if not confirmed["proceed"]:
                    ex.stage = "done"
                    return
                ex.timeout_s, ex.batch_job_id = confirmed["timeout_s"], confirmed["batch_job_id"]
                ex.stage = "request"
        elif ex.stage == "request":
            ex.token = f"token-{ex.name}"
            try:
                request_checkpoint(cp, job_id, task_token=ex.token)
            except (JobNotCheckpointing, CheckpointAlreadyDurable):
                ex.stage = "terminate"
                return
            except StorageUnavailable:
                return
            self.sfn.waiting.add(ex.token)
            ex.wait_started = self.world.now
            ex.stage = "wait"
        elif ex.stage == "wait":
            if ex.token in self.sfn.answered or self.world.now >= ex.wait_started + ex.timeout_s:
                self.sfn.waiting.discard(ex.token)
                ex.stage = "terminate"
        elif ex.stage == "terminate":
            try:
                for _ in range(2 if twice else 1):
                    terminate_batch_job(cp, job_id, batch_job_id=ex.batch_job_id)
            except BatchThrottled:
                ex.attempts += 1
                if ex.attempts >= TERMINATE_ATTEMPTS:
                    ex.stage = "failed"  # TerminateFailed: the reconciler finishes it after the deadline
                return
            ex.stage = "finish"
        elif ex.stage == "finish":
            with retried_later():
                for _ in range(2 if twice else 1):
                    finish_preemption(cp, job_id, version=payload["version"])
                ex.stage = "done"

    # --- the world: Batch runs, agents, EC2 ----------------------------------------------------

    def _runs(self, *statuses: str) -> list[Run]:
        return sorted((r for r in self.world.runs.values() if r.status in statuses), key=lambda r: r.batch_id)

    @precondition(lambda self: self._runs("SUBMITTED"))
    @rule(data=st.data())
    def batch_starts_a_run(self, data: st.DataObject) -> None:
        run = data.draw(st.sampled_from(self._runs("SUBMITTED")))
        world = self.world
        nodes = [n for n in NODES[run.pool] if n not in world.reclaim_at and world.free_gpus(n) >= run.gpus]
        if not nodes:
            return  # no room on the pool's instances: Batch keeps it RUNNABLE
        run.instance = data.draw(st.sampled_from(nodes))
        run.status = "RUNNING"
        self.world.emit(
            "batch",
            run,
            status="RUNNING",
            started_at=self.world.now,
            containers=[container_arn(run.pool, run.instance)],
        )

    @precondition(lambda self: self._runs("RUNNING"))
    @rule(data=st.data(), outcome=st.sampled_from(["SUCCEEDED", "FAILED", "HOST_LOST"]))
    def a_run_ends(self, data: st.DataObject, outcome: str) -> None:
        run = data.draw(st.sampled_from(self._runs("RUNNING")))
        if outcome == "SUCCEEDED":
            run.status = "SUCCEEDED"
            self.world.emit("batch", run, status="SUCCEEDED")
        elif outcome == "FAILED":
            run.status = "FAILED"
            self.world.emit("batch", run, status="FAILED", reason="Essential container in task exited")
        else:
            run.status = "FAILED"
            self.world.emit("batch", run, status="FAILED", reason=host_lost(run.instance))

    @precondition(lambda self: self._runs("RUNNING"))
    @rule(data=st.data(), steps=st.integers(1, 50))
    def agent_heartbeat(self, data: st.DataObject, steps: int) -> None:
        run = data.draw(st.sampled_from(self._runs("RUNNING")))
        run.step += steps
        self.world.emit("heartbeat", run, step=run.step, instance=run.instance)

    @precondition(lambda self: self._runs("RUNNING"))
    @rule(data=st.data())
    def agent_checkpoint(self, data: st.DataObject) -> None:
        """The agent writes a durable checkpoint at its step (answering the record's request
        if it has one) and reports it."""
        run = data.draw(st.sampled_from(self._runs("RUNNING")))
        record = self.cp.jobs.get(run.job_id)
        self.world.stored_step[run.job_id] = max(self.world.stored_step.get(run.job_id, 0), run.step)
        self.world.emit(
            "checkpoint",
            run,
            step=run.step,
            captured_at=self.world.now,
            requested_at=record.checkpoint_requested_at,
        )

    @rule(data=st.data())
    def spot_warning(self, data: st.DataObject) -> None:
        """EC2's two-minute warning for one of the Spot instances (it may run two jobs, or a job
        being preempted) or for an instance Spotline never saw."""
        instance = data.draw(st.sampled_from([*NODES[SPOT], UNKNOWN_INSTANCE]))
        # A job on it may be warned even when the handler fails after marking it (a retry finds it)
        self.warned_runs.update((r.id, r.run) for r in self.cp.jobs.active() if instance in r.instance_ids)
        with retried_later():
            affected = control_events.handle_spot_warning(self.cp, instance, self.world.now)
            self.warned_runs.update((job_id, self.cp.jobs.get(job_id).run) for job_id in affected)
        if instance != UNKNOWN_INSTANCE:
            self.world.reclaim_at.setdefault(instance, self.world.now + CONFIG["spot_notice_s"])

    @rule(seconds=st.sampled_from([5, 30, 120, 400]))
    def time_passes(self, seconds: int) -> None:
        """Time passes: EC2 reclaims the warned instances whose notice ran out (their runs fail
        as host loss; a fresh instance replaces each), then the reconciler runs."""
        world = self.world
        world.now += seconds
        for instance, at in sorted(world.reclaim_at.items()):
            if at > world.now:
                continue
            for run in world.runs.values():
                if run.live and run.instance == instance:
                    run.status = "FAILED"
                    world.emit("batch", run, status="FAILED", reason=host_lost(instance))
            del world.reclaim_at[instance]
        with retried_later():
            reconcile(self.cp)

    @rule(throttle=st.sampled_from(["submit", "terminate", "fail_submit"]), times=st.integers(1, 8))
    def batch_misbehaves(self, throttle: str, times: int) -> None:
        if throttle == "submit":
            self.world.throttle_submits = times
        elif throttle == "fail_submit":
            self.world.fail_submits = 1
        elif RUN_IDENTITY:
            # Before pending terminations (rel-runs) a throttled TerminateJob leaves a live orphan.
            self.world.throttle_terminates = times

    # --- deliveries -----------------------------------------------------------------------------

    @precondition(lambda self: self.world.queue)
    @rule(data=st.data())
    def deliver_an_event(self, data: st.DataObject) -> None:
        """Deliver any queued event: EventBridge does not keep order."""
        index = data.draw(st.integers(0, len(self.world.queue) - 1))
        event = self.world.queue[index]
        try:
            self._deliver(event)
        except RETRIED:
            return  # the handler failed; EventBridge delivers it again later
        self.world.queue.pop(index)
        self.world.delivered.append(event)

    @precondition(lambda self: self.world.queue)
    @rule()
    def deliver_everything(self) -> None:
        """EventBridge catches up: every queued event, oldest first."""
        for event in list(self.world.queue):
            try:
                self._deliver(event)
            except RETRIED:
                continue
            self.world.queue.remove(event)
            self.world.delivered.append(event)

    @precondition(lambda self: self._running())
    @rule()
    def workflows_catch_up(self) -> None:
        """Every running execution runs its next task (one waiting on a token stays)."""
        for execution in sorted(self._running(), key=lambda e: e.name):
            if execution.machine == "launch":
                self._launch_step(execution, twice=False)
            else:
                self._preempt_step(execution, twice=False)

    @precondition(lambda self: self.world.delivered)
    @rule(data=st.data())
    def deliver_again(self, data: st.DataObject) -> None:
        """At-least-once: an event already handled comes again."""
        event = data.draw(st.sampled_from(self.world.delivered[-20:]))
        with retried_later():
            self._deliver(event)

    def _deliver(self, event: Mapping[str, Any]) -> None:
        if event["kind"] == "heartbeat":
            run = self.world.runs[event["batch_id"]]
            run.heartbeats_delivered.append(self.world.now)
        deliver(self.cp, event)

    # --- invariants ---------------------------------------------------------------------------

    def _records(self) -> dict[str, JobRecord]:
        client = self.cp.jobs.table.client
        items: list[dict[str, Any]] = []
        kwargs: dict[str, Any] = {"TableName": self.cp.jobs.table.name, "ConsistentRead": True}
        while True:
            page = client.scan(**kwargs)
            items += page.get("Items", [])
            if "LastEvaluatedKey" not in page:
                break
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]
        from spotline.aws.dynamo import deserialize_item

        jobs = [deserialize_item(i) for i in items]
        # The table also holds each job's signal item (tenant isolation), which is not a job
        prefix = getattr(resources, "SIGNAL_KEY_PREFIX", None)
        jobs = [i for i in jobs if prefix is None or not str(i["job_id"]).startswith(prefix)]
        return {r.id: r for r in map(item_to_record, jobs)}

    @invariant()
    def control_plane_is_consistent(self) -> None:
        counts[1] += 1
        if self.world.violations:
            raise Violation("; ".join(self.world.violations))
        records = self._records()
        config = self.cp.config

        # No job lost
        missing = sorted(set(self.submitted) - set(records))
        assert not missing, f"jobs lost: {missing}"

        # The ledger equals the GPUs held, per pool and per team
        pools = [p.name for p in config.pools]
        pool_usage, team_usage = self.cp.ledger.usage(pools, TEAMS)
        held_pool = {p: 0 for p in pools}
        held_team = {t: 0 for t in TEAMS}
        for r in records.values():
            if r.state in ACTIVE_STATES and r.gpus_held:
                assert r.job.pool is not None, f"{r.id} holds GPUs in no pool"
                held_pool[r.job.pool] += r.gpus_held
                held_team[r.team] += r.gpus_held
            elif r.gpus_held:
                raise Violation(f"{r.id} is {r.state.value} and holds {r.gpus_held} GPUs")
        assert {p: pool_usage.get(p, 0) for p in pools} == held_pool, (pool_usage, held_pool)
        assert {t: team_usage.get(t, 0) for t in TEAMS} == held_team, (team_usage, held_team)

        # Pool capacity and the hard team limits never exceeded
        for pool in config.pools:
            assert held_pool[pool.name] <= pool.capacity_gpus, f"pool {pool.name} over capacity"
        for team in config.teams:
            if team.borrowing_limit_gpus is not None:
                assert held_team[team.team] <= team.nominal_gpus + team.borrowing_limit_gpus, team.team

        for job_id, record in records.items():
            # A finished job never changes
            if job_id in self.finished:
                assert finished_view(record) == self.finished[job_id], f"finished job {job_id} changed"
            elif record.state in TERMINAL_STATES:
                self.finished[job_id] = finished_view(record)
            # Legal transitions only: the timeline chains from PENDING to the record's state
            if self.seen_version.get(job_id) != record.version:
                self._check_timeline(record)
                self.seen_version[job_id] = record.version
            # A cancelled job stays cancelled
            if job_id in self.cancelled:
                assert record.state is JobState.CANCELLED, f"cancelled {job_id} is {record.state.value}"

        # At most one live Batch run per job, and none the record does not own, except runs on
        # their way out: a termination still pending (Batch has not confirmed it; the reconciler
        # retries it) or a run whose launch is still in flight, whose next task stops it (the
        # job left its admission between SubmitJob and RecordBatchJob)
        by_job: dict[str, list[Run]] = {}
        for run in self.world.live_runs():
            by_job.setdefault(run.job_id, []).append(run)
        for job_id, runs in by_job.items():
            record = records[job_id]
            pending = set(getattr(record, "terminating_batch_job_ids", ()))
            owned = [r for r in runs if self._owns(record, r)]
            assert len(owned) <= 1, f"job {job_id} has {len(owned)} live runs: {[r.batch_id for r in owned]}"
            for run in runs:
                if run in owned or run.batch_id in pending or self._launching(run):
                    continue
                raise Violation(
                    f"live run {run.batch_id} ({run.status}) not owned by {job_id}"
                    f" ({record.state.value}, batch job {record.batch_job_id}) and not being stopped"
                )

    def _launching(self, run: Run) -> bool:
        """Submitted by a launch execution that has not finished."""
        return any(
            e.machine == "launch" and not e.done and e.batch_job_id == run.batch_id
            for e in self.sfn.executions.values()
        )

    def _owns(self, record: JobRecord, run: Run) -> bool:
        if record.state not in ACTIVE_STATES:
            return False
        if RUN_IDENTITY:
            # The run's Batch job name is the current admission's run id, and it is the Batch
            # job the record knows (or the launch has not recorded one yet)
            return run.name == record.run_id and record.batch_job_id in (None, run.batch_id)
        if record.batch_job_id == run.batch_id:
            return True
        # Submitted by the launch of the current admission (the job's latest launch), not
        # recorded yet
        launches = [
            e
            for e in self.sfn.executions.values()
            if e.machine == "launch" and e.payload["job_id"] == record.id
        ]
        return record.batch_job_id is None and bool(launches) and launches[-1].batch_job_id == run.batch_id

    def _check_timeline(self, record: JobRecord) -> None:
        entries, token = self.cp.timeline.list(record.id, limit=1000)
        assert token is None
        state = None
        last_at = None
        run = 0
        for entry in entries:
            # A job's timeline never runs back in time
            assert last_at is None or entry.at >= last_at, f"{record.id}: {entry} stamped before {last_at}"
            last_at = entry.at
            # Each entry says what it records; a Spot warning only in a run that was warned
            if entry.target == JobState.ADMITTED.value:
                run += 1
            assert entry.kind, f"{record.id}: {entry} has no kind"
            if entry.kind == "spot-warning":
                assert (record.id, run) in self.warned_runs, f"{record.id}: {entry}, run {run} was not warned"
            source = entry.source
            if state is None:
                assert entry.target == JobState.PENDING.value, entry
            else:
                assert source == state, f"{record.id}: timeline breaks at {entry}"
                if entry.target != source:
                    assert can_transition(JobState(source), JobState(entry.target)), f"illegal {entry}"
            state = entry.target
        assert state == record.state.value, f"{record.id}: timeline ends at {state}, not {record.state.value}"


def finished_view(record: JobRecord) -> dict[str, Any]:
    """What must never change once a job finished: everything but the bookkeeping of the Batch
    jobs still being stopped."""
    return record.model_dump(exclude={"terminating_batch_job_ids"})


def test_the_control_plane_keeps_its_invariants_under_any_sequence(aws_env: None) -> None:
    counts[:] = [0, 0]
    cpu = time.process_time()
    _shared.clear()
    with mock_aws():
        run_state_machine_as_test(
            ControlPlaneMachine,
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=STEPS,
                derandomize=not LONG_RUN,
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
                print_blob=True,
            ),
        )
    steps = counts[1] - counts[0]
    print(
        f"stateful control plane: {counts[0]} sequences, {steps} steps, invariants after each;"
        f" {time.process_time() - cpu:.1f} s CPU"
    )
    if not LONG_RUN:
        assert steps >= MIN_STEPS_PER_RUN, f"only {steps} steps ran"
