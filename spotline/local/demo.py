"""`spotline demo`: the whole system, end to end, on the local control plane.

Two teams share a small cluster (a Spot pool of two 4-GPU nodes and an On-Demand pool of one).
Low-priority jobs fill it; a critical job arrives and takes the On-Demand node by
checkpoint-then-preempt; the victim later resumes from its checkpoint; a Spot interruption
warning hits a running job, which checkpoints inside the notice, is requeued and resumes on a
replacement node; every job finishes. Everything goes through the real API, handlers,
workflows and training processes; only AWS itself is emulated.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import httpx

from spotline.control.records import parse_run_id
from spotline.domain import TERMINAL_STATES, JobState
from spotline.local.runtime import LocalConfig, LocalControlPlane

HOLD_BACK_S = 1.5


@dataclass(frozen=True)
class DemoJob:
    key: str
    team: str
    priority: str
    steps: int
    submit_at_s: float
    spot: str = "auto"
    # Submit no earlier than `submit_at_s`, and only once each of these jobs is RUNNING and has
    # written a checkpoint: the story needs running victims, however slow the machine is.
    after_running: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scenario:
    jobs: tuple[DemoJob, ...]
    # When the Spot warning is sent, and to the instance of which job.
    reclaim_at_s: float
    reclaim_job: str
    step_time_s: float = 0.2
    checkpoint_interval_s: float = 3.0
    timeout_s: float = 420.0


DEFAULT_SCENARIO = Scenario(
    jobs=(
        DemoJob("vision-sweep", "vision", "low", steps=120, submit_at_s=0.0, spot="never"),
        DemoJob("vision-ablation", "vision", "low", steps=110, submit_at_s=0.0),
        DemoJob("nlp-pretrain", "nlp", "normal", steps=150, submit_at_s=0.5),
        DemoJob(
            "nlp-hotfix-eval",
            "nlp",
            "critical",
            steps=60,
            submit_at_s=9.0,
            after_running=("vision-sweep", "vision-ablation"),
        ),
    ),
    reclaim_at_s=16.0,
    reclaim_job="nlp-pretrain",
)

# A shorter story for the end-to-end test: one preemption, one Spot reclaim.
SHORT_SCENARIO = Scenario(
    jobs=(
        DemoJob("low-1", "vision", "low", steps=60, submit_at_s=0.0, spot="never"),
        DemoJob("normal-1", "nlp", "normal", steps=60, submit_at_s=0.0),
        DemoJob("critical-1", "nlp", "critical", steps=25, submit_at_s=6.0, after_running=("low-1",)),
    ),
    reclaim_at_s=10.0,
    reclaim_job="normal-1",
    step_time_s=0.15,
    checkpoint_interval_s=2.0,
    timeout_s=240.0,
)


@dataclass
class TimelineEntry:
    t: float
    job_id: str
    source: str
    target: str
    reason: str


@dataclass
class DemoResult:
    jobs: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[TimelineEntry] = field(default_factory=list)
    wall_s: float = 0.0
    spot_warning_to_checkpoint_request_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "timeline": [
                {"t": round(e.t, 3), "job_id": e.job_id, "from": e.source, "to": e.target, "reason": e.reason}
                for e in self.timeline
            ],
        }

    @property
    def all_succeeded(self) -> bool:
        return bool(self.jobs) and all(j["final_state"] == JobState.SUCCEEDED.value for j in self.jobs)


def job_body(job: DemoJob, scenario: Scenario) -> dict[str, Any]:
    """The `POST /jobs` body: a real, resumable training loop as the command."""
    return {
        "name": job.key,
        "priority": job.priority,
        "gpus": 4,
        "image": "spotline/train:latest",
        "command": [
            sys.executable,
            "-m",
            "spotline.examples.train",
            "--steps",
            str(job.steps),
            "--step-time-s",
            str(scenario.step_time_s),
            "--seed",
            "7",
        ],
        "spot": job.spot,
        "checkpoint_interval_s": scenario.checkpoint_interval_s,
        "expected_runtime_s": job.steps * scenario.step_time_s,
    }


def run_demo(
    scenario: Scenario = DEFAULT_SCENARIO,
    config: LocalConfig | None = None,
    on_transition: Callable[[TimelineEntry, str], None] | None = None,
) -> DemoResult:
    """Start the local control plane, play `scenario` through the HTTP API, stop, report."""
    plane = LocalControlPlane(config or LocalConfig())
    info = plane.start()
    try:
        return _play(plane, info, scenario, on_transition)
    finally:
        plane.stop()


def _play(
    plane: LocalControlPlane,
    info: dict[str, Any],
    scenario: Scenario,
    on_transition: Callable[[TimelineEntry, str], None] | None,
) -> DemoResult:
    result = DemoResult()
    start = time.time()
    api = httpx.Client(base_url=info["api_url"], timeout=30.0)
    headers = {team: spec["headers"] for team, spec in info["teams"].items()}
    ids: dict[str, str] = {}  # demo key -> job id
    team_of: dict[str, str] = {}
    seen: dict[str, int] = {}
    names: dict[str, str] = {}
    reclaimed = False
    pending = sorted(scenario.jobs, key=lambda j: j.submit_at_s)
    # Entries are shown in time order: each poll reads the jobs one after another, so an entry is
    # held back for HOLD_BACK_S, in which an earlier one of another job would have been read.
    # Sorted by (t, and never before the job's previous entry): a pass may read its clock just
    # before the submission it admits was written, so a job's ADMITTED can carry a t a few
    # milliseconds before its PENDING; each job's own order is its timeline's.
    held: list[tuple[float, TimelineEntry, str]] = []
    last_t: dict[str, float] = {}

    def show(until: float) -> None:
        held.sort(key=lambda item: item[0])
        while held and held[0][0] <= until:
            _, entry, name = held.pop(0)
            if on_transition is not None:
                on_transition(entry, name)

    while True:
        now = time.time() - start
        while pending and pending[0].submit_at_s <= now:
            if not all(
                _running_with_checkpoint(api, headers, ids, team_of, key) for key in pending[0].after_running
            ):
                break
            job = pending.pop(0)
            response = api.post("/jobs", json=job_body(job, scenario), headers=headers[job.team])
            response.raise_for_status()
            ids[job.key] = response.json()["id"]
            team_of[ids[job.key]] = job.team
            names[ids[job.key]] = job.key
        if not reclaimed and now >= scenario.reclaim_at_s:
            reclaimed = _reclaim(plane, info, api, headers, ids, scenario, result)
        states = {}
        for job_id, team in team_of.items():
            events = api.get(f"/jobs/{job_id}/events", headers=headers[team]).json()["events"]
            for event in events[seen.get(job_id, 0) :]:
                entry = TimelineEntry(event["t"] - start, job_id, event["from"], event["to"], event["reason"])
                result.timeline.append(entry)
                last_t[job_id] = max(entry.t, last_t.get(job_id, entry.t))
                held.append((last_t[job_id], entry, names[job_id]))
            seen[job_id] = len(events)
            states[job_id] = events[-1]["to"] if events else "PENDING"
        show(time.time() - start - HOLD_BACK_S)
        done = not pending and reclaimed and all(JobState(s) in TERMINAL_STATES for s in states.values())
        if done or now > scenario.timeout_s:
            break
        time.sleep(0.5)
    show(float("inf"))
    result.wall_s = time.time() - start
    for key, job_id in ids.items():
        view = api.get(f"/jobs/{job_id}", headers=headers[team_of[job_id]]).json()
        result.jobs.append(
            {
                "id": job_id,
                "name": key,
                "team": view["team"],
                "priority": view["priority"],
                "final_state": view["state"],
                "preemptions": view["preemptions"],
                "interruptions": view["interruptions"],
                "resumed_from_checkpoint": _resumed_from_checkpoint(plane, job_id),
                "lost_gpu_seconds": round(view["lost_work_s"] * view["gpus"], 3),
            }
        )
    result.timeline.sort(key=lambda e: e.t)
    return result


def _running_with_checkpoint(
    api: httpx.Client, headers: dict[str, Any], ids: dict[str, str], team_of: dict[str, str], key: str
) -> bool:
    job_id = ids.get(key)
    if job_id is None:
        return False
    view = api.get(f"/jobs/{job_id}", headers=headers[team_of[job_id]]).json()
    return bool(view["state"] == "RUNNING" and view["last_checkpoint"] is not None)


def _reclaim(
    plane: LocalControlPlane,
    info: dict[str, Any],
    api: httpx.Client,
    headers: dict[str, Any],
    ids: dict[str, str],
    scenario: Scenario,
    result: DemoResult,
) -> bool:
    """Send EC2's Spot warning for the instance running `reclaim_job`, as AWS would, through
    boto3 on the local endpoint; the node dies after the notice."""
    job_id = ids.get(scenario.reclaim_job)
    team = next(j.team for j in scenario.jobs if j.key == scenario.reclaim_job)
    if job_id is None or plane.fleet is None:
        return False
    view = api.get(f"/jobs/{job_id}", headers=headers[team]).json()
    if view["state"] != "RUNNING" or not view["instance_ids"]:
        return False
    instance = view["instance_ids"][0]
    warning = plane.fleet.spot_interruption_warning(instance)
    events = boto3.client("events", endpoint_url=info["aws_endpoint_url"], region_name=info["region"])
    sent = time.time()
    events.put_events(
        Entries=[
            {
                "Source": warning["source"],
                "DetailType": warning["detail-type"],
                "Detail": json.dumps(warning["detail"]),
                "Resources": warning["resources"],
            }
        ]
    )
    # The fleet reclaims the instance when the notice ends: the runtime sees the warning on the
    # bus, whoever sent it (as `spotline local spot-warning` sends it).
    for _ in range(100):
        view = api.get(f"/jobs/{job_id}", headers=headers[team]).json()
        requested = view.get("checkpoint_requested_at")
        if requested is not None and requested >= sent - 1.0:
            result.spot_warning_to_checkpoint_request_s = max(0.0, requested - sent)
            break
        time.sleep(0.05)
    return True


def _resumed_from_checkpoint(plane: LocalControlPlane, job_id: str) -> bool:
    """True when the job's last run reported that it restored a checkpoint (the training
    script's final JSON line carries `resumed_from_step`)."""
    if plane.fleet is None:
        return False
    runs = sorted(
        (j for j in plane.fleet.jobs.values() if (parse_run_id(j.name) or ("", 0))[0] == job_id),
        key=lambda j: j.created_at,
    )
    if not runs:
        return False
    log = plane.config.state_dir / "logs" / f"{runs[-1].name}-{runs[-1].job_id[:8]}.log"
    return _final_report(log).get("resumed_from_step") not in (None, 0)


def _final_report(log: Path) -> dict[str, Any]:
    if not log.exists():
        return {}
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith("{"):
            try:
                report: dict[str, Any] = json.loads(line)
            except json.JSONDecodeError:
                continue
            return report
    return {}
