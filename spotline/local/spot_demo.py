"""`spotline demo --scenario spot-deadline`: Spot capacity vanishes under a deadline job, locally.

The local Spot pool (two 4-GPU nodes) follows a hand-written availability trace, one tick per
`tick_s` wall seconds: both instances, then none for a while, then both again. A deadline job
(declared runtime C, deadline R after its submission) starts on Spot, beside a Spot-only filler job
of another team. When capacity vanishes, EC2's warnings reach both; they checkpoint and are
requeued. The deadline guard waits for Spot while the job is ahead of its line, and moves it to
On-Demand (checkpoint-then-move: its waiting Spot launch is given up) once it falls behind. When
capacity returns the filler's launch starts (the control plane sees Spot back), and the guard
moves the job back to Spot once it is far enough ahead of its line (hysteresis). It meets its
deadline. Everything runs through the real API, handlers, workflows and training processes; AWS
itself is emulated (moto, the local fleet), so this shows the control flow, not real Spot markets.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from spotline.domain import TERMINAL_STATES, JobState
from spotline.local.demo import TimelineEntry
from spotline.local.runtime import LocalConfig, LocalControlPlane
from spotline.sim.availability import AvailabilityTrace


@dataclass(frozen=True)
class SpotDeadlineScenario:
    # The Spot pool's instances per tick (2 nodes): there for 3 ticks, gone for 9, back after.
    counts: tuple[int, ...] = (2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2)
    tick_s: float = 3.0
    steps: int = 360  # training steps of the deadline job
    step_time_s: float = 0.1
    deadline_s: float = 120.0  # from submission; the runtime is steps * step_time_s (36 s)
    checkpoint_interval_s: float = 1.0
    timeout_s: float = 240.0

    @property
    def trace(self) -> AvailabilityTrace:
        return AvailabilityTrace(name="spot-deadline demo", gap_seconds=600, counts=self.counts)

    @property
    def runtime_s(self) -> float:
        return self.steps * self.step_time_s


@dataclass
class SpotDeadlineResult:
    job_id: str = ""
    final_state: str = ""
    deadline_at: float = 0.0
    finished_at: float | None = None
    timeline: list[TimelineEntry] = field(default_factory=list)  # the deadline job's, t from its submission
    filler_timeline: list[TimelineEntry] = field(default_factory=list)
    wall_s: float = 0.0
    started_at: float = 0.0  # the submission (the timelines' t = 0)

    @property
    def met_deadline(self) -> bool:
        return (
            self.final_state == JobState.SUCCEEDED.value
            and self.finished_at is not None
            and self.finished_at <= self.deadline_at
        )

    def to_json(self) -> dict[str, Any]:
        def entries(timeline: list[TimelineEntry]) -> list[dict[str, Any]]:
            return [
                {"t": round(e.t, 3), "from": e.source, "to": e.target, "reason": e.reason} for e in timeline
            ]

        return {
            "job_id": self.job_id,
            "final_state": self.final_state,
            "met_deadline": self.met_deadline,
            "finished_s": None if self.finished_at is None else round(self.finished_at - self.started_at, 3),
            "deadline_s": round(self.deadline_at - self.started_at, 3),
            "timeline": entries(self.timeline),
            "filler_timeline": entries(self.filler_timeline),
        }


def _train(steps: int, scenario: SpotDeadlineScenario) -> list[str]:
    return [
        sys.executable,
        "-m",
        "spotline.examples.train",
        "--steps",
        str(steps),
        "--step-time-s",
        str(scenario.step_time_s),
        "--seed",
        "5",
    ]


def run_spot_deadline(
    scenario: SpotDeadlineScenario = SpotDeadlineScenario(),
    state_dir: Path = Path(".spotline"),
    on_transition: Callable[[TimelineEntry, str], None] | None = None,
    trace: AvailabilityTrace | None = None,
) -> SpotDeadlineResult:
    """Start the local control plane with the scenario's Spot trace (or `trace`, e.g. loaded
    from a file), play it, stop, report."""
    config = LocalConfig(
        state_dir=state_dir,
        spot_availability=trace or scenario.trace,
        spot_tick_s=scenario.tick_s,
        reconcile_s=1.0,
        tick_s=1.0,
        move_to_spot_min_remaining_s=5.0,
    )
    plane = LocalControlPlane(config)
    info = plane.start()
    try:
        return _play(info, scenario, on_transition)
    finally:
        plane.stop()


def _play(
    info: dict[str, Any],
    scenario: SpotDeadlineScenario,
    on_transition: Callable[[TimelineEntry, str], None] | None,
) -> SpotDeadlineResult:
    api = httpx.Client(base_url=info["api_url"], timeout=30.0)
    headers = {team: spec["headers"] for team, spec in info["teams"].items()}
    start = time.time()
    result = SpotDeadlineResult(started_at=start)
    deadline_at = start + scenario.deadline_s
    job = {
        "name": "deadline",
        "gpus": 4,
        "image": "spotline/train:latest",
        "command": _train(scenario.steps, scenario),
        "spot": "auto",
        "checkpoint_interval_s": scenario.checkpoint_interval_s,
        "expected_runtime_s": scenario.runtime_s,
        "deadline": datetime.fromtimestamp(deadline_at, UTC).isoformat(),
    }
    filler = {
        "name": "filler",
        "priority": "low",
        "gpus": 4,
        "image": "spotline/train:latest",
        "command": _train(100_000, scenario),
        "spot": "required",
        "checkpoint_interval_s": scenario.checkpoint_interval_s,
    }
    response = api.post("/jobs", json=job, headers=headers["vision"])
    response.raise_for_status()
    result.job_id = response.json()["id"]
    result.deadline_at = datetime.fromisoformat(response.json()["deadline"]).timestamp()
    response = api.post("/jobs", json=filler, headers=headers["nlp"])
    response.raise_for_status()
    filler_id = response.json()["id"]
    watched = {
        result.job_id: ("vision", "deadline", result.timeline),
        filler_id: ("nlp", "filler", result.filler_timeline),
    }
    seen: dict[str, int] = {}
    state = "PENDING"
    while time.time() - start < scenario.timeout_s:
        for job_id, (team, name, timeline) in watched.items():
            events = api.get(f"/jobs/{job_id}/events", headers=headers[team]).json()["events"]
            for event in events[seen.get(job_id, 0) :]:
                entry = TimelineEntry(event["t"] - start, job_id, event["from"], event["to"], event["reason"])
                timeline.append(entry)
                if on_transition is not None:
                    on_transition(entry, name)
            seen[job_id] = len(events)
            if job_id == result.job_id and events:
                state = events[-1]["to"]
        if JobState(state) in TERMINAL_STATES:
            break
        time.sleep(0.3)
    view = api.get(f"/jobs/{result.job_id}", headers=headers["vision"]).json()
    result.final_state = view["state"]
    if result.final_state == JobState.SUCCEEDED.value and result.timeline:
        result.finished_at = start + result.timeline[-1].t
    api.post(f"/jobs/{filler_id}/cancel", headers=headers["nlp"])
    result.wall_s = time.time() - start
    return result
