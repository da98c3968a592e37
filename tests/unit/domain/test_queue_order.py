"""The order of a pass (`queue.ranked`): best effective priority first, then submission time,
then id, whatever order the window was read in."""

from __future__ import annotations

import random

from spotline.domain import SchedulerConfig
from spotline.domain.priority import PriorityScorer
from spotline.domain.queue import ranked

from .builders import HOUR, NOW, job


def test_a_pass_ranks_by_priority_then_submission_then_id() -> None:
    rng = random.Random(7)
    # Few distinct classes, sizes, teams and times: many jobs tie on priority, some on submission.
    window = [
        job(f"j{i:03d}")
        .priority(rng.choice(["low", "normal", "high"]))
        .gpus(rng.choice([1, 8]))
        .team(rng.choice(["a", "b"]))
        .submitted(NOW - rng.choice([0, 1, 2]) * HOUR)
        .build()
        for i in range(300)
    ]
    rng.shuffle(window)
    score = PriorityScorer(NOW, SchedulerConfig().weights, {"a": 0.5, "b": 1.0}, lambda _: 0.0)
    scores = dict(zip((j.id for j in window), score.scores(window), strict=True))
    want = sorted(window, key=lambda j: (-scores[j.id], j.submitted_at, j.id))

    got = ranked(window, score)

    assert [j.id for j, _ in got] == [j.id for j in want]
    assert [p for _, p in got] == [scores[j.id] for j in want]
    assert len({p for _, p in got}) < len(got) / 5  # (ties decide most of the order)
