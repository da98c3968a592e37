"""`GET /jobs/{id}/explain`: why a job waits (and when it may start), where and why it runs, or
who preempted it and why it was the one.

Reads what a scheduling pass reads (the jobs holding GPUs, and the head of each class of the
queue), once per request; the reasoning is the domain's (`spotline.domain.explain` and
`spotline.domain.forecast`), the same rules the planner applies.
"""

from __future__ import annotations

import random
from typing import Any

from spotline.control.admission import answer_view
from spotline.control.arrays import array_summary, dependency_explanation, get_array
from spotline.control.jobs import get_job
from spotline.control.lifecycle import iso
from spotline.control.pending import StorePendingQueue
from spotline.control.plane import ControlPlane
from spotline.control.progress import job_progress
from spotline.control.records import JobRecord, TimelineEntry
from spotline.control.scheduling import build_snapshot
from spotline.domain import Job, JobState
from spotline.domain.checkpoint_cost import describe as describe_checkpoint
from spotline.domain.deadline import PassPlans, explain_deadline
from spotline.domain.explain import explain_pools, position, priority_terms, scores
from spotline.domain.forecast import forecast_start
from spotline.domain.placement import changeover_h, step_h
from spotline.domain.preemption import estimated_remaining_s, protected_until
from spotline.domain.priority import fairshare_factors
from spotline.domain.queue import WINDOW_PER_CLASS, read_window

HOLDING = {JobState.ADMITTED, JobState.RUNNING, JobState.CHECKPOINTING}


def _timeline(cp: ControlPlane, job_id: str) -> list[TimelineEntry]:
    entries: list[TimelineEntry] = []
    token: str | None = None
    while True:
        page, token = cp.timeline.list(job_id, limit=100, next_token=token)
        entries.extend(page)
        if not token:
            return entries


def explain_array(cp: ControlPlane, team: str, array_id: str) -> dict[str, Any]:
    """`explain` of an array: its counts by state, and the explanation of its first element that
    waits (or else of its first element)."""
    array, records = get_array(cp, team, array_id)
    waiting = [r for r in records if r.state is JobState.PENDING] or list(records)
    out: dict[str, Any] = {**array_summary(array, records), "at": iso(cp.clock())}
    if waiting:
        first = explain_job(cp, team, waiting[0].id)
        out["summary"] = f"{first.get('summary', '')} (element {waiting[0].id})"
        out["element"] = first
    return out


def explain_job(cp: ControlPlane, team: str, job_id: str) -> dict[str, Any]:
    record = get_job(cp, team, job_id)
    job = record.job
    now = cp.clock()
    config = cp.config.scheduler
    active = cp.jobs.active()
    snapshot = build_snapshot(cp, active, now)
    teams = {*snapshot.usage_gpu_hours, *snapshot.quotas}
    fairshare = fairshare_factors(teams, snapshot.quotas, snapshot.usage_gpu_hours).get(job.team, 1.0)
    terms = priority_terms(
        job, now, config.weights, remaining_s=estimated_remaining_s(job, now, config), fairshare=fairshare
    )
    out: dict[str, Any] = {
        "job_id": job.id,
        "state": job.state.value,
        "at": iso(now),
        "priority": {
            "class": job.priority.value,
            "effective": round(sum(terms.values()), 3),
            "terms": {k: round(v, 3) for k, v in terms.items()},
            "fairshare_factor": round(fairshare, 4),
        },
    }
    # Where it stands, as status and list show it (`spotline.control.progress`).
    progress = job_progress(record)
    out["progress"] = {"step": progress.step, "fraction": progress.fraction}
    # a deadline job: Spot or On-Demand, its line, and the Spot history the guard used
    plans = None
    window: list[Job] | None = None  # the window a pass reads, read once (here or for `_pending`)
    held = cp.config.pools_by_name.get(job.pool or "") if job.state in HOLDING else None
    on_spot = held is not None and held.is_spot
    if job.spec.deadline_at is not None and job.spec.expected_runtime_s is not None and not on_spot:
        # The pass's plan budget over the window it reads, so `explain` says what a pass does for
        # the jobs the budget ranks (waiting, or On-Demand); a job held on Spot is not one of
        # them, and its advice is the guard's with its plan.
        window = read_window(StorePendingQueue(cp.jobs), WINDOW_PER_CLASS)
        plans = PassPlans.for_pass(snapshot, window, config, now)
    guard = explain_deadline(
        job, now, snapshot, changeover_h=changeover_h(config), step_h=step_h(config), plans=plans
    )
    if guard is not None:
        out["deadline_guard"] = guard
    if job.deadline_answer is not None:
        # What its deadline was answered at submission, with the run time it planned with.
        out["deadline_answer"] = answer_view(job.deadline_answer)
    checkpoint = describe_checkpoint(job, float(cp.config.grace_period_s))
    if checkpoint is not None:
        # What the agent measured of its last checkpoint, and what the planning makes of it.
        out["checkpoint"] = checkpoint
    timeline = _timeline(cp, job.id)
    if record.held_for_dependencies:
        out.update(dependency_explanation(cp, record))
    elif job.state is JobState.PENDING:
        out.update(_pending(cp, record, snapshot, now, window))
        preempted = _last_preemption(timeline)
        if preempted is not None:
            out["preempted_by"] = preempted
    elif job.state in HOLDING:
        admitted = next((e for e in reversed(timeline) if e.target == JobState.ADMITTED.value), None)
        pool = cp.config.pools_by_name.get(job.pool or "")
        kind = "unknown pool" if pool is None else ("Spot" if pool.is_spot else "On-Demand")
        out["summary"] = f"{job.state.value.lower()} in {job.pool} ({kind})"
        out["placement"] = {
            "pool": job.pool,
            "purchase": kind,
            "reason": admitted.reason if admitted else None,
            "why_this_pool": _why_pool(job.spec.spot.value, job.priority.value, kind, config),
        }
        until = protected_until(job, config)
        if job.started_at is not None and until is not None:
            # The protection period since its last start: no preemption for priority before then.
            out["placement"]["protected_until"] = iso(until)
            out["placement"]["protection_left_s"] = round(max(0.0, until - now), 1)
            out["estimated_start"] = {"at": iso(job.started_at), "at_s": job.started_at, "reason": "started"}
        else:  # admitted: its Batch job waits for an instance of the pool
            waiting = f"admitted; waiting for an instance in {job.pool}"
            out["estimated_start"] = {"at": None, "reason": waiting}
        if job.state is JobState.CHECKPOINTING:
            preempted = _last_preemption(timeline)
            if preempted is not None:
                out["preempted_by"] = preempted
    else:
        out["summary"] = f"{job.state.value.lower()}: {record.state_reason}"
        preempted = _last_preemption(timeline)
        if preempted is not None:
            out["preempted_by"] = preempted
    return out


