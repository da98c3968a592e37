"""The local fleet's Spot pool following an availability trace, without the control plane: nodes
beyond capacity get EC2's Spot interruption warning (busy ones last), a Spot launch waits while
capacity is 0, and starts when capacity returns; the replay plays a trace tick by tick."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from spotline.local.fleet import LocalFleet, PoolSpec
from spotline.local.spot_trace import SpotTraceReplay
from spotline.sim.availability import AvailabilityTrace

from .conftest import Events


def wait_until(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError("condition never held")


def two_node_fleet(tmp_path: Path, events: Events) -> LocalFleet:
    return LocalFleet(
        [
            PoolSpec("spot", "q-spot", nodes=2, gpus_per_node=4, spot=True),
            PoolSpec("od", "q-od", nodes=1, gpus_per_node=4, spot=False),
        ],
        events,
        log_dir=tmp_path,
        base_env={"PATH": "/usr/bin:/bin"},
        start_delay_s=0.0,
        capacity_return_s=0.0,
    )


def test_capacity_drop_warns_busy_nodes_last_and_a_launch_waits_until_capacity_returns(
    tmp_path: Path,
) -> None:
    events = Events()
    local = two_node_fleet(tmp_path, events)
    try:
        busy = local.submit_job(
            job_name="a", job_queue="q-spot", command=["sleep", "30"], environment={}, gpus=4
        )
        wait_until(lambda: events.status(busy) == "RUNNING")
        busy_node = local.jobs[busy].instances[0]

        # one instance left: the idle node goes, with a warning; the busy one keeps running
        warned = local.set_capacity("spot", 1, notice_s=0.2)
        assert len(warned) == 1 and warned[0] != busy_node and events.warnings() == warned
        # none left: the busy node is warned and dies when the notice ends; its job fails
        assert local.set_capacity("spot", 0, notice_s=0.2) == [busy_node]
        wait_until(lambda: events.status(busy) == "FAILED")
        # a Spot launch waits (RUNNABLE) while capacity is 0; replacements do not join
        waiting = local.submit_job(
            job_name="b", job_queue="q-spot", command=["sleep", "30"], environment={}, gpus=4
        )
        time.sleep(0.6)
        assert events.status(waiting) == "RUNNABLE"
        assert not any(n.alive and n.pool == "spot" for n in local.nodes)
        # capacity returns: nodes join and the launch starts
        assert local.set_capacity("spot", 2, notice_s=0.2) == []
        wait_until(lambda: events.status(waiting) == "RUNNING")
        assert sum(1 for n in local.nodes if n.alive and n.pool == "spot") == 2
        # On-Demand follows no trace
        with pytest.raises(ValueError, match="not a Spot pool"):
            local.set_capacity("od", 0, notice_s=0.2)
    finally:
        local.close()


def test_the_replay_plays_the_trace_one_tick_per_tick_seconds(tmp_path: Path) -> None:
    events = Events()
    local = two_node_fleet(tmp_path, events)
    trace = AvailabilityTrace(name="hand", gap_seconds=600, counts=(2, 0, 0, 1, 2))
    replay = SpotTraceReplay(local, "spot", trace, tick_s=0.2, notice_s=0.1)
    try:
        replay.start()
        wait_until(lambda: len(replay.applied) == 4, timeout_s=5)
        # unchanged counts are not applied again; the drop to 0 warned both (idle) nodes
        assert [(t, n) for t, n, _ in replay.applied] == [(0, 2), (1, 0), (3, 1), (4, 2)]
        assert len(replay.applied[1][2]) == 2
        wait_until(lambda: sum(1 for n in local.nodes if n.alive and n.pool == "spot") == 2)
    finally:
        replay.stop()
        local.close()


def test_a_tick_must_be_positive(tmp_path: Path) -> None:
    local = two_node_fleet(tmp_path, Events())
    trace = AvailabilityTrace(name="hand", gap_seconds=600, counts=(1,))
    with pytest.raises(ValueError, match="positive number of seconds"):
        SpotTraceReplay(local, "spot", trace, tick_s=0, notice_s=1)
    local.close()
