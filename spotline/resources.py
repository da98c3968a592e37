"""The one description of Spotline's AWS resources: tables and their keys, queues, event rules,
functions and workflows, and the environment variables that connect them.

The CDK stack (`stacks/`) and the local runtime (`spotline.local`) both build from this module,
so a key, an index, an event pattern or an ASL substitution is written once. Pure data: no
boto3 here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# --- environment variables every function reads (spotline.control.settings parses them) ------

ENV_JOBS_TABLE = "SPOTLINE_JOBS_TABLE"
ENV_TIMELINE_TABLE = "SPOTLINE_TIMELINE_TABLE"
ENV_LEDGER_TABLE = "SPOTLINE_LEDGER_TABLE"
ENV_INSTANCES_TABLE = "SPOTLINE_INSTANCES_TABLE"
ENV_IDEMPOTENCY_TABLE = "SPOTLINE_IDEMPOTENCY_TABLE"
ENV_EVENT_BUS = "SPOTLINE_EVENT_BUS"
ENV_SCHEDULER_QUEUE_URL = "SPOTLINE_SCHEDULER_QUEUE_URL"
ENV_PREEMPT_STATE_MACHINE_ARN = "SPOTLINE_PREEMPT_STATE_MACHINE_ARN"
ENV_LAUNCH_STATE_MACHINE_ARN = "SPOTLINE_LAUNCH_STATE_MACHINE_ARN"
ENV_CHECKPOINT_BUCKET = "SPOTLINE_CHECKPOINT_BUCKET"
# The log group of the training containers (the API reads a run's logs from it).
ENV_TRAINING_LOG_GROUP = "SPOTLINE_TRAINING_LOG_GROUP"
# JSON: {"pools": [...], "teams": [...], "identities": {...}, "scheduler": {...}} (spotline.control.settings)
ENV_CONFIG = "SPOTLINE_CONFIG"

# Environment of a training container (the agent reads these; the job definition and the local
# fleet set them).
AGENT_ENV_JOB_ID = "SPOTLINE_JOB_ID"
# The run id (RUN_IDENTITY): the agent names it in every Checkpoint Completed and Job Heartbeat.
AGENT_ENV_RUN_ID = "SPOTLINE_RUN_ID"
AGENT_ENV_JOBS_TABLE = ENV_JOBS_TABLE
AGENT_ENV_EVENT_BUS = ENV_EVENT_BUS
AGENT_ENV_CHECKPOINT_URI = (
    "SPOTLINE_CHECKPOINT_URI"  # s3://bucket/checkpoints/<team>/<job_id>/ or file:///dir/
)
AGENT_ENV_INSTANCE_ID = "SPOTLINE_INSTANCE_ID"  # locally; on AWS the agent reads instance metadata
AGENT_ENV_CHECKPOINT_INTERVAL_S = "SPOTLINE_CHECKPOINT_INTERVAL_S"
AGENT_ENV_POLL_S = "SPOTLINE_AGENT_POLL_S"  # how often the agent reads its signal item (default 5)
# The team whose job the container runs (the team's job definition and the launcher set it): the
# agent's event source and the key of its signal item carry it, and its role allows only those.
AGENT_ENV_TEAM = "SPOTLINE_TEAM"
# The team's KMS key for its checkpoints (cdk.json `checkpoint_kms_per_team`): the agent names it
# on every upload.
AGENT_ENV_CHECKPOINT_KMS_KEY = "SPOTLINE_CHECKPOINT_KMS_KEY"

# --- teams (tenant isolation, docs/security.md) ---------------------------------------------

# A team name is part of IAM resource patterns (S3 prefix, DynamoDB leading key, event source),
# so it may not contain a character that could make one team's pattern cover another's.
TEAM_NAME_PATTERN = r"^[a-z0-9][a-z0-9-]{0,31}$"

# --- DynamoDB --------------------------------------------------------------------------


@dataclass(frozen=True)
class Index:
    name: str
    partition_key: str
    sort_key: str | None = None
    # Attributes projected besides the keys (None: ALL).
    projection: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Table:
    logical_id: str
    env: str
    partition_key: str
    sort_key: str | None = None
    indexes: tuple[Index, ...] = ()
    ttl_attribute: str | None = None
    # Number keys (all others are strings).
    number_keys: tuple[str, ...] = ()


# Jobs: one item per job. Index attributes are written only while they apply (sparse indexes):
#   queue_pk    = "Q#<priority>"  while PENDING            queue_sk    = "<submitted_at:017.3f>#<job_id>"
#   deadline_pk = "D"             while PENDING with one   deadline_sk = "<deadline:017.3f>#<job_id>"
#   active_pk   = "A#<shard>"     while holding GPUs (ADMITTED, RUNNING, CHECKPOINTING), or while a
#                                 termination is pending; shard = crc32(job_id) % 8 (aws.job_items)
#   team, team_sk = "<submitted_at:017.3f>#<job_id>"      always
#   finished_pk = "F#<team>"  once finished (SUCCEEDED, FAILED, CANCELLED)
#                                                      finished_sk = "<finished_at:017.3f>#<job_id>"
#   (a job held for its dependencies is PENDING under queue_pk = "Q#held" instead, with no
#   deadline attributes, until they end: spotline.control.arrays)
# An array's own item (`kind` = "array", key = the array id) has none of the index attributes
# (`team` without `team_sk` puts it in no index): its elements are jobs like any other.
# Besides the jobs, the table holds one *signal item* per job, key `signal#<team>#<job_id>`
# (SIGNAL_FIELDS only, no index attribute): the control plane writes it in the same transaction as
# the job's item whenever one of those fields changes, and the agent reads only that item (its
# team's role may read no other key: dynamodb:LeadingKeys).
JOBS = Table(
    logical_id="Jobs",
    env=ENV_JOBS_TABLE,
    partition_key="job_id",
    indexes=(
        Index("queue", "queue_pk", "queue_sk"),
        Index("deadline", "deadline_pk", "deadline_sk"),
        Index("active", "active_pk", "job_id"),
        Index("team", "team", "team_sk"),
        Index("finished", "finished_pk", "finished_sk"),
    ),
)

# Timeline: every transition of a job, in order.
TIMELINE = Table(
    logical_id="Timeline",
    env=ENV_TIMELINE_TABLE,
    partition_key="job_id",
    sort_key="seq",
    number_keys=("seq",),
)

# Capacity and quota ledger: "POOL#<name>" and "TEAM#<team>" items with `used_gpus`, updated in
# the same transaction as each admission or release (condition: used + gpus <= capacity).
LEDGER = Table(logical_id="Ledger", env=ENV_LEDGER_TABLE, partition_key="pk")

# Instance id -> the jobs running on it (a Spot warning names an instance, not a job).
INSTANCES = Table(
    logical_id="Instances", env=ENV_INSTANCES_TABLE, partition_key="instance_id", ttl_attribute="expires_at"
)

# Powertools idempotency records (its DynamoDBPersistenceLayer defaults: key "id", ttl "expiration").
IDEMPOTENCY = Table(
    logical_id="Idempotency", env=ENV_IDEMPOTENCY_TABLE, partition_key="id", ttl_attribute="expiration"
)

TABLES: tuple[Table, ...] = (JOBS, TIMELINE, LEDGER, INSTANCES, IDEMPOTENCY)

# --- events ------------------------------------------------------------------------------

SOURCE_API = "spotline.api"
# Agent events carry their team: source `spotline.agent.<team>` (the team's job role may put
# events with that source only); the rules match the prefix.
SOURCE_AGENT = "spotline.agent"
SOURCE_AGENT_PREFIX = SOURCE_AGENT + "."
SOURCE_SCHEDULER = "spotline.scheduler"

DETAIL_JOB_SUBMITTED = "Job Submitted"
DETAIL_CHECKPOINT_COMPLETED = "Checkpoint Completed"
DETAIL_JOB_HEARTBEAT = "Job Heartbeat"
DETAIL_JOB_STATE_CHANGED = "Job State Changed"
DETAIL_SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
DETAIL_REBALANCE = "EC2 Instance Rebalance Recommendation"
DETAIL_BATCH_STATE_CHANGE = "Batch Job State Change"
# EC2's events about reserved capacity (spotline.control.reserved): AWS's documentation spells
# the Capacity Block ones two ways, with and without "Reservation"; the rule matches both.
DETAILS_CAPACITY_RESERVATION = (
    "Capacity Block Delivered",
    "Capacity Block Reservation Delivered",
    "Capacity Block Expiration Warning",
    "Capacity Block Reservation Expiration Warning",
    "EC2 Capacity Reservation Instance Interruption Warning",
)
# The Batch job statuses whose state-change events the control plane handles.
BATCH_STATUSES_ACTED_ON = ("RUNNING", "SUCCEEDED", "FAILED")

PROJECT_BUS = "project"  # the stack's own bus (named spotline-<stage> when deployed)
DEFAULT_BUS = "default"

# The scheduler runs one pass at a time behind this FIFO queue (one message group).
SCHEDULER_QUEUE = "SchedulerTriggers"  # logical id; a .fifo queue
SCHEDULER_MESSAGE_GROUP = "scheduling-pass"


@dataclass(frozen=True)
class EventQueue:
    """A standard SQS queue between a rule and its function, for events that come too often to
    take one Lambda invocation each: one invocation handles a batch (up to `batch_size`, or what
    arrived within `max_batching_window_s`), and at most `max_concurrency` run at once (the event
    source mapping's ScalingConfig; 2 is Lambda's least). The function answers with the batch's
    failed records only (ReportBatchItemFailures); a record that fails `max_receives` times goes
    to the events dead-letter queue."""

    logical_id: str
    function: str
    batch_size: int
    max_batching_window_s: int
    max_concurrency: int
    max_receives: int = 3
    # Older messages are of no use (a newer heartbeat of the job has come since).
    retention_s: int = 3600


# Job Heartbeat: every node of every running job sends one every 30 s (spotline.agent), which
# would otherwise take one invocation each out of an account's concurrency (10 in a new account).
# A few seconds of batching delay is nothing beside the heartbeat timeout (10 minutes).
HEARTBEAT_QUEUE = EventQueue(
    "HeartbeatEvents", "heartbeat", batch_size=100, max_batching_window_s=5, max_concurrency=2
)
EVENT_QUEUES: tuple[EventQueue, ...] = (HEARTBEAT_QUEUE,)


def event_queue(logical_id: str) -> EventQueue | None:
    """The event queue a rule's `target` names, or None (a function, or the scheduler queue)."""
    return next((q for q in EVENT_QUEUES if q.logical_id == logical_id), None)


