"""Reserved pools in the control plane, in memory: the passes that drain a block before its end,
and the handler of EC2's reserved-capacity events, fed AWS's documented event shapes
(tests/integration/events/capacity_*.json)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

import functions.capacity_reservation
from functions.runtime import use_control_plane
from spotline.control.memory import memory_control_plane, memory_settings
from spotline.control.records import Disruption
from spotline.control.scheduling import scheduling_pass
from spotline.domain import JobState
from spotline.domain.reserved import TERMINATION_LEAD_S
from tests.integration.helpers import ACCOUNT, CONFIG, REGION, TestClock, context, eventbridge, start, submit
from tests.unit.control.conftest import MemoryDeployment

BLOCK_ID = "cr-0123456789abcdef0"
START = datetime.fromisoformat("2026-12-01T11:30:00Z").timestamp()
END = datetime.fromisoformat("2026-12-08T11:30:00Z").timestamp()
BLOCK = "p4d-block"
INSTANCE = "i-0fedcba9876543210"  # the interruption sample's


def config_with_block() -> dict[str, Any]:
    config = copy.deepcopy(CONFIG)
    config["pools"].append(
        {
            "name": BLOCK,
            "gpu_type": "a100",
            "purchase": "on-demand",
            "capacity_gpus": 16,
            "gpus_per_node": 8,
            "price": 0.0,
            "reservation": {"start": START, "end": END, "reservation_id": BLOCK_ID},
            "job_queue": f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/spotline-{BLOCK}",
        }
    )
    config["teams"] = [{"team": "vision", "nominal_gpus": 24}, {"team": "nlp", "nominal_gpus": 24}]
    return config


@pytest.fixture
def block() -> Iterator[MemoryDeployment]:
    clock = TestClock()
    settings = memory_settings(config_with_block())
    memory = memory_control_plane(settings, clock=clock)
    machines = {name: settings.state_machine_arn(name) for name in ("preempt", "launch")}
    use_control_plane(memory.plane)
    try:
        yield MemoryDeployment(
            memory.plane, memory, memory.launcher, clock, memory.resolver, memory.starter, machines
        )
    finally:
        use_control_plane(None)


def test_a_pass_admits_to_the_open_block_first(block: MemoryDeployment) -> None:
    block.clock.freeze(START + 3600.0)
    job = submit(block, expected_runtime_s=7200)
    result = scheduling_pass(block.plane)
    assert result.admitted == [(job.id, BLOCK)]
    assert any("reserved, prepaid" in e.reason for e in block.plane.timeline.list(job.id)[0])


def test_the_pass_drains_the_block_from_its_known_end(block: MemoryDeployment) -> None:
    # Given a job running in the block
    block.clock.freeze(START + 3600.0)
    running = start(block, submit(block), pool=BLOCK, instance_id="i-0aaaaaaaaaaaaaaa1")
    # When a pass runs well before the end, nothing drains
    block.clock.freeze(END - 2 * 3600.0)
    assert scheduling_pass(block.plane).drained == []
    # When a pass runs at the drain time (the termination less the checkpoint grace)
    block.clock.freeze(END - TERMINATION_LEAD_S - 120.0)
    result = scheduling_pass(block.plane)
    # Then the job checkpoints before the termination, to be requeued
    assert result.drained == [running.id]
    stored = block.plane.jobs.get(running.id)
    assert stored.state is JobState.CHECKPOINTING and stored.disruption is Disruption.INTERRUPT
    assert stored.checkpoint_deadline_at is not None
    assert stored.checkpoint_deadline_at <= END - TERMINATION_LEAD_S
    # And a second pass changes nothing
    assert scheduling_pass(block.plane).drained == []


def test_the_expiration_warning_drains_what_is_left_once(block: MemoryDeployment) -> None:
    # Given a job in the block and one On-Demand, at the warning's time
    block.clock.freeze(START + 3600.0)
    inside = start(block, submit(block), pool=BLOCK, instance_id="i-0aaaaaaaaaaaaaaa1")
    outside = start(block, submit(block), pool="a100-on-demand", instance_id="i-0bbbbbbbbbbbbbbb2")
    warned = block.clock.freeze(datetime.fromisoformat("2026-12-08T10:50:00Z").timestamp())
    event = eventbridge("capacity_block_expiration_warning")
    # When EventBridge delivers AWS's warning (twice)
    first = functions.capacity_reservation.handler(event, context("capacity_reservation"))
    second = functions.capacity_reservation.handler(event, context("capacity_reservation"))
    # Then the block's job checkpoints before the termination (10 minutes after the warning)
    assert (
        first
        == second
        == {
            "detail_type": "Capacity Block Expiration Warning",
            "reservation": BLOCK_ID,
            "jobs": [inside.id],
        }
    )
    stored = block.plane.jobs.get(inside.id)
    assert stored.state is JobState.CHECKPOINTING
    margin = block.plane.config.spot_notice_margin_s
    assert stored.checkpoint_deadline_at == warned + 600.0 - margin
    assert block.plane.jobs.get(outside.id).state is JobState.RUNNING


@pytest.mark.parametrize(
    "detail_type", ["Capacity Block Expiration Warning", "Capacity Block Reservation Expiration Warning"]
)
def test_both_spellings_of_the_warning_are_handled(block: MemoryDeployment, detail_type: str) -> None:
    block.clock.freeze(START + 3600.0)
    inside = start(block, submit(block), pool=BLOCK, instance_id="i-0aaaaaaaaaaaaaaa1")
    event = eventbridge("capacity_block_expiration_warning", **{"detail-type": detail_type})
    assert functions.capacity_reservation.handler(event, context())["jobs"] == [inside.id]


@pytest.mark.parametrize("detail_type", ["Capacity Block Delivered", "Capacity Block Reservation Delivered"])
def test_a_delivered_block_asks_for_a_pass(block: MemoryDeployment, detail_type: str) -> None:
    event = eventbridge("capacity_block_delivered", **{"detail-type": detail_type})
    result = functions.capacity_reservation.handler(event, context())
    assert result["pools"] == [BLOCK]
    assert block.memory.trigger.requests[-1][1] == f"block-delivered:{BLOCK_ID}"


def test_a_warning_for_an_unknown_reservation_does_nothing(block: MemoryDeployment) -> None:
    event = eventbridge(
        "capacity_block_expiration_warning", detail={"capacity-reservation-id": "cr-0ffffffffffffffff"}
    )
    assert functions.capacity_reservation.handler(event, context())["jobs"] == []


def test_an_interruptible_reservation_warning_checkpoints_the_instance_jobs(block: MemoryDeployment) -> None:
    block.clock.freeze(datetime.fromisoformat("2026-12-03T09:00:00Z").timestamp())
    on_it = start(block, submit(block), pool="a100-on-demand", instance_id=INSTANCE)
    event = eventbridge("capacity_reservation_interruption_warning")
    result = functions.capacity_reservation.handler(event, context())
    assert result["jobs"] == [on_it.id]
    stored = block.plane.jobs.get(on_it.id)
    ends = datetime.fromisoformat("2026-12-03T09:02:00Z").timestamp()
    assert stored.state is JobState.CHECKPOINTING
    assert stored.checkpoint_deadline_at == ends - block.plane.config.spot_notice_margin_s
