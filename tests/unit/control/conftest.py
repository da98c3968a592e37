"""The control plane in memory (`spotline.control.memory`) as the `deployment` the service tests
take: the same attributes the integration tests' moto deployment has (`tests/integration/helpers.py`),
with no AWS behind them, so those tests run here in the fast tier as well."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from functions.runtime import use_control_plane
from spotline.control.memory import (
    MemoryPlane,
    RecordingLauncher,
    RecordingStarter,
    StaticInstanceResolver,
    memory_control_plane,
    memory_settings,
)
from spotline.control.plane import ControlPlane
from tests.integration.helpers import CONFIG, TestClock


@dataclass
class MemoryDeployment:
    plane: ControlPlane
    memory: MemoryPlane
    launcher: RecordingLauncher
    clock: TestClock
    resolver: StaticInstanceResolver
    starter: RecordingStarter
    state_machines: dict[str, str]


@pytest.fixture
def deployment() -> Iterator[MemoryDeployment]:
    clock = TestClock()
    settings = memory_settings(CONFIG)
    memory = memory_control_plane(settings, clock=clock)
    machines = {name: settings.state_machine_arn(name) for name in ("preempt", "launch")}
    use_control_plane(memory.plane)
    try:
        yield MemoryDeployment(
            memory.plane, memory, memory.launcher, clock, memory.resolver, memory.starter, machines
        )
    finally:
        use_control_plane(None)