@dataclass(frozen=True)
class Rule:
    """An EventBridge rule: on `bus`, `pattern` routes to `target` (a function name from
    FUNCTIONS, SCHEDULER_QUEUE, or an EventQueue's logical id)."""

    name: str
    bus: str
    pattern: dict[str, Any]
    target: str


RULES: tuple[Rule, ...] = (
    Rule(
        "JobSubmitted",
        PROJECT_BUS,
        {"source": [SOURCE_API], "detail-type": [DETAIL_JOB_SUBMITTED]},
        SCHEDULER_QUEUE,
    ),
    Rule(
        "CapacityFreed",
        PROJECT_BUS,
        {
            "source": [SOURCE_SCHEDULER],
            "detail-type": [DETAIL_JOB_STATE_CHANGED],
            "detail": {"to": ["SUCCEEDED", "FAILED", "CANCELLED", "PENDING"]},
        },
        SCHEDULER_QUEUE,
    ),
    Rule(
        "CheckpointCompleted",
        PROJECT_BUS,
        {"source": [{"prefix": SOURCE_AGENT_PREFIX}], "detail-type": [DETAIL_CHECKPOINT_COMPLETED]},
        "checkpoint_completed",
    ),
    Rule(
        "JobHeartbeat",
        PROJECT_BUS,
        {"source": [{"prefix": SOURCE_AGENT_PREFIX}], "detail-type": [DETAIL_JOB_HEARTBEAT]},
        HEARTBEAT_QUEUE.logical_id,
    ),
    Rule(
        "SpotInterruptionWarning",
        DEFAULT_BUS,
        {"source": ["aws.ec2"], "detail-type": [DETAIL_SPOT_WARNING]},
        "spot_interruption",
    ),
    Rule(
        "RebalanceRecommendation",
        DEFAULT_BUS,
        {"source": ["aws.ec2"], "detail-type": [DETAIL_REBALANCE]},
        "rebalance",
    ),
    Rule(
        "CapacityReservationEvents",
        DEFAULT_BUS,
        {"source": ["aws.ec2"], "detail-type": list(DETAILS_CAPACITY_RESERVATION)},
        "capacity_reservation",
    ),
    Rule(
        "BatchJobStateChange",
        DEFAULT_BUS,
        {
            "source": ["aws.batch"],
            "detail-type": [DETAIL_BATCH_STATE_CHANGE],
            # Only the statuses the control plane acts on: SUBMITTED, PENDING, RUNNABLE and
            # STARTING change nothing, so they never invoke the handler (or cost a delivery).
            "detail": {
                "jobName": [{"prefix": "spotline-"}],
                "status": list(BATCH_STATUSES_ACTED_ON),
            },
        },
        "batch_state_change",
    ),
)

