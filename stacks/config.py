"""The deployment's settings, read once from the CDK context (cdk.json, `-c key=value`).

Everything the stack needs beyond `spotline.resources` lives here: GPU pools, teams and the
identities that map to them, the scheduler overrides, the VPC to use and a few operational knobs.
Parsing is strict: a misspelt key or an impossible pool fails the synth with a message naming it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from spotline.control.settings import SpotlineConfig
from spotline.control.sizing import INSTANCE_SHAPES, efa_interfaces, supports_efa
from spotline.domain import SchedulerConfig
from spotline.resources import TEAM_NAME_PATTERN

# vCPUs and GPUs of one instance, for the GPU instance types a pool is likely to use (from the
# table that sizes containers). Batch sizes a compute environment in vCPUs; Spotline thinks in
# GPUs. A pool may give `vcpus_per_gpu` itself for a type missing here.
GPU_INSTANCE_SHAPES: Mapping[str, tuple[int, int]] = {
    t: (s.vcpus, s.gpus) for t, s in INSTANCE_SHAPES.items()
}

# A created VPC without `availability_zones` spans the region's first this many AZs.
DEFAULT_AZ_COUNT = 2
# AWS Batch's default quota of compute environments (and of job queues) per account and Region.
BATCH_COMPUTE_ENVIRONMENTS_QUOTA = 50


def job_queue_name(stage: str, pool: str, team: str | None = None) -> str:
    """A pool's Batch job queue (`spotline-<stage>-<pool>`), or with `team_instances` the queue
    of that team's own instances in the pool (`spotline-<stage>-<pool>-<team>`)."""
    return f"spotline-{stage}-{pool}" + (f"-{team}" if team else "")


PURCHASE_SPOT = "spot"
PURCHASE_ON_DEMAND = "on-demand"

_POOL_KEYS = {
    "name",
    "gpu_type",
    "instance_types",
    "purchase",
    "max_gpus",
    "gpus_per_node",
    "vcpus_per_gpu",
    "price",
    "interruption_rate_per_hour",
    "placement_group",
    "efa",
    "availability_zone",
    "reservation",
}
_RESERVATION_KEYS = {"capacity_reservation_id", "resource_group_arn", "instances", "start", "end"}
_CAPACITY_RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")
_RESOURCE_GROUP_ARN = re.compile(r"^arn:aws[a-z-]*:resource-groups:[a-z0-9-]+:\d{12}:group/[A-Za-z0-9._-]+$")
CONTEXT_KEYS = frozenset(
    {
        "stage",
        "account",
        "region",
        "pools",
        "teams",
        "identities",
        "scheduler",
        "vpc_id",
        "vpc_subnet_ids",
        "vpc_availability_zones",
        "api_rate_limit",
        "api_burst_limit",
        "training_image",
        "training_vcpus",
        "training_memory_gib",
        "powertools_layer_version",
        "log_retention_days",
        "checkpoint_noncurrent_version_days",
        "access_log_expiration_days",
        "agent_poll_s",
        "scheduler_reserved_concurrency",
        "spot_warning_reserved_concurrency",
        "nat_gateways",
        "nat_per_zone",
        "vpc_endpoints",
        "team_instances",
        "control_plane",
        "tracing",
        "checkpoint_kms_per_team",
        "availability_zones",
        "alarm_topic_arn",
        "adopt_training_repository",
        "target",
    }
)

# Where the stack deploys: AWS, or LocalStack (`cdk synth -c target=localstack`, docs/deploy.md),
# whose free edition runs no AWS Batch and cannot fetch the public Powertools layer.
TARGET_AWS = "aws"
TARGET_LOCALSTACK = "localstack"
TARGETS = (TARGET_AWS, TARGET_LOCALSTACK)
# The created or imported VPC's settings: target localstack refuses them (it creates no VPC).
NETWORK_KEYS = (
    "vpc_id",
    "vpc_subnet_ids",
    "vpc_availability_zones",
    "availability_zones",
    "nat_gateways",
    "nat_per_zone",
    "vpc_endpoints",
)


