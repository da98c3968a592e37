"""The agent's configuration, read once from the environment a training container gets.

The variable names come from `spotline.resources` (the one place the job definition and the
local fleet take them from); the few that only the agent reads are defined here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from spotline.resources import (
    AGENT_ENV_CHECKPOINT_INTERVAL_S,
    AGENT_ENV_CHECKPOINT_KMS_KEY,
    AGENT_ENV_CHECKPOINT_URI,
    AGENT_ENV_EVENT_BUS,
    AGENT_ENV_INSTANCE_ID,
    AGENT_ENV_JOB_ID,
    AGENT_ENV_JOBS_TABLE,
    AGENT_ENV_POLL_S,
    AGENT_ENV_RUN_ID,
    AGENT_ENV_TEAM,
)

# Agent-only knobs (not part of the job definition contract yet).
AGENT_ENV_HEARTBEAT_S = "SPOTLINE_HEARTBEAT_S"
# How many durable checkpoints a job keeps (older ones are pruned after each checkpoint); 0 keeps all.
AGENT_ENV_KEEP_CHECKPOINTS = "SPOTLINE_KEEP_CHECKPOINTS"
# Set by the command wrapper for its child: a library-using child writes its step / progress there
# so that the wrapper's heartbeats carry them and the child does not send heartbeats of its own.
AGENT_ENV_STATUS_FILE = "SPOTLINE_AGENT_STATUS_FILE"


def sigterm_marker(status_file: str) -> str:
    """The file a library-using child creates beside its status file when SIGTERM reaches it: the
    wrapper then reports the run as stopped, whatever status the child exits with."""
    return status_file + ".sigterm"


# Set by AWS Batch in every container (and by the local fleet): the run's Batch job id. A node of
# a multi-node parallel job is a child job, `<job id>#<node index>`.
ENV_BATCH_JOB_ID = "AWS_BATCH_JOB_ID"
# Set by AWS Batch on every node of a multi-node parallel job (a gang job).
ENV_BATCH_NODE_INDEX = "AWS_BATCH_JOB_NODE_INDEX"
ENV_BATCH_MAIN_NODE_INDEX = "AWS_BATCH_JOB_MAIN_NODE_INDEX"

# Set by torchrun (and torch.distributed's launchers) on every worker process.
ENV_RANK = "RANK"
ENV_LOCAL_RANK = "LOCAL_RANK"

# Standard AWS SDK variables for instance metadata, honoured the way botocore honours them.
ENV_IMDS_ENDPOINT = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
ENV_IMDS_DISABLED = "AWS_EC2_METADATA_DISABLED"
IMDS_DEFAULT_ENDPOINT = "http://169.254.169.254"
# Present inside an AWS Batch / ECS container: the only places where the agent talks to IMDS
# without being told to (a laptop has no IMDS, and probing 169.254.169.254 there only costs time).
_ON_AWS_MARKERS = (ENV_BATCH_JOB_ID, "ECS_CONTAINER_METADATA_URI_V4", "ECS_CONTAINER_METADATA_URI")

DEFAULT_JOB_ID = "local"
DEFAULT_CHECKPOINT_INTERVAL_S = 600.0
DEFAULT_POLL_S = 5.0
DEFAULT_HEARTBEAT_S = 30.0
DEFAULT_KEEP_CHECKPOINTS = 3
# AWS publishes the Spot instance-action two minutes ahead and recommends polling every 5 s.
SPOT_POLL_S = 5.0


@dataclass(frozen=True)
class AgentSettings:
    """Everything the agent needs to know about its job and its surroundings.

    A `None` disables the matching feature: no checkpoint store, no polling of the jobs table,
    no events (logged instead), no instance metadata.
    """

    job_id: str = DEFAULT_JOB_ID
    # The job's team (SPOTLINE_TEAM): the agent's event source and its signal item carry it.
    team: str | None = None
    # The run this container is (SPOTLINE_RUN_ID, set by the launcher): named in every event, so
    # the control plane credits its checkpoints and heartbeats to this run only.
    run_id: str | None = None
    checkpoint_uri: str | None = None
    # The team's KMS key for checkpoints (SPOTLINE_CHECKPOINT_KMS_KEY), named on every upload.
    checkpoint_kms_key: str | None = None
    jobs_table: str | None = None
    event_bus: str | None = None
    instance_id: str | None = None
    # <= 0 disables periodic checkpoints (checkpoints on request, Spot notice and SIGTERM remain).
    checkpoint_interval_s: float = DEFAULT_CHECKPOINT_INTERVAL_S
    poll_s: float = DEFAULT_POLL_S
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    spot_poll_s: float = SPOT_POLL_S
    imds_endpoint: str | None = None
    status_file: str | None = None
    # Durable checkpoints kept per job (the newest ones); 0 keeps every checkpoint.
    keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS
    # This container's Batch job (AWS_BATCH_JOB_ID, which Batch and the local fleet set): for a
    # node of a gang job, the gang's job (the `#<node index>` of the child job dropped).
    batch_job_id: str | None = None
    # In a gang job: this node's index and the main node's (None elsewhere).
    node_index: int | None = None
    main_node_index: int | None = None
    # Under torchrun: this worker's global rank and its rank on its node (None elsewhere).
    rank: int | None = None
    local_rank: int | None = None

    @property
    def is_main_node(self) -> bool:
        """True unless this is a node of a gang job other than its main node. Only the main node
        writes checkpoints and sends events: the nodes of a data-parallel gang hold the same
        state, and one writer keeps one manifest per checkpoint."""
        return (
            self.node_index is None or self.main_node_index is None or self.node_index == self.main_node_index
        )

    @property
    def is_node_leader(self) -> bool:
        """The one process per node that polls the control plane and instance metadata and
        sends heartbeats: local rank 0 under torchrun, the process itself elsewhere."""
        return self.local_rank is None or self.local_rank == 0

    @property
    def is_writer(self) -> bool:
        """The one process of a job that writes manifests and sends `Checkpoint Completed`: the
        main node's, and under torchrun its global rank 0. (A sharded checkpoint's other ranks
        upload their own shards; the writer commits the manifest once all are up.)"""
        return self.is_main_node and (self.rank is None or self.rank == 0)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> AgentSettings:
        """Parse the training container's environment (os.environ by default)."""
        env = os.environ if env is None else env
        return cls(
            job_id=_text(env, AGENT_ENV_JOB_ID) or DEFAULT_JOB_ID,
            team=_text(env, AGENT_ENV_TEAM),
            checkpoint_kms_key=_text(env, AGENT_ENV_CHECKPOINT_KMS_KEY),
            run_id=_text(env, AGENT_ENV_RUN_ID),
            checkpoint_uri=_text(env, AGENT_ENV_CHECKPOINT_URI),
            jobs_table=_text(env, AGENT_ENV_JOBS_TABLE),
            event_bus=_text(env, AGENT_ENV_EVENT_BUS),
            instance_id=_text(env, AGENT_ENV_INSTANCE_ID),
            checkpoint_interval_s=_seconds(
                env, AGENT_ENV_CHECKPOINT_INTERVAL_S, DEFAULT_CHECKPOINT_INTERVAL_S
            ),
            poll_s=_seconds(env, AGENT_ENV_POLL_S, DEFAULT_POLL_S),
            heartbeat_s=_seconds(env, AGENT_ENV_HEARTBEAT_S, DEFAULT_HEARTBEAT_S),
            imds_endpoint=imds_endpoint_from_env(env),
            status_file=_text(env, AGENT_ENV_STATUS_FILE),
            keep_checkpoints=_count(env, AGENT_ENV_KEEP_CHECKPOINTS, DEFAULT_KEEP_CHECKPOINTS),
            batch_job_id=_run_of(_text(env, ENV_BATCH_JOB_ID)),
            node_index=_index(env, ENV_BATCH_NODE_INDEX),
            main_node_index=_index(env, ENV_BATCH_MAIN_NODE_INDEX),
            rank=_index(env, ENV_RANK),
            local_rank=_index(env, ENV_LOCAL_RANK),
        )