# --- functions and workflows -----------------------------------------------------------


@dataclass(frozen=True)
class Function:
    """A Lambda function: `functions/<module>.py`, entry point `handler`."""

    name: str
    module: str
    timeout_s: int = 30
    memory_mb: int = 512
    # Tables it reads / writes, by logical id (the stack grants exactly these).
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


FUNCTIONS: tuple[Function, ...] = (
    # Cancelling a running job releases its GPUs (Ledger) and its instance entries (Instances);
    # a job's effective priority uses the fair-share usage the latest pass kept (Ledger).
    Function(
        "api",
        "api",
        reads=("Jobs", "Timeline", "Ledger"),
        writes=("Jobs", "Timeline", "Idempotency", "Ledger", "Instances"),
    ),
    Function(
        "scheduler",
        "scheduler",
        timeout_s=60,
        reads=("Jobs", "Ledger"),
        writes=("Jobs", "Timeline", "Ledger", "Instances"),
    ),
    # A Spot warning records its pool's capacity as missing (Ledger: the Spot pool history).
    Function(
        "spot_interruption",
        "spot_interruption",
        reads=("Jobs", "Instances", "Ledger"),
        writes=("Jobs", "Timeline", "Idempotency", "Ledger"),
    ),
    # A rebalance recommendation records its pool at risk (Ledger: the Spot pool history).
    Function(
        "rebalance",
        "rebalance",
        reads=("Jobs", "Instances", "Ledger"),
        writes=("Jobs", "Idempotency", "Ledger"),
    ),
    # A Capacity Block delivered asks for a pass; its expiration warning (or an interruptible
    # reservation's) checkpoints and requeues the jobs on the capacity that goes.
    Function(
        "capacity_reservation",
        "capacity_reservation",
        reads=("Jobs", "Instances"),
        writes=("Jobs", "Timeline", "Idempotency"),
    ),
    Function(
        "checkpoint_completed",
        "checkpoint_completed",
        reads=("Jobs",),
        writes=("Jobs", "Timeline", "Idempotency"),
    ),
    # A heartbeat names the EC2 instance the job runs on (Instances: for Spot warnings). Invoked
    # with a batch of heartbeats from HEARTBEAT_QUEUE.
    Function("heartbeat", "heartbeat", reads=("Jobs",), writes=("Jobs", "Instances")),
    Function(
        "batch_state_change",
        "batch_state_change",
        reads=("Jobs", "Ledger"),
        writes=("Jobs", "Timeline", "Ledger", "Instances", "Idempotency"),
    ),
    Function(
        "reconciler",
        "reconciler",
        timeout_s=120,
        reads=("Jobs", "Ledger"),
        writes=("Jobs", "Timeline", "Ledger", "Instances"),
    ),
    # Lambda tasks of the workflows: one entry point, dispatched on the input's "task" field.
    Function(
        "workflow_tasks",
        "workflow_tasks",
        timeout_s=60,
        reads=("Jobs", "Ledger", "Instances"),
        writes=("Jobs", "Timeline", "Ledger", "Instances"),
    ),
)