class ConfigError(ValueError):
    """The CDK context describes an impossible deployment."""


@dataclass(frozen=True)
class ReservationConfig:
    """A reserved pool's capacity: a Capacity Block (`capacity_reservation_id`) or an On-Demand
    Capacity Reservation group (`resource_group_arn`), its instances, and its window (epoch s)."""

    instances: int
    start: float
    end: float
    capacity_reservation_id: str | None = None
    resource_group_arn: str | None = None

    @property
    def is_capacity_block(self) -> bool:
        return self.capacity_reservation_id is not None

    @property
    def reservation_id(self) -> str:
        """What the EC2 events name: the reservation's id, or the group's ARN."""
        return self.capacity_reservation_id or self.resource_group_arn or ""


@dataclass(frozen=True)
class PoolConfig:
    """One GPU pool: a Batch managed EC2 compute environment and its job queue."""

    name: str
    gpu_type: str
    instance_types: tuple[str, ...]
    purchase: str
    max_gpus: int
    gpus_per_node: int
    vcpus_per_gpu: int
    # Passed through to the scheduler's pool model (relative price, Spot reclaim rate).
    price: float | None = None
    interruption_rate_per_hour: float | None = None
    # A cluster placement group for the pool's instances (low latency between a gang's nodes).
    # Default: On-Demand pools, the only ones that run gang jobs.
    placement_group: bool = False
    # Launch the instances with an Elastic Fabric Adapter (every instance type must support it).
    efa: bool = False
    # The one AZ of a pool with a placement group (a cluster placement group lives in one AZ, so
    # its compute environment gets that AZ's subnet only). None: the VPC's first AZ.
    # `spotline doctor` checks that the pool's instance types are offered there.
    availability_zone: str | None = None
    # A reserved pool (a Capacity Block or an ODCR group): its own launch template targets it.
    reservation: ReservationConfig | None = None

    @property
    def is_spot(self) -> bool:
        return self.purchase == PURCHASE_SPOT

    @property
    def max_vcpus(self) -> int:
        """Batch's ceiling for the compute environment: enough vCPUs for `max_gpus` GPUs on the
        most CPU-heavy of the pool's instance types."""
        return self.max_gpus * self.vcpus_per_gpu


