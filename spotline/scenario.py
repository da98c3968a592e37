"""A short scripted story driven through the real scheduling core, step by step.

Two teams share a small cluster with a Spot and an On-Demand pool. Low-priority jobs fill it; a
critical job arrives and preempts one of them by checkpoint-then-preempt; later a Spot reclaim
hits a running job, which checkpoints inside the notice and is requeued. Every job resumes from
its checkpoint and finishes. Times are simulated seconds: this exercises the decisions only
(the local control plane runs the same story with real processes).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from spotline.domain import (
    Admit,
    Allocation,
    ClusterSnapshot,
    Job,
    JobSpec,
    JobState,
    Pool,
    Preempt,
    Priority,
    Purchase,
    SchedulerConfig,
    SortedQueue,
    TeamQuota,
    plan,
)

STEP_S = 30.0
CHECKPOINT_WRITE_S = 20.0


@dataclass(frozen=True)
class TimelineEntry:
    t: float
    job_id: str
    source: str
    target: str
    reason: str


@dataclass
class ScenarioResult:
    jobs: list[Job]
    timeline: list[TimelineEntry] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "jobs": [
                {
                    "id": j.id,
                    "team": j.team,
                    "priority": j.priority.value,
                    "final_state": j.state.value,
                    "preemptions": j.preemptions,
                    "interruptions": j.interruptions,
                    "resumed_from_checkpoint": j.disruptions > 0 and j.last_checkpoint_step is not None,
                    "lost_gpu_seconds": j.lost_work_s * j.gpus,
                }
                for j in self.jobs
            ],
            "timeline": [
                {"t": e.t, "job_id": e.job_id, "from": e.source, "to": e.target, "reason": e.reason}
                for e in self.timeline
            ],
        }


def _spec(name: str, priority: Priority, gpus: int, runtime_s: float, spot: str = "auto") -> JobSpec:
    return JobSpec(
        name=name,
        priority=priority,
        gpus=gpus,
        image="spotline/train:latest",
        command=["python", "-m", "spotline.examples.train"],
        expected_runtime_s=runtime_s,
        checkpoint_interval_s=300.0,
        spot=spot,  # type: ignore[arg-type]
    )


def run_scripted_scenario(rng: random.Random) -> ScenarioResult:
    """Play the story and return every job's final record and the timeline of transitions."""
    config = SchedulerConfig(protection_period_s=120.0)
    pools = [
        Pool(name="a100-spot", gpu_type="a100", purchase=Purchase.SPOT, capacity_gpus=16, price=0.33,
             interruption_rate_per_hour=0.0002),
        Pool(name="a100-on-demand", gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=8),
    ]
    quotas = [TeamQuota(team="vision", nominal_gpus=12), TeamQuota(team="nlp", nominal_gpus=12)]
    arrivals: list[tuple[float, str, JobSpec]] = [
        (0.0, "vision", _spec("vision-sweep-1", Priority.LOW, 8, 1800.0)),
        (0.0, "vision", _spec("vision-sweep-2", Priority.LOW, 8, 1500.0)),
        (0.0, "nlp", _spec("nlp-pretrain", Priority.NORMAL, 8, 2400.0, spot="never")),
        (600.0, "nlp", _spec("nlp-hotfix-eval", Priority.CRITICAL, 8, 600.0)),
        (900.0, "vision", _spec("vision-finetune", Priority.HIGH, 8, 900.0)),
    ]
    reclaim_at, reclaim_pool = 1500.0, "a100-spot"

    result = ScenarioResult(jobs=[])
    jobs: dict[str, Job] = {}
    allocations: dict[str, Allocation] = {}
    draining: dict[str, float] = {}  # victim id -> time its checkpoint completes

    def move(job: Job, target: JobState, t: float, reason: str, **changes: Any) -> Job:
        result.timeline.append(TimelineEntry(t, job.id, job.state.value, target.value, reason))
        moved = job.with_changes(state=target, version=job.version + 1, **changes)
        jobs[job.id] = moved
        return moved

    t = 0.0
    reclaimed = False
    while t < 6 * 3600.0:
        for at, team, spec in arrivals:
            if at == t:
                job_id = f"{team}-{spec.name.split('-', 1)[1]}"
                jobs[job_id] = Job(id=job_id, team=team, spec=spec, submitted_at=t, enqueued_at=t)
                result.timeline.append(TimelineEntry(t, job_id, "-", "PENDING", f"submitted ({spec.priority.value})"))
        # Running jobs: progress, periodic checkpoints, completion.
        for job_id, alloc in list(allocations.items()):
            job = jobs[job_id]
            if job.state is JobState.ADMITTED:
                job = move(job, JobState.RUNNING, t, f"started on {alloc.pool}", started_at=t)
            assert job.started_at is not None
            if job_id not in draining and t - (job.last_checkpoint_at or job.started_at) >= job.spec.checkpoint_interval_s:
                job = job.with_changes(last_checkpoint_at=t, last_checkpoint_step=int(job.elapsed_s(t)))
                jobs[job_id] = job
            remaining = job.remaining_s(t)
            if remaining is not None and remaining <= 0.0 and job_id not in draining:
                move(job, JobState.SUCCEEDED, t, "training finished", runtime_s=job.elapsed_s(t), started_at=None)
                del allocations[job_id]
            else:
                allocations[job_id] = alloc.model_copy(update={"job": jobs[job_id]})
        # Checkpoints requested by preemption or reclaim complete.
        for job_id, done_at in list(draining.items()):
            if t >= done_at:
                job = jobs[job_id]
                saved = job.elapsed_s(done_at - CHECKPOINT_WRITE_S)
                interrupted = job.state is JobState.INTERRUPTED
                if not interrupted:
                    job = move(job, JobState.PREEMPTED, t, "checkpoint completed; stopped")
                lost = job.elapsed_s(t) - saved
                move(job, JobState.PENDING, t, "requeued; resumes from its checkpoint", runtime_s=saved,
                     started_at=None, enqueued_at=t, last_checkpoint_at=done_at, last_checkpoint_step=int(saved),
                     lost_work_s=job.lost_work_s + lost, pool=None)
                del draining[job_id]
                del allocations[job_id]
        # A Spot reclaim: every job on the pool checkpoints inside the notice and is requeued.
        if not reclaimed and t >= reclaim_at:
            reclaimed = True
            for job_id, alloc in list(allocations.items()):
                if alloc.pool == reclaim_pool and job_id not in draining:
                    job = jobs[job_id]
                    move(job, JobState.INTERRUPTED, t, "EC2 Spot Instance Interruption Warning: checkpointing",
                         interruptions=job.interruptions + 1)
                    draining[job_id] = t + CHECKPOINT_WRITE_S + STEP_S
        # One scheduling pass over the snapshot.
        snapshot = ClusterSnapshot.build(pools, allocations.values(), quotas)
        queue = SortedQueue.of(j for j in jobs.values() if j.state is JobState.PENDING)
        for decision in plan(snapshot, queue, t, config, rng):
            if isinstance(decision, Admit):
                job = move(decision.job, JobState.ADMITTED, t, decision.reason, pool=decision.pool)
                allocations[job.id] = Allocation(job=job, pool=decision.pool, gpus=snapshot.pools[decision.pool].demand_gpus(job))
            elif isinstance(decision, Preempt):
                for victim_id in decision.victims:
                    victim = jobs[victim_id]
                    victim = move(victim, JobState.CHECKPOINTING, t, f"preempted for {decision.job.id}: {decision.reason}",
                                  preemptions=victim.preemptions + 1)
                    allocations[victim_id] = allocations[victim_id].model_copy(
                        update={"job": victim, "draining_for": decision.job.id}
                    )
                    draining[victim_id] = t + CHECKPOINT_WRITE_S
        if jobs and all(j.state is JobState.SUCCEEDED for j in jobs.values()) and t >= arrivals[-1][0]:
            break
        t += STEP_S
    result.jobs = sorted(jobs.values(), key=lambda j: j.submitted_at)
    return result
