"""The many-deadline-jobs bench's machinery (`bench.deadline_cluster`): usable capacity, the
seeded deadlines, the Pareto front and the goal rows."""

from __future__ import annotations

from bench import deadline_cluster as dc
from spotline.trace.synth import synth_trace


def test_usable_capacity_counts_spot_at_its_mean_availability():
    usable = dc.usable_gpus()
    on_demand = dc.GPUS - round(dc.GPUS * dc.SPOT_FRACTION)
    assert on_demand < usable < dc.GPUS
    assert dc.usable_gpus(spot_fraction=0.0) == dc.GPUS


def test_deadlines_are_seeded_and_some_are_out_of_reach():
    jobs = synth_trace(300, 1.0, 64, 5)
    first, again = dc.with_deadlines(jobs, 5), dc.with_deadlines(jobs, 5)
    assert first == again
    added = [j for j, before in zip(first, jobs, strict=True) if before.deadline_s is None and j.deadline_s]
    assert 0.2 * len(jobs) < len(added) < 0.4 * len(jobs)
    assert any(j.deadline_s is not None and j.deadline_s - j.submit_s < j.duration_s for j in added)


def row(cost: float, attainment: float, missed: int, **more: int) -> dict[str, float]:
    return {"cost": cost, "attainment": attainment, "missed": missed, **more}


def test_the_pareto_front_and_the_goals():
    ours = row(0.6, 0.95, 3, admitted=10, admitted_missed=0, impossible=2, impossible_flagged=2)
    table = {
        "spotline": ours,
        "slurm": row(0.8, 0.9, 5),
        "edf": row(0.75, 0.95, 3),
        dc.ALL_ON_DEMAND: row(1.0, 1.0, 0),
    }
    assert dc.pareto(table) == {"spotline", dc.ALL_ON_DEMAND}
    verdicts = {goal: met for goal, _, _, met in dc.goals(table)}
    assert all(verdicts.values())
    table["spotline"] = {**ours, "admitted_missed": 1, "impossible_flagged": 1, "cost": 0.65}
    assert not any(verdicts for verdicts in (met for _, _, _, met in dc.goals(table)))