@dataclass(frozen=True)
class DeploymentConfig:
    stage: str
    pools: tuple[PoolConfig, ...]
    # Target account and region. cdk.json names a region and no account: the stack deploys into the
    # credentials' account and takes its AZs there at deploy time (Fn::GetAZs), so synth needs no
    # lookup. `-c account=...` makes the CDK CLI look the AZs up (with credentials) instead.
    account: str | None = None
    region: str | None = None
    teams: tuple[Mapping[str, Any], ...] = ()
    identities: Mapping[str, Any] = field(default_factory=dict)
    scheduler: Mapping[str, Any] = field(default_factory=dict)
    # Other top-level fields of SPOTLINE_CONFIG (spotline.control.settings.SpotlineConfig), e.g.
    # grace_period_s, heartbeat_timeout_s, start_timeout_s.
    control_plane: Mapping[str, Any] = field(default_factory=dict)
    # An existing VPC (imported without a lookup: its private subnets and their AZs are given).
    vpc_id: str | None = None
    vpc_subnet_ids: tuple[str, ...] = ()
    vpc_availability_zones: tuple[str, ...] = ()
    # The AZs of a created VPC (GPU instance types exist only in some; `spotline doctor` checks).
    # Empty: the region's first two.
    availability_zones: tuple[str, ...] = ()
    # An SNS topic the alarms notify (None: alarms without actions, seen on the console).
    alarm_topic_arn: str | None = None
    # NAT gateways of a created VPC (1 keeps the fixed cost low; one per AZ for zonal resilience).
    nat_gateways: int = 1
    # One NAT gateway in each AZ of a created VPC (`nat_gateways` = the number of AZs): with one,
    # losing its AZ cuts the other AZ's instances off from everything NAT reaches (docs/deploy.md).
    nat_per_zone: bool = False
    # Interface endpoints in a created VPC for what the instances call (ECR, ECS and its agent's
    # channels, CloudWatch Logs, STS, EventBridge): AWS traffic stays in each AZ, off the NAT.
    vpc_endpoints: bool = False
    # Each team's jobs run on instances of its own (a compute environment and job queue per
    # team and pool): Batch runs single-node jobs in host network mode, where a container
    # reaches every other container's network on its instance (docs/security.md, "Host isolation").
    team_instances: bool = True
    api_rate_limit: float = 50.0
    api_burst_limit: int = 100
    # The job definition's image. None: `<the stack's training repository>:latest`, the image
    # built from images/training/Dockerfile and pushed there (README, "Deploying to AWS").
    training_image: str | None = None
    training_vcpus: int = 4
    training_memory_gib: int = 16
    powertools_layer_version: int = 37
    log_retention_days: int = 30
    checkpoint_noncurrent_version_days: int = 7
    access_log_expiration_days: int = 90
    agent_poll_s: float = 5.0
    # None: no reserved concurrency (the FIFO queue's one message group already serializes the
    # passes); an account must keep 100 unreserved, so a limit of 10 refuses any reservation.
    scheduler_reserved_concurrency: int | None = None
    # None: none reserved for the Spot-warning handler (resources.SPOT_WARNING_FUNCTION); it then
    # shares the account's concurrency, which `spotline doctor` checks it fits in. Set it where the
    # account's limit allows (at least 100 more than every reservation).
    spot_warning_reserved_concurrency: int | None = None
    # X-Ray tracing of the Lambda functions (the state machines always trace: cdk-nag SF2).
    tracing: bool = False
    # One KMS key per team for its checkpoints (key policy: that team's job role and the control
    # plane only); off: the bucket's SSE-S3 encryption for every team.
    checkpoint_kms_per_team: bool = False
    # The stack's training repository (`spotline-<stage>-train`) survives a `cdk destroy` (it
    # holds the teams' images); a later deploy adopts it by name instead of creating it anew,
    # which would fail ("already exists"). docs/upgrade-and-teardown.md.
    adopt_training_repository: bool = False
    # TARGET_AWS or TARGET_LOCALSTACK (no Batch, no VPC; Powertools and pydantic bundled into
    # the functions' code instead of the public layer).
    target: str = TARGET_AWS

    @property
    def localstack(self) -> bool:
        return self.target == TARGET_LOCALSTACK

    @property
    def team_names(self) -> tuple[str, ...]:
        return tuple(str(t["team"]) for t in self.teams)

    @property
    def queue_owners(self) -> tuple[str | None, ...]:
        """Whose instances each pool has: one compute environment and queue per entry (a team,
        or None for the pool's instances shared by every team)."""
        return self.team_names if self.team_instances and self.team_names else (None,)

    def pool(self, name: str) -> PoolConfig:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(name)


def _require(raw: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in raw or raw[key] in (None, ""):
        raise ConfigError(f"{where}: '{key}' is required")
    return raw[key]


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"{where}: expected a positive integer, got {value!r}")
    return value