def _run_of(batch_job_id: str | None) -> str | None:
    """The Batch job a container runs for: a gang node's child job `<id>#<n>` runs for `<id>`."""
    if batch_job_id is None:
        return None
    parent, sep, index = batch_job_id.rpartition("#")
    return parent if sep and parent and index.isdigit() else batch_job_id


def imds_endpoint_from_env(env: Mapping[str, str]) -> str | None:
    """The instance metadata endpoint to use, or None where there is none to ask.

    An explicit AWS_EC2_METADATA_SERVICE_ENDPOINT always wins (tests point it at a local server);
    otherwise IMDS is used only inside a Batch / ECS container, and not under the local runtime,
    which names the instance itself (SPOTLINE_INSTANCE_ID) and sets AWS_BATCH_JOB_ID as Batch does.
    """
    if (_text(env, ENV_IMDS_DISABLED) or "").lower() == "true":
        return None
    explicit = _text(env, ENV_IMDS_ENDPOINT)
    if explicit:
        return explicit.rstrip("/")
    if _text(env, AGENT_ENV_INSTANCE_ID):
        return None
    if any(_text(env, marker) for marker in _ON_AWS_MARKERS):
        return IMDS_DEFAULT_ENDPOINT
    return None


def _text(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = _text(env, name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from exc


def _index(env: Mapping[str, str], name: str) -> int | None:
    raw = _text(env, name)
    if raw is None:
        return None
    if not raw.isdigit():
        raise ValueError(f"{name} must be a node index (0, 1, ...), got {raw!r}")
    return int(raw)


def _count(env: Mapping[str, str], name: str, default: int) -> int:
    raw = _text(env, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(f"{name} must be a whole number, got {raw!r}") from exc
    if value < 0:
        raise ValueError(f"{name} must be 0 (keep all) or more, got {value}")
    return value