# AWS actions each function's code calls besides its tables (above) and events:PutEvents on the
# project bus (spotline.control and spotline.aws; the stack grants exactly these). Keys are
# function names; "<resource>" hints say what the action is scoped to.
FUNCTION_ACTIONS: dict[str, dict[str, str]] = {
    # Cancelling a running job stops its Batch job. `GET /jobs/{id}/logs` finds the run's log
    # stream (DescribeJobs) and reads it from the training log group only.
    "api": {
        "batch:TerminateJob": "Spotline's Batch jobs",
        "batch:DescribeJobs": "*",
        "logs:GetLogEvents": "the training log group",
        # A submitted job's image tag is pinned to its digest (spotline.aws.images).
        "ecr:DescribeImages": "the teams' and the shared training image's repositories",
        # `GET /pools`: each pool's nodes, the container instances of its compute environments'
        # ECS clusters (spotline.aws.nodes). Read-only.
        "batch:DescribeJobQueues": "*",
        "batch:DescribeComputeEnvironments": "*",
        "ecs:ListContainerInstances": "the ECS clusters Batch made for the compute environments",
        "ecs:DescribeContainerInstances": "their container instances",
    },
    # Admissions start the launch workflow; preemptions the preempt workflow; a victim that was
    # admitted but not started is stopped directly.
    "scheduler": {
        "states:StartExecution": "the preempt and launch state machines",
        "batch:TerminateJob": "Spotline's Batch jobs",
    },
    "spot_interruption": {"states:StartExecution": "the preempt state machine"},
    "capacity_reservation": {"states:StartExecution": "the preempt state machine"},
    # Only this function answers a workflow's task token.
    "checkpoint_completed": {"states:SendTaskSuccess": "the preempt state machine"},
    # Batch names the ECS container instance; the Spot warning names the EC2 instance. A run
    # the record does not own (an orphan) is stopped.
    "batch_state_change": {
        "ecs:DescribeContainerInstances": "the pools' ECS clusters",
        "batch:TerminateJob": "Spotline's Batch jobs",
    },
    # Pending terminations: DescribeJobs until Batch confirms, TerminateJob again meanwhile; a
    # launch that timed out has its run's Batch job found by name (ListJobs) and stopped. The
    # pools' compute environments are read for the INVALID alarm (queue -> environments).
    "reconciler": {
        "batch:TerminateJob": "Spotline's Batch jobs",
        "batch:DescribeJobs": "*",
        "batch:ListJobs": "*",
        "batch:DescribeJobQueues": "*",
        "batch:DescribeComputeEnvironments": "*",
        "sqs:SendMessage": "the scheduler queue",
    },
    "workflow_tasks": {
        "batch:SubmitJob": "the pools' job queues and Spotline's job definitions",
        "batch:TagResource": "Spotline's Batch jobs (SubmitJob with tags)",
        "batch:TerminateJob": "Spotline's Batch jobs",
        # SubmitJob is idempotent per run: a live Batch job of the run's name is adopted.
        "batch:ListJobs": "*",
        # A job whose image differs from the job definition's runs under a derived definition
        # (Batch cannot override an image per job), registered once per image.
        "batch:DescribeJobDefinitions": "*",
        "batch:RegisterJobDefinition": "Spotline's job definitions",
        "iam:PassRole": "the training job's role (passed on by RegisterJobDefinition)",
        "sqs:SendMessage": "the scheduler queue",
    },
}