def parse_pool(raw: Mapping[str, Any], index: int) -> PoolConfig:
    where = f"pools[{index}]"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected an object")
    unknown = set(raw) - _POOL_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    name = str(_require(raw, "name", where))
    where = f"pool '{name}'"
    purchase = str(_require(raw, "purchase", where))
    if purchase not in (PURCHASE_SPOT, PURCHASE_ON_DEMAND):
        raise ConfigError(f"{where}: 'purchase' must be '{PURCHASE_SPOT}' or '{PURCHASE_ON_DEMAND}'")
    instance_types = tuple(str(t) for t in _require(raw, "instance_types", where))
    if not instance_types:
        raise ConfigError(f"{where}: 'instance_types' is empty")
    max_gpus = _positive_int(_require(raw, "max_gpus", where), f"{where}.max_gpus")
    if "vcpus_per_gpu" in raw:
        vcpus_per_gpu = _positive_int(raw["vcpus_per_gpu"], f"{where}.vcpus_per_gpu")
    else:
        unknown_types = [t for t in instance_types if t not in GPU_INSTANCE_SHAPES]
        if unknown_types:
            raise ConfigError(f"{where}: unknown GPU instance types {unknown_types}; give 'vcpus_per_gpu'")
        vcpus_per_gpu = max(math.ceil(v / g) for v, g in (GPU_INSTANCE_SHAPES[t] for t in instance_types))
    if "gpus_per_node" in raw:
        gpus_per_node = _positive_int(raw["gpus_per_node"], f"{where}.gpus_per_node")
    else:
        shapes = [GPU_INSTANCE_SHAPES[t][1] for t in instance_types if t in GPU_INSTANCE_SHAPES]
        if not shapes:
            raise ConfigError(f"{where}: 'gpus_per_node' is required for these instance types")
        gpus_per_node = min(shapes)
    # (A reserved pool's capacity is where the reservation is: no placement group by default.)
    placement_group = _bool(
        raw.get("placement_group", purchase == PURCHASE_ON_DEMAND and "reservation" not in raw),
        f"{where}.placement_group",
    )
    if placement_group and purchase == PURCHASE_SPOT:
        raise ConfigError(
            f"{where}: a Spot pool runs no gang job (AWS Batch runs multi-node jobs On-Demand only), "
            "so it gets no placement group"
        )
    efa = _bool(raw.get("efa", False), f"{where}.efa")
    if efa and not supports_efa(instance_types):
        raise ConfigError(
            f"{where}: 'efa' needs instance types that support EFA; {list(instance_types)} do not all"
        )
    if efa and efa_interfaces(instance_types) == 0:
        raise ConfigError(
            f"{where}: 'efa' needs instance types with the same number of EFA interfaces (one launch "
            f"template attaches all of them); {list(instance_types)} differ"
        )
    if efa and not placement_group:
        raise ConfigError(
            f"{where}: 'efa' needs the pool's cluster placement group (AWS Batch wants every instance "
            "with an EFA in one): an On-Demand pool with 'placement_group' true"
        )
    reservation = None
    if "reservation" in raw:
        if purchase != PURCHASE_ON_DEMAND:
            raise ConfigError(
                f"{where}: a reserved pool has purchase '{PURCHASE_ON_DEMAND}' (it is not Spot)"
            )
        reservation = parse_reservation(raw["reservation"], f"{where}.reservation", instance_types)
        expected = reservation.instances * gpus_per_node
        if max_gpus != expected:
            raise ConfigError(
                f"{where}: max_gpus {max_gpus} is not the reservation's {reservation.instances} instances x"
                f" {gpus_per_node} GPUs ({expected})"
            )
    zone = raw.get("availability_zone")
    if zone is not None and not placement_group:
        raise ConfigError(
            f"{where}: 'availability_zone' pins a pool with a placement group to one AZ; this pool has none"
        )
    return PoolConfig(
        name=name,
        gpu_type=str(_require(raw, "gpu_type", where)),
        instance_types=instance_types,
        purchase=purchase,
        max_gpus=max_gpus,
        gpus_per_node=gpus_per_node,
        vcpus_per_gpu=vcpus_per_gpu,
        price=float(raw["price"]) if "price" in raw else None,
        interruption_rate_per_hour=(
            float(raw["interruption_rate_per_hour"]) if "interruption_rate_per_hour" in raw else None
        ),
        placement_group=placement_group,
        efa=efa,
        availability_zone=str(zone) if zone else None,
        reservation=reservation,
    )


