"""How fast one scheduling pass is, and that its cost does not grow with the queue.

`plan()` runs on a realistic cluster (4 pools, 4,096 GPUs, 8 teams with quotas, 1,000 running
allocations) with 1k, 10k and 100k pending jobs of mixed classes, some with deadlines. The
queue is indexed (`SortedQueue.of`) outside the timed region: on AWS that is the table's index,
and a pass only reads the head of it. Each size is timed several times and the median is
reported, per pass and per decision.

Goals: at most 10 ms per decision at 100k pending, and a 100k/1k ratio of ms per decision of
at most 1.2x (the pass reads a bounded window, so the queue's length must not show).
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from spotline.domain import (
    Allocation,
    ClusterSnapshot,
    Job,
    JobSpec,
    JobState,
    Pool,
    Priority,
    Purchase,
    SchedulerConfig,
    SortedQueue,
    SpotPreference,
    TeamQuota,
    plan_with_stats,
)
from spotline.domain.queue import WINDOW_PER_CLASS

NOW = 1_704_067_200.0  # 2024-01-01T00:00:00Z
SIZES = (1_000, 10_000, 100_000)
RUNNING = 1_000
REPEATS = 7
SEED = 20240101
GOAL_MS_PER_DECISION = 10.0
GOAL_RATIO = 1.2

POOLS = (
    Pool(
        name="a100-spot",
        gpu_type="a100",
        purchase=Purchase.SPOT,
        capacity_gpus=1536,
        price=0.35,
        interruption_rate_per_hour=0.05,
    ),
    Pool(name="a100-on-demand", gpu_type="a100", purchase=Purchase.ON_DEMAND, capacity_gpus=1024),
    Pool(
        name="h100-spot",
        gpu_type="h100",
        purchase=Purchase.SPOT,
        capacity_gpus=768,
        price=0.4,
        interruption_rate_per_hour=0.08,
    ),
    Pool(name="h100-on-demand", gpu_type="h100", purchase=Purchase.ON_DEMAND, capacity_gpus=768),
)
TEAMS = ("vision", "nlp", "speech", "recsys", "robotics", "research", "platform", "ads")
# Nominal quotas sum to the cluster (4,096 GPUs); some teams cap their borrowing or lending.
QUOTAS = (
    TeamQuota(team="vision", nominal_gpus=768, weight=2.0),
    TeamQuota(team="nlp", nominal_gpus=896, weight=2.0),
    TeamQuota(team="speech", nominal_gpus=384, borrowing_limit_gpus=128),
    TeamQuota(team="recsys", nominal_gpus=448, lending_limit_gpus=160),
    TeamQuota(team="robotics", nominal_gpus=384),
    TeamQuota(team="research", nominal_gpus=512, borrowing_limit_gpus=256),
    TeamQuota(team="platform", nominal_gpus=320, lending_limit_gpus=64),
    TeamQuota(team="ads", nominal_gpus=384),
)
PENDING_MIX = ((Priority.CRITICAL, 0.05), (Priority.HIGH, 0.2), (Priority.NORMAL, 0.45), (Priority.LOW, 0.3))
RUNNING_MIX = ((Priority.CRITICAL, 0.05), (Priority.HIGH, 0.15), (Priority.NORMAL, 0.4), (Priority.LOW, 0.4))
GPUS = ((1, 0.3), (2, 0.25), (4, 0.25), (8, 0.15), (16, 0.05))  # 16 = a gang of two 8-GPU nodes


def _pick(rng: random.Random, weighted: tuple[tuple[Any, float], ...]) -> Any:
    return rng.choices([v for v, _ in weighted], weights=[w for _, w in weighted])[0]


def _spec(rng: random.Random, name: str, priority: Priority, with_deadline: bool) -> JobSpec:
    gpus = _pick(rng, GPUS)
    gpu_type = rng.choice([None, None, "a100", "h100"])
    spot = rng.choice([SpotPreference.AUTO] * 6 + [SpotPreference.NEVER, SpotPreference.REQUIRED])
    if gpus == 16 and spot is SpotPreference.REQUIRED:
        spot = SpotPreference.AUTO  # a gang job may not require Spot (no multi-node job runs there)
    return JobSpec(
        name=name,
        priority=priority,
        gpus=gpus,
        nodes=2 if gpus == 16 else 1,
        image="spotline/train:latest",
        command=["python", "-m", "spotline.examples.train"],
        gpu_type=gpu_type,
        spot=spot,
        expected_runtime_s=rng.choice([None, 1800.0, 3600.0, 4 * 3600.0, 12 * 3600.0]),
        checkpoint_interval_s=rng.choice([600.0, 1800.0]),
        deadline=(
            datetime.fromtimestamp(NOW + rng.uniform(3600, 3 * 86400), tz=UTC) if with_deadline else None
        ),
    )


def build_cluster(rng: random.Random) -> ClusterSnapshot:
    """1,000 running allocations that fill most of the cluster without breaking a quota."""
    free = {p.name: p.capacity_gpus for p in POOLS}
    allocations: list[Allocation] = []
    i = 0
    while len(allocations) < RUNNING:
        i += 1
        spec = _spec(rng, f"run-{i}", _pick(rng, RUNNING_MIX), with_deadline=rng.random() < 0.05)
        started = NOW - rng.uniform(60, 2 * 86400)
        job = Job(
            id=f"run-{i:06d}",
            team=rng.choice(TEAMS),
            spec=spec,
            state=JobState.RUNNING,
            submitted_at=started - rng.uniform(0, 86400),
            enqueued_at=started - rng.uniform(0, 3600),
            started_at=started,
            last_checkpoint_at=started + rng.uniform(0, NOW - started) if rng.random() < 0.7 else None,
            progress=rng.random() if rng.random() < 0.5 else None,
            utilization=rng.random() if rng.random() < 0.5 else None,
            preemptions=rng.choice([0, 0, 0, 1, 2]),
        )
        pools = [p for p in POOLS if p.can_host(job) and free[p.name] >= p.demand_gpus(job)]
        if not pools:
            if i > 20 * RUNNING:
                break
            continue
        pool = rng.choice(pools)
        free[pool.name] -= pool.demand_gpus(job)
        allocations.append(
            Allocation(job=job.with_changes(pool=pool.name), pool=pool.name, gpus=pool.demand_gpus(job))
        )
    usage = {team: rng.uniform(100, 5000) for team in TEAMS}
    return ClusterSnapshot.build(POOLS, allocations, QUOTAS, usage)


def build_pending(rng: random.Random, count: int) -> list[Job]:
    jobs = []
    for i in range(count):
        submitted = NOW - rng.uniform(0, 2 * 86400)
        spec = _spec(rng, f"job-{i}", _pick(rng, PENDING_MIX), with_deadline=rng.random() < 0.1)
        jobs.append(
            Job(
                id=f"job-{i:07d}",
                team=rng.choice(TEAMS),
                spec=spec,
                submitted_at=submitted,
                enqueued_at=submitted,
                preemptions=rng.choice([0] * 8 + [1, 2]),
                interruptions=rng.choice([0] * 8 + [1, 2]),
            )
        )
    return jobs


def build_pending_same_head(size: int) -> list[Job]:
    """`size` pending jobs whose head is the 1k queue's: the first 1,000 jobs are the same in
    every size (submitted two days earlier, deadlines within a day), and the rest queue behind
    them in every index (later submissions, later deadlines). A pass then sees the same window
    at every size, so any difference in its cost comes from the queue's length alone."""
    head = [
        job.with_changes(submitted_at=job.submitted_at - 2 * 86400, enqueued_at=job.enqueued_at - 2 * 86400)
        for job in build_pending(random.Random(SEED), SIZES[0])
    ]
    tail = []
    for job in build_pending(random.Random(SEED + size), size - SIZES[0]):
        deadline = job.spec.deadline
        spec = (
            job.spec
            if deadline is None
            else job.spec.model_copy(update={"deadline": deadline + timedelta(days=3)})
        )
        tail.append(job.with_changes(id=f"tail-{job.id}", spec=spec))
    return head + tail


