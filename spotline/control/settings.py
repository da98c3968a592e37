"""Typed settings of the control plane, parsed once from the environment (`resources.ENV_*`).

`SPOTLINE_CONFIG` carries the deployment's policy as JSON: pools (each backed by one Batch job
queue), teams and their quotas, which identity belongs to which team, and overrides of the
domain's `SchedulerConfig`. Handlers call `get_settings()`; nothing is parsed at import time, so
importing a function module stays cheap.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from spotline import resources
from spotline.domain import Pool, Priority, SchedulerConfig, TeamQuota


def principal_key(arn: str) -> str:
    """What an identity is matched by: a role ARN without its path (`role/aws-reserved/sso.amazonaws.com/
    AWSReservedSSO_x` -> `role/AWSReservedSSO_x`), since an assumed-role session names only the
    role; a role's name is unique in its account. Anything else as it is."""
    prefix, separator, resource = arn.partition(":role/")
    if not separator or not prefix.startswith("arn:") or ":iam::" not in prefix:
        return arn
    return f"{prefix}:role/{resource.rsplit('/', 1)[-1]}"


class SettingsError(ValueError):
    """The environment does not describe a usable deployment (names the variable at fault)."""


class PoolSettings(Pool):
    """A domain `Pool` plus the Batch job queue (name or ARN) that runs its jobs."""

    job_queue: str | None = Field(default=None, min_length=1)
    # Team -> the job queue of that team's own instances in this pool (the stack's
    # `team_instances`: teams never share an instance); a team not listed uses `job_queue`.
    team_job_queues: dict[str, str] = Field(default_factory=dict)
    # The compute environment's EC2 instance types: containers are sized from them
    # (spotline.control.sizing); none or unknown ones leave the job definition's vCPUs and memory.
    instance_types: tuple[str, ...] = ()
    # The instances have an Elastic Fabric Adapter: jobs run under their team's EFA job
    # definition (`efa_job_definitions`), which maps the EFA device into the container.
    efa: bool = False

    @model_validator(mode="after")
    def _has_a_queue(self) -> PoolSettings:
        if self.job_queue is None and not self.team_job_queues:
            raise ValueError(f"pool {self.name}: give job_queue or team_job_queues")
        return self

    def queue_for(self, team: str) -> str:
        """The job queue that runs `team`'s jobs in this pool."""
        queue = self.team_job_queues.get(team, self.job_queue)
        if queue is None:
            raise ValueError(f"pool {self.name} has no job queue for team {team}")
        return queue

    @property
    def job_queues(self) -> tuple[str, ...]:
        """Every job queue of the pool."""
        shared = () if self.job_queue is None else (self.job_queue,)
        return (*shared, *self.team_job_queues.values())


class TeamSettings(TeamQuota):
    """A domain `TeamQuota` plus the highest priority class the team may ask for."""

    max_priority: Priority = Priority.CRITICAL
    # A monthly budget in dollars (None: none), with its thresholds as fractions of it: past
    # `budget_soft` the team's fair-share weight is scaled by `BUDGET_SOFT_WEIGHT` (and the team
    # gets a `Budget Threshold Crossed` event); past `budget_hard` new submissions are refused
    # (402), except critical ones when `budget_critical_exempt`. Running jobs continue.
    budget_usd: float | None = Field(default=None, gt=0)
    budget_soft: float = Field(default=0.8, gt=0)
    budget_hard: float = Field(default=1.0, gt=0)
    budget_critical_exempt: bool = False