def _why_pool(spot: str, priority: str, kind: str, config: Any) -> str:
    if kind == "On-Demand":
        if spot == "never":
            return "the job asks for On-Demand only"
        if priority in {p.value for p in config.on_demand_classes}:
            return f"{priority} jobs run On-Demand"
        return "no Spot pool had room (or Spot was refused for it: interruptions, deadline slack)"
    return "Spot pools come first for a job that may use Spot (cheaper), then by price and interruption rate"


def _last_preemption(timeline: list[TimelineEntry]) -> dict[str, Any] | None:
    for entry in reversed(timeline):
        if entry.reason.startswith("preempted for "):
            by = entry.reason.removeprefix("preempted for ").split(" ", 1)[0]
            return {"by": by, "at": iso(entry.at), "reason": entry.reason}
    return None


def _pending(
    cp: ControlPlane, record: JobRecord, snapshot: Any, now: float, window: list[Job] | None = None
) -> dict[str, Any]:
    config = cp.config.scheduler
    job = record.job
    if window is None:
        window = read_window(StorePendingQueue(cp.jobs), WINDOW_PER_CLASS)
    in_window = any(j.id == job.id for j in window)
    pending = window if in_window else [*window, job]
    pools = explain_pools(job, snapshot, now, config)
    forecast = forecast_start(
        job.id,
        snapshot,
        pending,
        now,
        config,
        random.Random(f"forecast:{job.id}"),
        leave_s=float(cp.config.grace_period_s),
    )
    spot = "in_window" if in_window else "beyond the window the scheduler reads per class"
    # The reason as the pass decided it, dated by that pass, as `status` and `list` show it; the
    # pools below are computed now (at `at`), each with what blocks the job there.
    summary = record.wait_reason or "pending: not yet looked at by a scheduling pass"
    return {
        "summary": summary,
        "wait_reason": record.wait_reason,
        "wait_reason_at": None if record.wait_reason_at is None else iso(record.wait_reason_at),
        "wait_reason_at_s": record.wait_reason_at,
        "position": {**position(job, pending, scores(snapshot, now, config)), "window": spot},
        "pools": [p.to_json() for p in pools],
        "estimated_start": {
            "at": iso(forecast.at) if forecast.at is not None else None,
            "at_s": forecast.at,
            "earliest": iso(forecast.earliest) if forecast.earliest is not None else None,
            "latest": iso(forecast.latest) if forecast.latest is not None else None,
            "reason": forecast.reason
            if forecast.at is None
            else "a replay of the queue and the running jobs by their expected run times;"
            " the band scales every remaining run time by 0.5 and 1.5; later submissions"
            " and Spot interruptions are not foreseen",
        },
    }
