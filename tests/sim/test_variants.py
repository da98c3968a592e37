"""Simulator variants (`spotline.sim.variants`, the planner's `PassHooks`): a mechanism that is not
a setting runs through the planner's hooks, in the simulator only, and `spotline simulate
--variant NAME` runs it (docs/simulator.md, "Variants")."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from spotline.cli import app
from spotline.domain import ClusterSnapshot, Job, Pool, SchedulerConfig, SortedQueue, plan
from spotline.domain.decisions import Decision, NoVictim, Wait
from spotline.domain.extension import PassHooks
from spotline.domain.preemption import Candidate
from spotline.sim import simulate
from spotline.sim import variants as registry
from spotline.sim.variants import Variant, VariantError, extension_of
from tests.unit.domain.builders import DAY, NOW, cluster, config, job, pool, summary

from .helpers import trace

OD16 = pool("od", capacity=16)


class BelowBlockedClass(PassHooks):
    """Once a job finds no victim in a pass, jobs of lower classes do not preempt in that pass."""

    def __init__(self) -> None:
        self.blocked = -1

    def decided(self, decision: Decision) -> None:
        if isinstance(decision, Wait) and isinstance(decision.why, NoVictim):
            self.blocked = max(self.blocked, decision.job.priority.rank)

    def may_preempt(self, job: Job, priority: float) -> str | None:
        if job.priority.rank < self.blocked:
            return "a class above found nothing to preempt in this pass"
        return None


class MostLostWorkFirst(PassHooks):
    """The victims in the reverse of the strategy's order."""

    def order_victims(self, preemptor: Job, candidates: list[Candidate]) -> list[Candidate]:
        return list(reversed(candidates))


class OnDemandOnly(PassHooks):
    """No job goes to a Spot pool."""

    def candidate_pools(self, job: Job, pools: list[Pool]) -> list[Pool]:
        return [p for p in pools if not p.is_spot]


class Counting(PassHooks):
    """Changes nothing; counts the decisions it is told of, across passes (a test's probe)."""

    told = 0

    def decided(self, decision: Decision) -> None:
        Counting.told += 1


class Extension:
    def __init__(self, name: str, hooks: type[PassHooks]) -> None:
        self.name = name
        self._hooks = hooks

    def for_pass(self, snapshot: ClusterSnapshot, now: float, config: SchedulerConfig) -> PassHooks:
        return self._hooks()


VARIANTS = {
    name: Variant(name, hooks.__doc__ or "", Extension(name, hooks))
    for name, hooks in (
        ("below-blocked-class", BelowBlockedClass),
        ("most-lost-work-first", MostLostWorkFirst),
        ("on-demand-only", OnDemandOnly),
        ("counting", Counting),
    )
}


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Variant]]:
    """The test variants in the registry (empty between pieces of work), for this test only."""
    monkeypatch.setattr(registry, "VARIANTS", dict(VARIANTS))
    yield registry.VARIANTS


def run(snapshot: ClusterSnapshot, pending: list[Job], *names: str) -> list[Decision]:
    policy = config(protection_period_s=600.0)
    extension = extension_of(list(names))
    return plan(snapshot, SortedQueue.of(pending), NOW, policy, random.Random(0), extension=extension)


def test_the_shipped_registry_is_empty() -> None:
    assert registry.VARIANTS == {}


def test_a_variant_may_keep_a_job_from_preempting(registered: dict[str, Variant]) -> None:
    # The high gang finds no victim (the low jobs are inside their protection period but one);
    # the normal job behind it could preempt the old low job.
    fresh = [job(f"f{i}").low().gpus(4).team("b").running_since(NOW - 60).on("od") for i in range(3)]
    old = job("old").low().gpus(4).team("b").running_since(NOW - DAY).on("od")
    pending = [
        job("gang").high().gpus(16).nodes(2).submitted(NOW - 10).build(),
        job("n").gpus(4).submitted(NOW - 5).build(),
    ]
    snapshot = cluster([OD16], [*fresh, old])
    assert summary(run(snapshot, pending)) == [("wait", "gang"), ("preempt", "n", "od", "old")]
    varied = run(snapshot, pending, "below-blocked-class")
    assert summary(varied) == [("wait", "gang"), ("wait", "n")]
    assert varied[1].reason == (
        "waiting: pool od has 0 free GPUs of the 4 needed; a class above found nothing to preempt in"
        " this pass (simulator variant below-blocked-class)"
    )