class SpotlineConfig(BaseModel):
    """The JSON in `SPOTLINE_CONFIG`."""

    model_config = ConfigDict(defer_build=True, extra="forbid", frozen=True)

    pools: tuple[PoolSettings, ...] = Field(min_length=1)
    # Team -> the Batch job definition (name or ARN) its jobs run under: each carries its team's
    # job role (docs/security.md). A team missing here cannot launch; `job_definition` is used
    # only where no team has one (a single-role deployment, tests).
    job_definitions: dict[str, str] = Field(default_factory=dict)
    job_definition: str | None = Field(default=None, min_length=1)
    # Team -> the job definition its jobs run under in an EFA pool (`efa` pools): the team's, plus
    # the EFA device and the libfabric / NCCL environment. Needed for every team with an entry in
    # `job_definitions` when a pool has `efa`.
    efa_job_definitions: dict[str, str] = Field(default_factory=dict)
    # Job definition for gang jobs (nodes > 1) of the single-role setup: a Batch multi-node
    # parallel definition. None, and always with `job_definitions`: the launcher derives one from
    # the job's definition (`AwsBatchLauncher`).
    multinode_job_definition: str | None = None
    teams: tuple[TeamSettings, ...] = ()
    # IAM principal ARN (user or role), or a local access key -> team.
    identities: dict[str, str] = Field(default_factory=dict)
    # IAM principal ARNs (users or roles) that may read the whole deployment's history
    # (`GET /admin/history`, `spotline history export`); an admin needs no team.
    admins: tuple[str, ...] = ()
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig)
    # How long a preempted job has to write its checkpoint before it is stopped anyway.
    grace_period_s: int = Field(default=120, ge=1)
    # A Spot interruption warning comes this long before the instance is reclaimed.
    spot_notice_s: int = Field(default=120, ge=1)
    # Seconds kept back from a Spot notice for terminating the job before EC2 does.
    spot_notice_margin_s: int = Field(default=10, ge=0)
    # A running job silent for this long is treated as lost with its host.
    heartbeat_timeout_s: float = Field(default=600.0, gt=0)
    # An admitted job whose Batch job never started after this long is requeued (no capacity).
    start_timeout_s: float = Field(default=1800.0, gt=0)
    # A Spot launch RUNNABLE in Batch this long counts as Spot capacity missing in its pool
    # (`spotline.control.spot_signals`; the deadline guard reads the pool's history from it).
    spot_missing_after_s: float = Field(default=300.0, gt=0)
    # A job whose host was lost this many times is not requeued again but FAILED with the reason
    # (a cap on requeue loops; a Spot-tolerant job moves On-Demand earlier, after the scheduler's
    # `max_interruptions_on_spot`).
    max_interruptions: int = Field(default=5, ge=0)
    # How often the agent should read its job record (passed to the container).
    agent_poll_s: float = Field(default=5.0, gt=0)
    # Seed of the scheduler's random source (None: the system's). Only the `random` victim
    # strategy draws from it.
    seed: int | None = None

    @model_validator(mode="after")
    def _consistent(self) -> SpotlineConfig:
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise ValueError("pools: pool names must be unique")
        if not self.job_definitions and not self.job_definition:
            raise ValueError("job_definitions: give each team's job definition (or one job_definition)")
        teams = {t.team for t in self.teams}
        if len(teams) != len(self.teams):
            raise ValueError("teams: team names must be unique")
        unknown = sorted({team for team in self.identities.values() if teams and team not in teams})
        if unknown:
            raise ValueError(f"identities: teams {unknown} have no entry in teams")
        if any(pool.efa for pool in self.pools):
            missing = sorted(set(self.job_definitions) - set(self.efa_job_definitions))
            if missing:
                raise ValueError(f"efa_job_definitions: an EFA pool needs one for teams {missing}")
        for pool in self.pools:
            if pool.job_queue is None:
                queueless = sorted((set(self.job_definitions) | teams) - set(pool.team_job_queues))
                if queueless:
                    raise ValueError(f"pools: pool {pool.name} has no job queue for teams {queueless}")
        undeclared = sorted(team for team in self.job_definitions if teams and team not in teams)
        if undeclared:
            raise ValueError(f"job_definitions: teams {undeclared} have no entry in teams")
        by_key: dict[str, tuple[str, str]] = {}
        for arn, team in self.identities.items():
            seen = by_key.setdefault(principal_key(arn), (arn, team))
            if seen[1] != team:
                raise ValueError(
                    f"identities: {seen[0]} and {arn} are the same role (roles match by account and "
                    f"name) but map to teams {seen[1]} and {team}"
                )
        return self

    @property
    def pools_by_name(self) -> dict[str, PoolSettings]:
        return {p.name: p for p in self.pools}

    @property
    def teams_by_name(self) -> dict[str, TeamSettings]:
        return {t.team: t for t in self.teams}

    @property
    def gpu_types(self) -> frozenset[str]:
        return frozenset(p.gpu_type for p in self.pools)