# Job item attributes read outside the control plane: none. The agent reads its job's signal
# item (below): checkpoint_requested_at (number, epoch s, control plane clock: a checkpoint is
# wanted when it is later than the agent's last one) and batch_job_id (the current run).
SIGNAL_KEY_PREFIX = "signal#"
SIGNAL_FIELDS: tuple[str, ...] = ("checkpoint_requested_at", "batch_job_id")


def agent_source(team: str) -> str:
    """The event source of a team's agents: `spotline.agent.<team>`."""
    return SOURCE_AGENT_PREFIX + team


def team_of_agent_source(source: str) -> str | None:
    """The team an agent event's source names, or None for any other source."""
    if not source.startswith(SOURCE_AGENT_PREFIX):
        return None
    return source[len(SOURCE_AGENT_PREFIX) :] or None


def signal_key(team: str, job_id: str) -> str:
    """The jobs-table key of a job's signal item: `signal#<team>#<job_id>`."""
    return f"{SIGNAL_KEY_PREFIX}{team}#{job_id}"


def signal_key_pattern(team: str) -> str:
    """The dynamodb:LeadingKeys pattern a team's job role is limited to."""
    return f"{SIGNAL_KEY_PREFIX}{team}#*"


def checkpoint_prefix(team: str) -> str:
    """The key prefix of a team's checkpoints in the checkpoint bucket."""
    return f"checkpoints/{team}/"


