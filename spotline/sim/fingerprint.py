"""A digest of Spotline's decisions in a simulated run, by their values: `DecisionDigest`.

Each decision of each pass counts by what it decides, never by its wording: the action, the job,
its effective priority, the pool, the victims and whether they checkpoint (a preemption), the
source and the direction (a move), and for a wait its reason's type and fields. A change meant to
keep every decision (a refactoring, a speed-up, reworded reasons) keeps the digest; a change of a
decision changes it. `tests/sim/test_decisions_unchanged.py` pins it on two synthetic traces, and
`python -m bench.decisions_check` compares it before and after a change on larger samples.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Sequence
from enum import Enum
from typing import Any

from spotline.domain.config import SchedulerConfig
from spotline.domain.decisions import Admit, Decision, Move, Preempt, Wait
from spotline.sim.runner import simulate
from spotline.sim.spot_zones import SpotModel
from spotline.trace.canonical import Trace


def decision_values(decision: Decision) -> list[Any]:
    """What `decision` decides, as plain values (JSON-serializable)."""
    priority = round(decision.effective_priority, 6)
    match decision:
        case Admit(job=job, pool=pool):
            return ["admit", job.id, priority, pool]
        case Preempt(job=job, pool=pool, victims=victims, checkpoint=checkpoint):
            return ["preempt", job.id, priority, pool, list(victims), checkpoint]
        case Move(job=job, source=source, pool=pool, to_spot=to_spot):
            return ["move", job.id, priority, source, pool, to_spot]
        case Wait(job=job, why=why):
            return ["wait", job.id, priority, type(why).__name__, *_fields(why)]
    raise TypeError(f"not a decision: {decision!r}")


def _fields(reason: Any) -> list[Any]:
    return [_plain(getattr(reason, f.name)) for f in dataclasses.fields(reason)]


def _plain(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


class DecisionDigest:
    """Fed each pass's decisions (`observe`, a simulation's decision observer): the count and the
    SHA-256 of the admissions, preemptions and moves, and apart from them of the waits."""

    def __init__(self) -> None:
        self._acts = hashlib.sha256()
        self._waits = hashlib.sha256()
        self.acts = 0
        self.waits = 0

    def observe(self, now: float, decisions: Sequence[Decision]) -> None:
        for decision in decisions:
            line = json.dumps([now, *decision_values(decision)]).encode()
            if isinstance(decision, Wait):
                self.waits += 1
                self._waits.update(line)
            else:
                self.acts += 1
                self._acts.update(line)

    def to_json(self) -> dict[str, Any]:
        return {
            "decisions": self.acts,
            "decisions_sha256": self._acts.hexdigest(),
            "waits": self.waits,
            "waits_sha256": self._waits.hexdigest(),
        }


# Each job's record in a run, as the fingerprint hashes it.
JOB_FIELDS = (
    "id",
    "first_start",
    "finish",
    "preemptions",
    "interruptions",
    "lost_gpu_s",
    "useful_gpu_s",
    "queued_s",
)


def fingerprint(
    trace: Trace, *, gpus: int, seed: int, config: SchedulerConfig | None = None
) -> dict[str, Any]:
    """Spotline's run of `trace` on `gpus` GPUs (the advisor Spot model: the pinned runs are about
    the scheduling core, not the Spot model), fingerprinted: its decisions (`DecisionDigest`),
    the events and passes it took, each job's record (`JOB_FIELDS`) and its metrics."""
    digest = DecisionDigest()
    report = simulate(
        trace,
        ["spotline"],
        gpus=gpus,
        seed=seed,
        config=config,
        trace_name=trace.source,
        spot_model=SpotModel.ADVISOR,
        observer=digest.observe,
    )
    run = report.runs["spotline"]
    jobs = [[getattr(job, name) for name in JOB_FIELDS] for job in run.jobs]
    return {
        **digest.to_json(),
        "events": run.events,
        "passes": run.passes,
        "jobs_sha256": hashlib.sha256(json.dumps(jobs).encode()).hexdigest(),
        "metrics": report.to_json()["policies"]["spotline"],
    }
