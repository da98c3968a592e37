"""`ControlPlane`: everything a service needs, built once per process.

Its fields are the ports (`spotline.control.ports`), the settings, a clock and a random source.
On Lambda it is built from the environment over the AWS adapters
(`spotline.aws.plane.build_control_plane(get_settings(), default_clients())`); the local runtime
and the tests build it with their own launcher, clock or clients.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from spotline.control.ports import (
    BatchLauncher,
    CostStore,
    ImageResolver,
    InstanceResolver,
    InstanceStore,
    JobStore,
    LedgerStore,
    NodeSource,
    PageTokenStore,
    PassTrigger,
    RunLogs,
    SpotPoolStore,
    TaskTokens,
    TimelineStore,
    WorkflowStarter,
)
from spotline.control.publisher import EventPublisher
from spotline.control.settings import Settings, SpotlineConfig

Clock = Callable[[], float]


def new_job_id() -> str:
    """A fresh job id: 64 random bits, short enough for execution and Batch job names."""
    return f"job-{secrets.token_hex(8)}"


@dataclass
class ControlPlane:
    settings: Settings
    jobs: JobStore
    timeline: TimelineStore
    ledger: LedgerStore
    instances: InstanceStore
    publisher: EventPublisher
    workflows: WorkflowStarter
    tokens: TaskTokens
    launcher: BatchLauncher
    instance_resolver: InstanceResolver
    trigger: PassTrigger
    # Signs the API's pagination tokens.
    pages: PageTokenStore
    # What the teams' runs cost per month.
    costs: CostStore
    clock: Clock = time.time
    rng: random.Random = field(default_factory=random.Random)
    new_job_id: Callable[[], str] = new_job_id
    # Reads a run's training log (`GET /jobs/{id}/logs`); None where the deployment has none.
    run_logs: RunLogs | None = None
    # What it has seen of each Spot pool's capacity (the deadline guard's history); None: nothing kept.
    spot_pools: SpotPoolStore | None = None
    # Pins a submitted job's image tag to its digest (ECR); None: images run as given.
    images: ImageResolver | None = None
    # The handlers' idempotency records (a Powertools persistence layer); None: DynamoDB's, on the
    # idempotency table (`functions.runtime.idempotent_on_event_id`).
    idempotency: Any = None
    # Reports each pool's nodes (`spotline pools`); None where the deployment cannot see them.
    nodes: NodeSource | None = None

    @property
    def config(self) -> SpotlineConfig:
        return self.settings.config
