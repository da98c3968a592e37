"""`ControlPlane`: everything a service needs, built once per process.

On Lambda it is built from the environment (`build_control_plane(get_settings(),
default_clients())`); the local runtime and the tests build it with their own launcher,
clock or clients. Nothing here talks to AWS at construction time.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from spotline.aws.batch import AwsBatchLauncher, BatchLauncher, EcsInstanceResolver, InstanceResolver
from spotline.aws.clients import AwsClients
from spotline.aws.events import EventBridgeSink, EventPublisher, EventSink
from spotline.aws.instances import InstanceRepository
from spotline.aws.jobs import JobRepository
from spotline.aws.ledger import LedgerRepository
from spotline.aws.page_tokens import PageTokens
from spotline.aws.settings import Settings, SpotlineConfig
from spotline.aws.timeline import TimelineRepository
from spotline.aws.workflows import (
    PassTrigger,
    SqsPassTrigger,
    StepFunctionsStarter,
    StepFunctionsTaskTokens,
    TaskTokens,
    WorkflowStarter,
)

if TYPE_CHECKING:
    from spotline.control.logs import RunLogs

Clock = Callable[[], float]


def new_job_id() -> str:
    """A fresh job id: 64 random bits, short enough for execution and Batch job names."""
    return f"job-{secrets.token_hex(8)}"


@dataclass
class ControlPlane:
    settings: Settings
    jobs: JobRepository
    timeline: TimelineRepository
    ledger: LedgerRepository
    instances: InstanceRepository
    publisher: EventPublisher
    workflows: WorkflowStarter
    tokens: TaskTokens
    launcher: BatchLauncher
    instance_resolver: InstanceResolver
    trigger: PassTrigger
    clock: Clock = time.time
    rng: random.Random = field(default_factory=random.Random)
    new_job_id: Callable[[], str] = new_job_id
    # Reads a run's training log (`GET /jobs/{id}/logs`); None where the deployment has none.
    run_logs: RunLogs | None = None
    # Signs the API's pagination tokens (its key lives in the Ledger table; see page_tokens).
    page_tokens: PageTokens | None = None

    @property
    def config(self) -> SpotlineConfig:
        return self.settings.config

    @property
    def pages(self) -> PageTokens:
        if self.page_tokens is None:
            self.page_tokens = PageTokens(self.ledger.table.client, self.ledger.table.name)
        return self.page_tokens


def build_control_plane(
    settings: Settings,
    clients: AwsClients,
    *,
    launcher: BatchLauncher | None = None,
    event_sink: EventSink | None = None,
    workflows: WorkflowStarter | None = None,
    tokens: TaskTokens | None = None,
    trigger: PassTrigger | None = None,
    instance_resolver: InstanceResolver | None = None,
    clock: Clock | None = None,
    rng: random.Random | None = None,
    new_id: Callable[[], str] | None = None,
    run_logs: RunLogs | None = None,
) -> ControlPlane:
    """The control plane over `clients`; any adapter may be replaced (the local runtime passes
    its own `launcher`)."""
    if run_logs is None and settings.training_log_group:
        # Here, not at import: only the API reads training logs.
        from spotline.control.logs import CloudWatchRunLogs

        run_logs = CloudWatchRunLogs(clients.batch, clients.lazy("logs"), settings.training_log_group)
    timeline = TimelineRepository(clients.dynamodb, settings.timeline_table)
    ledger = LedgerRepository(
        clients.dynamodb, settings.ledger_table, usage_half_life_s=settings.config.scheduler.usage_half_life_s
    )
    publisher = EventPublisher(event_sink or EventBridgeSink(clients.events, settings.event_bus))
    jobs = JobRepository(
        clients.dynamodb, settings.jobs_table, timeline, ledger, listeners=[publisher.on_commit]
    )
    return ControlPlane(
        settings=settings,
        jobs=jobs,
        timeline=timeline,
        ledger=ledger,
        instances=InstanceRepository(clients.dynamodb, settings.instances_table),
        publisher=publisher,
        workflows=workflows or StepFunctionsStarter(clients.stepfunctions),
        tokens=tokens or StepFunctionsTaskTokens(clients.stepfunctions),
        launcher=launcher
        or AwsBatchLauncher(
            clients.batch,
            settings.config.job_definition,
            settings.config.multinode_job_definition,
            team_definitions=settings.config.job_definitions,
            efa_team_definitions=settings.config.efa_job_definitions,
        ),
        instance_resolver=instance_resolver or EcsInstanceResolver(clients.ecs),
        trigger=trigger or SqsPassTrigger(clients.sqs, settings.scheduler_queue_url),
        clock=clock or time.time,
        rng=rng or random.Random(settings.config.seed),
        new_job_id=new_id or new_job_id,
        run_logs=run_logs,
        page_tokens=PageTokens(clients.dynamodb, settings.ledger_table),
    )