@dataclass(frozen=True)
class StateMachine:
    """A Step Functions workflow from `statemachines/<file>`; `substitutions` maps each
    ${Name} in the ASL to a function name in FUNCTIONS (its ARN is substituted). Standard unless
    `express`."""

    name: str
    file: str
    env: str
    substitutions: dict[str, str]
    # Express: billed per execution and duration instead of per state transition, at least once
    # (names are not deduplicated) and at most 5 minutes, with no .waitForTaskToken.
    express: bool = False


STATE_MACHINES: tuple[StateMachine, ...] = (
    StateMachine(
        "preempt",
        "preempt.asl.json",
        ENV_PREEMPT_STATE_MACHINE_ARN,
        {"WorkflowTasksFunctionArn": "workflow_tasks"},
    ),
    # The launch is Express: its steps are idempotent per run (SubmitJob looks up the run's
    # deterministic job name before submitting; recording the Batch job id is a conditional write),
    # so Standard's exactly-once start buys nothing, while its transitions were the largest part of
    # the per-job bill. It runs in seconds (its retries back off for about a minute at most).
    StateMachine(
        "launch",
        "launch.asl.json",
        ENV_LAUNCH_STATE_MACHINE_ARN,
        {"WorkflowTasksFunctionArn": "workflow_tasks"},
        express=True,
    ),
)

# What bounds each function's concurrent executions, where the stack enforces a bound (the others
# scale with their events: the API's requests, Batch's and the agents' events, the workflows'
# tasks): the scheduler's one FIFO message group, the heartbeat queue's MaximumConcurrency, and
# the reconciler's schedule (one run every RECONCILER_RATE_MINUTES, each under its timeout).
BOUNDED_CONCURRENCY: dict[str, int] = {
    "scheduler": 1,
    HEARTBEAT_QUEUE.function: HEARTBEAT_QUEUE.max_concurrency,
    "reconciler": 1,
}
# The Spot-warning path's first hop, which must run within the 2-minute notice: it marks the
# jobs on the instance CHECKPOINTING (their agents see it) and starts their preempt workflows,
# whose Lambda tasks retry a throttle. `spot_warning_reserved_concurrency` (cdk.json) reserves
# concurrency for it; without, it needs this much left beside BOUNDED_CONCURRENCY (a reclaim
# warns several instances at once, each warning one short execution).
SPOT_WARNING_FUNCTION = "spot_interruption"
SPOT_WARNING_CONCURRENCY = 2

# Periodic triggers: the scheduler's tick (aging, deadlines) and the reconciler.
SCHEDULER_TICK_RATE_MINUTES = 1
RECONCILER_RATE_MINUTES = 5


# The public layer of Powertools for AWS Lambda (Python) that the functions run with (account of
# the commercial partition; China and GovCloud publish from other accounts). The stack adds it,
# `spotline doctor` checks the configured version exists in the region.
POWERTOOLS_LAYER_ACCOUNT = "017000801446"
POWERTOOLS_LAYER_NAME = "AWSLambdaPowertoolsPythonV3-python312-x86_64"


# What every function's environment holds besides the deployment's names (`ENV_*`): Powertools'
# settings, and pydantic told that no plugins are installed (else its first model build scans the
# metadata of every installed distribution for plugin entry points: 10-20 ms of each cold start here,
# more the more distributions there are). `bench.cold_start` imports the handlers with it.
POWERTOOLS_SERVICE_NAME = "spotline"
POWERTOOLS_METRICS_NAMESPACE = "Spotline"


def function_environment(tracing: bool) -> dict[str, str]:
    """The fixed part of every function's environment (`tracing`: X-Ray on)."""
    return {
        "POWERTOOLS_TRACE_DISABLED": "false" if tracing else "true",
        "POWERTOOLS_SERVICE_NAME": POWERTOOLS_SERVICE_NAME,
        "POWERTOOLS_METRICS_NAMESPACE": POWERTOOLS_METRICS_NAMESPACE,
        "POWERTOOLS_LOG_LEVEL": "INFO",
        "PYDANTIC_DISABLE_PLUGINS": "__all__",
    }
