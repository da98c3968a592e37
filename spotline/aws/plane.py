"""The control plane over AWS: each port of `spotline.control.ports` on its AWS adapter
(DynamoDB, EventBridge, Step Functions, SQS, Batch, ECS, CloudWatch Logs), wired into a
`ControlPlane`. Nothing here talks to AWS at construction time.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from spotline.aws.batch import AwsBatchLauncher, EcsInstanceResolver
from spotline.aws.clients import AwsClients
from spotline.aws.costs import CostBook
from spotline.aws.events import EventBridgeSink
from spotline.aws.images import EcrImageResolver
from spotline.aws.instances import InstanceRepository
from spotline.aws.jobs import JobRepository
from spotline.aws.ledger import LedgerRepository
from spotline.aws.nodes import BatchEcsNodes
from spotline.aws.page_tokens import PageTokens
from spotline.aws.spot_pools import SpotPoolHistory
from spotline.aws.timeline import TimelineRepository
from spotline.aws.workflows import SqsPassTrigger, StepFunctionsStarter, StepFunctionsTaskTokens
from spotline.control.plane import Clock, ControlPlane, new_job_id
from spotline.control.ports import (
    BatchLauncher,
    EventSink,
    ImageResolver,
    InstanceResolver,
    NodeSource,
    PassTrigger,
    RunLogs,
    TaskTokens,
    WorkflowStarter,
)
from spotline.control.publisher import EventPublisher
from spotline.control.settings import Settings


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
    images: ImageResolver | None = None,
    nodes: NodeSource | None = None,
) -> ControlPlane:
    """The control plane over `clients`; any adapter may be replaced (the local runtime passes
    its own `launcher`)."""
    if run_logs is None and settings.training_log_group:
        # Here, not at import: only the API reads training logs.
        from spotline.aws.logs import CloudWatchRunLogs

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
        pages=PageTokens(clients.dynamodb, settings.ledger_table),
        costs=CostBook(clients.dynamodb, settings.ledger_table),
        spot_pools=SpotPoolHistory(clients.dynamodb, settings.ledger_table),
        images=images or EcrImageResolver(lambda region: clients.client_in("ecr", region)),
        nodes=nodes or BatchEcsNodes(clients.batch, clients.ecs, settings.config.pools),
    )