def parse_reservation(raw: Any, where: str, instance_types: tuple[str, ...]) -> ReservationConfig:
    """A pool's `reservation`: exactly one of `capacity_reservation_id` (a Capacity Block, one
    instance type) and `resource_group_arn` (an ODCR group, its instance types pinned), the
    `instances` reserved, and `start` and `end` as ISO-8601 times with a zone."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected an object")
    unknown = set(raw) - _RESERVATION_KEYS
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    block_id, group = raw.get("capacity_reservation_id"), raw.get("resource_group_arn")
    if (block_id is None) == (group is None):
        raise ConfigError(f"{where}: give one of 'capacity_reservation_id' and 'resource_group_arn'")
    if block_id is not None and not _CAPACITY_RESERVATION_ID.match(str(block_id)):
        raise ConfigError(f"{where}.capacity_reservation_id: {block_id!r} is not a reservation id (cr-...)")
    if block_id is not None and len(instance_types) != 1:
        raise ConfigError(
            f"{where}: a Capacity Block is of one instance type; the pool lists {list(instance_types)}"
        )
    if group is not None and not _RESOURCE_GROUP_ARN.match(str(group)):
        raise ConfigError(f"{where}.resource_group_arn: {group!r} is not a resource group ARN")
    instances = _positive_int(_require(raw, "instances", where), f"{where}.instances")
    start, end = (
        _instant(_require(raw, "start", where), f"{where}.start"),
        _instant(_require(raw, "end", where), f"{where}.end"),
    )
    if end <= start:
        raise ConfigError(f"{where}: 'end' must be after 'start'")
    return ReservationConfig(
        instances=instances,
        start=start,
        end=end,
        capacity_reservation_id=None if block_id is None else str(block_id),
        resource_group_arn=None if group is None else str(group),
    )


def _instant(value: Any, where: str) -> float:
    """An ISO-8601 time with a zone (e.g. 2026-12-01T11:30:00Z), as epoch seconds."""
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        raise ConfigError(f"{where}: {value!r} is not an ISO-8601 time (e.g. 2026-12-01T11:30:00Z)") from None
    if when.tzinfo is None:
        raise ConfigError(f"{where}: {value!r} needs a zone (e.g. Z)")
    return when.timestamp()


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: {value!r} must be true or false")
    return value


def _tuple_of_str(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigError(f"{where}: expected a list of strings")
    return tuple(str(v) for v in value)


def parse_context(context: Mapping[str, Any]) -> DeploymentConfig:
    """Build the deployment's settings from the CDK context; keys not listed in `CONTEXT_KEYS` are
    left to CDK (feature flags, lookups)."""
    raw = {k: v for k, v in context.items() if k in CONTEXT_KEYS}
    pools_raw = raw.get("pools")
    if not isinstance(pools_raw, Sequence) or not pools_raw:
        raise ConfigError("context 'pools': at least one GPU pool is required")
    pools = tuple(parse_pool(p, i) for i, p in enumerate(pools_raw))
    names = [p.name for p in pools]
    efa_counts = {p.name: efa_interfaces(p.instance_types) for p in pools if p.efa}
    if len(set(efa_counts.values())) > 1:
        raise ConfigError(
            f"context 'pools': the EFA pools' instance types take different numbers of EFA interfaces "
            f"{efa_counts}; each team's one EFA job definition maps a fixed set of devices"
        )
    if len(set(names)) != len(names):
        raise ConfigError(f"context 'pools': duplicate pool names in {names}")
    stage = str(raw.get("stage") or "dev")
    if not stage.replace("-", "").isalnum():
        raise ConfigError(f"context 'stage': {stage!r} must be letters, digits and '-'")
    target = str(raw.get("target") or TARGET_AWS)
    if target not in TARGETS:
        raise ConfigError(f"context 'target': {target!r} must be one of {list(TARGETS)}")
    if target == TARGET_LOCALSTACK:
        asked = sorted(k for k in NETWORK_KEYS if raw.get(k) or (k == "nat_gateways" and k in raw))
        if asked:
            raise ConfigError(
                f"context {asked}: target 'localstack' creates no VPC (it is there only for AWS Batch's "
                "instances, which this target leaves out); remove them from this target's context"
            )
    vpc_id = raw.get("vpc_id") or None
    subnet_ids = _tuple_of_str(raw.get("vpc_subnet_ids"), "context 'vpc_subnet_ids'")
    azs = _tuple_of_str(raw.get("vpc_availability_zones"), "context 'vpc_availability_zones'")
    if vpc_id and (not subnet_ids or len(subnet_ids) != len(azs)):
        raise ConfigError(
            "context 'vpc_id' needs 'vpc_subnet_ids' (private subnets with a route to the internet or "
            "VPC endpoints) and 'vpc_availability_zones' of the same length"
        )
    teams = _teams(raw.get("teams"))
    kms_per_team = _bool(raw.get("checkpoint_kms_per_team", False), "context 'checkpoint_kms_per_team'")
    created_azs = _tuple_of_str(raw.get("availability_zones"), "context 'availability_zones'")
    if vpc_id and created_azs:
        raise ConfigError(
            "context 'availability_zones' is for a created VPC; an imported one uses 'vpc_availability_zones'"
        )
    nat_per_zone = _bool(raw.get("nat_per_zone", False), "context 'nat_per_zone'")
    vpc_endpoints = _bool(raw.get("vpc_endpoints", False), "context 'vpc_endpoints'")
    if vpc_id and (nat_per_zone or vpc_endpoints):
        raise ConfigError(
            "context 'nat_per_zone' and 'vpc_endpoints' are for a created VPC; an imported one "
            "('vpc_id') brings its own NAT and endpoints"
        )
    if nat_per_zone and "nat_gateways" in raw:
        raise ConfigError("context: give 'nat_per_zone' or 'nat_gateways', not both")
    team_instances = _bool(raw.get("team_instances", True), "context 'team_instances'")
    if team_instances and len(pools) * max(1, len(teams)) > BATCH_COMPUTE_ENVIRONMENTS_QUOTA:
        raise ConfigError(
            f"context 'team_instances': {len(pools)} pools x {len(teams)} teams make "
            f"{len(pools) * len(teams)} compute environments and job queues, over AWS Batch's default "
            f"quota of {BATCH_COMPUTE_ENVIRONMENTS_QUOTA}: fewer pools, or 'team_instances': false "
            "(docs/security.md)"
        )
    if team_instances:
        queues = [job_queue_name(stage, p.name, str(t["team"])) for p in pools for t in teams]
        clashing = sorted({q for q in queues if queues.count(q) > 1})
        if clashing:
            raise ConfigError(
                f"context 'pools' and 'teams': pool and team names make the same job queues {clashing}"
            )
    topic = raw.get("alarm_topic_arn") or None
    if topic is not None and not str(topic).startswith("arn:"):
        raise ConfigError(f"context 'alarm_topic_arn': expected an SNS topic ARN, got {topic!r}")
    defaults = DeploymentConfig(stage=stage, pools=pools)
    reserved = raw.get("scheduler_reserved_concurrency", defaults.scheduler_reserved_concurrency)
    spot_reserved = raw.get("spot_warning_reserved_concurrency")
    if spot_reserved is not None:
        spot_reserved = _positive_int(spot_reserved, "context 'spot_warning_reserved_concurrency'")
    return DeploymentConfig(
        stage=stage,
        pools=pools,
        account=str(raw["account"]) if raw.get("account") else None,
        region=str(raw["region"]) if raw.get("region") else None,
        teams=teams,
        identities=dict(raw.get("identities") or {}),
        scheduler=_scheduler(raw.get("scheduler")),
        control_plane=_control_plane(raw.get("control_plane")),
        vpc_id=vpc_id,
        vpc_subnet_ids=subnet_ids,
        vpc_availability_zones=azs,
        availability_zones=created_azs,
        alarm_topic_arn=str(topic) if topic is not None else None,
        nat_gateways=(
            (len(created_azs) or DEFAULT_AZ_COUNT)
            if nat_per_zone
            else _positive_int(int(raw.get("nat_gateways", defaults.nat_gateways)), "context 'nat_gateways'")
        ),
        nat_per_zone=nat_per_zone,
        vpc_endpoints=vpc_endpoints,
        team_instances=team_instances,
        api_rate_limit=float(raw.get("api_rate_limit", defaults.api_rate_limit)),
        api_burst_limit=int(raw.get("api_burst_limit", defaults.api_burst_limit)),
        training_image=str(raw["training_image"]) if raw.get("training_image") else None,
        training_vcpus=int(raw.get("training_vcpus", defaults.training_vcpus)),
        training_memory_gib=int(raw.get("training_memory_gib", defaults.training_memory_gib)),
        powertools_layer_version=int(raw.get("powertools_layer_version", defaults.powertools_layer_version)),
        log_retention_days=int(raw.get("log_retention_days", defaults.log_retention_days)),
        checkpoint_noncurrent_version_days=int(
            raw.get("checkpoint_noncurrent_version_days", defaults.checkpoint_noncurrent_version_days)
        ),
        access_log_expiration_days=int(
            raw.get("access_log_expiration_days", defaults.access_log_expiration_days)
        ),
        agent_poll_s=float(raw.get("agent_poll_s", defaults.agent_poll_s)),
        scheduler_reserved_concurrency=int(reserved) if reserved else None,
        spot_warning_reserved_concurrency=spot_reserved,
        tracing=_bool(raw.get("tracing", defaults.tracing), "context 'tracing'"),
        checkpoint_kms_per_team=kms_per_team,
        adopt_training_repository=_bool(
            raw.get("adopt_training_repository", False), "context 'adopt_training_repository'"
        ),
        target=target,
    )


# SPOTLINE_CONFIG's fields that the stack writes itself: `control_plane` may not set them.
_WRITTEN_BY_THE_STACK = frozenset(
    {"pools", "job_definitions", "job_definition", "efa_job_definitions", "multinode_job_definition"}
    | {"teams", "identities", "scheduler", "agent_poll_s"}
)


def _scheduler(value: Any) -> dict[str, Any]:
    """The `scheduler` context: settings of `SchedulerConfig`, checked now (a removed or misspelt
    one is named, never dropped)."""
    scheduler = dict(value or {})
    try:
        SchedulerConfig.model_validate(scheduler)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in e['loc'])}: {e['msg']}" if e["loc"] else e["msg"]
            for e in error.errors()
        )
        raise ConfigError(f"context 'scheduler': {problems}") from error
    return scheduler


def _control_plane(value: Any) -> dict[str, Any]:
    """The `control_plane` context: the control plane's own settings (`SpotlineConfig`'s), names
    checked now (their values when the stack builds SPOTLINE_CONFIG)."""
    control_plane = dict(value or {})
    settings = set(SpotlineConfig.model_fields) - _WRITTEN_BY_THE_STACK
    unknown = sorted(str(key) for key in control_plane if key not in settings)
    if unknown:
        raise ConfigError(
            f"context 'control_plane': not a setting of this version: {', '.join(unknown)}"
            " (the settings: docs/concepts/scheduling-policy.md)"
        )
    return control_plane


def _teams(value: Any) -> tuple[Mapping[str, Any], ...]:
    """The teams, each named by a `TEAM_NAME_PATTERN` name (it becomes part of IAM patterns:
    `checkpoints/<team>/*`, `signal#<team>#*`, `spotline.agent.<team>`). A stack needs at least one
    (each team's jobs run under its own job definition; the stack's SPOTLINE_CONFIG check says so)."""
    if value is None:
        return ()
    if not isinstance(value, Sequence) or isinstance(value, str):
        raise ConfigError("context 'teams': expected a list of teams")
    names: list[str] = []
    for index, team in enumerate(value):
        if not isinstance(team, Mapping) or not isinstance(team.get("team"), str):
            raise ConfigError(f"teams[{index}]: expected an object with a 'team' name")
        if not re.fullmatch(TEAM_NAME_PATTERN, team["team"]):
            raise ConfigError(
                f"teams[{index}]: team name {team['team']!r} must be 1-32 lower-case letters, digits and"
                " '-', starting with a letter or digit"
            )
        names.append(team["team"])
    if len(set(names)) != len(names):
        raise ConfigError(f"context 'teams': duplicate team names in {names}")
    return tuple(value)