def timed_pass(
    snapshot: ClusterSnapshot, queue: SortedQueue, config: SchedulerConfig, seed: int
) -> tuple[float, Any]:
    """One pass, in milliseconds, with the garbage collector held off (as `timeit` does)."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        result = plan_with_stats(snapshot, queue, NOW, config, random.Random(seed))
        elapsed_ms = (time.perf_counter() - start) * 1000.0
    finally:
        gc.enable()
    return elapsed_ms, result


def run(same_head: bool = False) -> dict[str, Any]:
    """Build the cluster and the queues, time plan() at each size, and judge the goals.

    By default every size draws its own queue (the window's mix, and so the work per decision,
    differs a little between sizes); with `same_head` every size has the same window.

    The sizes are timed in turn within each repeat, so that a slower moment of the machine
    weighs on every size alike; the first pass of each size is a warm-up and is not counted.
    """
    rng = random.Random(SEED)
    snapshot = build_cluster(rng)
    config = SchedulerConfig()
    if same_head:
        queues = [SortedQueue.of(build_pending_same_head(size)) for size in SIZES]
    else:
        queues = [SortedQueue.of(build_pending(random.Random(SEED + size), size)) for size in SIZES]
    # The cluster and the queues (about a million objects) are moved out of the collector's
    # reach once, so that the collection before each timed pass reads only what passes made
    # (it took most of this bench's time when it walked them all before every pass).
    gc.collect()
    gc.freeze()
    try:
        return _timed_run(snapshot, config, queues)
    finally:
        gc.unfreeze()


def _timed_run(
    snapshot: ClusterSnapshot, config: SchedulerConfig, queues: list[SortedQueue]
) -> dict[str, Any]:
    pass_ms: list[list[float]] = [[] for _ in SIZES]
    per_decision_ms: list[list[float]] = [[] for _ in SIZES]
    last: list[Any] = [None for _ in SIZES]
    for repeat in range(REPEATS + 1):
        for i, queue in enumerate(queues):
            elapsed_ms, (decisions, stats) = timed_pass(snapshot, queue, config, SEED + repeat)
            last[i] = (decisions, stats)
            if repeat > 0:
                pass_ms[i].append(elapsed_ms)
                per_decision_ms[i].append(elapsed_ms / max(1, len(decisions)))
    results = []
    for i, queue in enumerate(queues):
        decisions, stats = last[i]
        results.append(
            {
                "pending": len(queue),
                "running": len(snapshot.allocations),
                "decisions": len(decisions),
                "actions": {a: sum(d.action == a for d in decisions) for a in ("admit", "preempt", "wait")},
                "candidates_examined": stats.candidates_examined,
                "ms_per_pass": statistics.median(pass_ms[i]),
                "ms_per_decision": statistics.median(per_decision_ms[i]),
            }
        )
    ratio = results[-1]["ms_per_decision"] / results[0]["ms_per_decision"]
    return {
        "gpus": snapshot.total_gpus,
        "gpus_in_use": sum(snapshot.used_gpus(p) for p in snapshot.pools),
        "window_per_class": WINDOW_PER_CLASS,
        "repeats": REPEATS,
        "sizes": results,
        "ratio": ratio,
        "goals": {"ms_per_decision_at_100k": GOAL_MS_PER_DECISION, "ratio": GOAL_RATIO},
        "met": ratio <= GOAL_RATIO and results[-1]["ms_per_decision"] <= GOAL_MS_PER_DECISION,
    }


def main() -> None:
    for same_head, title in (
        (False, "queues drawn independently per size"),
        (True, "the same head of the queue at every size"),
    ):
        report(run(same_head), title)


def report(result: dict[str, Any], title: str) -> None:
    print(
        f"plan() on {result['gpus']:,} GPUs ({result['gpus_in_use']:,} in use),"
        f" window {result['window_per_class']} per class, median of {result['repeats']} passes: {title}"
    )
    header = f"{'pending':>9} {'running':>8} {'examined':>9} {'decisions':>10} {'admit/preempt/wait':>19}"
    print(f"{header} {'ms/pass':>9} {'ms/decision':>12}")
    for row in result["sizes"]:
        actions = row["actions"]
        mix = f"{actions['admit']}/{actions['preempt']}/{actions['wait']}"
        print(
            f"{row['pending']:>9,} {row['running']:>8,} {row['candidates_examined']:>9}"
            f" {row['decisions']:>10} {mix:>19} {row['ms_per_pass']:>9.1f} {row['ms_per_decision']:>12.3f}"
        )
    at_100k = result["sizes"][-1]["ms_per_decision"]
    verdict = "met" if result["met"] else "MISSED"
    print(
        f"ms/decision 100k/1k: {result['ratio']:.2f}x (goal <= {GOAL_RATIO}x);"
        f" at 100k: {at_100k:.3f} ms (goal <= {GOAL_MS_PER_DECISION} ms): {verdict}"
    )


if __name__ == "__main__":
    main()