def test_a_variant_may_reorder_the_victims(registered: dict[str, Variant]) -> None:
    # Least lost work stops the job that checkpointed a minute ago; the variant the other.
    recent = job("recent").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 60).on("od")
    stale = job("stale").low().gpus(8).team("b").running_since(NOW - DAY).checkpointed(NOW - 3600).on("od")
    pending = [job("h").high().gpus(8).build()]
    snapshot = cluster([OD16], [recent, stale])
    assert summary(run(snapshot, pending)) == [("preempt", "h", "od", "recent")]
    assert summary(run(snapshot, pending, "most-lost-work-first")) == [("preempt", "h", "od", "stale")]


def test_a_variant_may_leave_pools_out(registered: dict[str, Variant]) -> None:
    snapshot = cluster([OD16, pool("spot", capacity=16, purchase="spot")])
    pending = [job("j").gpus(8).build()]
    assert summary(run(snapshot, pending)) == [("admit", "j", "spot")]
    assert summary(run(snapshot, pending, "on-demand-only")) == [("admit", "j", "od")]
    # With no pool left for it, it waits for that reason, and only it: the next job alike asks
    # placement again.
    no_od = cluster([pool("spot", capacity=16, purchase="spot")])
    assert summary(run(no_od, [job("a").gpus(8).build(), job("b").gpus(8).build()], "on-demand-only")) == [
        ("wait", "a"),
        ("wait", "b"),
    ]


def test_variants_apply_in_order_and_a_name_is_checked(registered: dict[str, Variant]) -> None:
    snapshot = cluster([OD16, pool("spot", capacity=16, purchase="spot")])
    both = run(snapshot, [job("j").gpus(8).build()], "counting", "on-demand-only")
    assert summary(both) == [("admit", "j", "od")]
    with pytest.raises(VariantError, match=r"unknown variant nope \(known: below-blocked-class, counting,"):
        extension_of(["nope"])
    with pytest.raises(VariantError, match="given twice"):
        extension_of(["counting", "counting"])


ROWS = [
    ("j1", 0.0, 2000.0, 8, "a", "low"),
    ("j2", 100.0, 1000.0, 8, "a", "normal"),
    ("j3", 200.0, 500.0, 8, "a", "high"),
]


def test_the_simulator_runs_spotline_with_a_variant_and_reports_it(registered: dict[str, Variant]) -> None:
    Counting.told = 0
    report = simulate(trace(ROWS), ["spotline", "fifo"], gpus=8, spot_fraction=0.0, variants=["counting"])
    assert Counting.told > 0  # the planner called the variant's hooks
    assert report.to_json()["variants"] == ["counting"]
    assert "variants" not in simulate(trace(ROWS), ["fifo"], gpus=8, spot_fraction=0.0).to_json()
    with pytest.raises(VariantError, match="unknown variant"):
        simulate(trace(ROWS), ["spotline"], gpus=8, variants=["nope"])


def _simulate(tmp_path: Path, *args: str) -> tuple[int, str, dict[str, Any] | None]:
    path = tmp_path / "t.csv"
    path.write_text(
        "job_id,submit_s,duration_s,gpus,team,priority\n"
        + "".join(f"{j},{s},{d},{g},{t},{p}\n" for j, s, d, g, t, p in ROWS)
    )
    out = tmp_path / "out.json"
    result = CliRunner().invoke(
        app,
        ["simulate", "--trace", str(path), "--gpus", "8", "--spot-fraction", "0", "--json", str(out), *args],
    )
    report = json.loads(out.read_text()) if out.exists() else None
    return result.exit_code, result.output, report


def test_simulate_variant_on_the_command_line(registered: dict[str, Variant], tmp_path: Path) -> None:
    code, _, report = _simulate(tmp_path, "--policy", "spotline", "--variant", "below-blocked-class")
    assert code == 0 and report is not None
    assert report["variants"] == ["below-blocked-class"] and set(report["policies"]) == {"spotline"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--variant", "nope"], "unknown variant nope (known: below-blocked-class, counting,"),
        (["--policy", "fifo", "--variant", "counting"], "run it with --policy spotline"),
    ],
)
def test_simulate_refuses_a_variant_it_cannot_run(
    registered: dict[str, Variant], tmp_path: Path, args: list[str], message: str
) -> None:
    code, output, report = _simulate(tmp_path, *args)
    assert code == 2 and report is None
    assert message in " ".join(output.replace("│", " ").split())