class Settings(BaseModel):
    """Everything a function needs to know about its deployment."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    jobs_table: str
    timeline_table: str
    ledger_table: str
    instances_table: str
    idempotency_table: str
    event_bus: str
    # Unset in the workflows' own task function (the stack cannot give a function the ARN of a
    # state machine that invokes it); only the functions that start workflows need them.
    preempt_state_machine_arn: str | None = None
    launch_state_machine_arn: str | None = None
    # Optional: without a queue a finished preemption relies on its Job State Changed event
    # (rule CapacityFreed) to trigger the next pass.
    scheduler_queue_url: str | None = None
    checkpoint_bucket: str | None = None
    # The training containers' CloudWatch log group (None: logs are read elsewhere, e.g. locally).
    training_log_group: str | None = None
    config: SpotlineConfig

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Settings:
        """Parse the environment; a missing or malformed variable raises `SettingsError`."""

        def required(name: str) -> str:
            value = environ.get(name, "").strip()
            if not value:
                raise SettingsError(f"environment variable {name} is not set")
            return value

        raw_config = required(resources.ENV_CONFIG)
        try:
            config = SpotlineConfig.model_validate(json.loads(raw_config))
        except (json.JSONDecodeError, ValidationError) as error:
            raise SettingsError(f"{resources.ENV_CONFIG}: {error}") from error
        return cls(
            jobs_table=required(resources.ENV_JOBS_TABLE),
            timeline_table=required(resources.ENV_TIMELINE_TABLE),
            ledger_table=required(resources.ENV_LEDGER_TABLE),
            instances_table=required(resources.ENV_INSTANCES_TABLE),
            idempotency_table=required(resources.ENV_IDEMPOTENCY_TABLE),
            event_bus=required(resources.ENV_EVENT_BUS),
            preempt_state_machine_arn=environ.get(resources.ENV_PREEMPT_STATE_MACHINE_ARN) or None,
            launch_state_machine_arn=environ.get(resources.ENV_LAUNCH_STATE_MACHINE_ARN) or None,
            scheduler_queue_url=environ.get(resources.ENV_SCHEDULER_QUEUE_URL) or None,
            checkpoint_bucket=environ.get(resources.ENV_CHECKPOINT_BUCKET) or None,
            training_log_group=environ.get(resources.ENV_TRAINING_LOG_GROUP) or None,
            config=config,
        )

    def state_machine_arn(self, name: str) -> str:
        """The ARN of workflow `name` ("preempt" or "launch"); SettingsError where it is unset."""
        arn = {"preempt": self.preempt_state_machine_arn, "launch": self.launch_state_machine_arn}.get(name)
        if not arn:
            env = {m.name: m.env for m in resources.STATE_MACHINES}.get(name, name)
            raise SettingsError(f"environment variable {env} is not set")
        return arn

    def checkpoint_uri(self, team: str, job_id: str) -> str | None:
        """Where the agent writes a job's checkpoints (None: the agent's own default)."""
        if self.checkpoint_bucket is None:
            return None
        return f"s3://{self.checkpoint_bucket}/{resources.checkpoint_prefix(team)}{job_id}/"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings of this process, parsed on first use (a Lambda container parses once)."""
    return Settings.from_env(os.environ)
