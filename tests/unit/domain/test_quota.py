"""Team quotas in a cohort (Kueue's sense): nominal quota, borrowing and lending limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spotline.domain import Allocation, ClusterSnapshot, Job, Ledger, Pool, TeamQuota, quota_shortfall
from spotline.domain.quota import borrowed_gpus, lendable_gpus
from tests.budget import examples

from .builders import cluster, job, pool, quota

EXHAUSTED = "team quota exhausted"


def quotas_of(*quotas: TeamQuota) -> dict[str, TeamQuota]:
    return {q.team: q for q in quotas}


@pytest.mark.parametrize(
    ("team", "extra", "usage", "quotas", "expected"),
    [
        ("a", 8, {}, [quota("a", 8), quota("b", 8)], None),
        ("a", 4, {"a": 4}, [quota("a", 8)], None),
        ("a", 12, {}, [quota("a", 8), quota("b", 8)], None),
        (
            "a",
            17,
            {},
            [quota("a", 8), quota("b", 8)],
            "a is at its nominal 8 GPUs and no idle quota to borrow",
        ),
        (
            "a",
            12,
            {},
            [quota("a", 8, borrow=2), quota("b", 8)],
            "a would use 12 GPUs, nominal 8 + borrowing limit 2",
        ),
        ("a", 12, {}, [quota("a", 8, borrow=4), quota("b", 8)], None),
        ("a", 12, {}, [quota("a", 8), quota("b", 8, lend=2)], "no idle quota to borrow"),
        ("a", 10, {}, [quota("a", 8), quota("b", 8, lend=2)], None),
        ("a", 12, {"b": 6}, [quota("a", 8), quota("b", 8, lend=6)], "no idle quota to borrow"),
        ("a", 10, {"b": 6}, [quota("a", 8), quota("b", 8, lend=6)], None),
        ("a", 10, {"c": 14}, [quota("a", 8), quota("b", 8), quota("c", 8)], None),
        ("a", 11, {"c": 14}, [quota("a", 8), quota("b", 8), quota("c", 8)], "no idle quota to borrow"),
        ("a", 6, {"a": 10}, [quota("a", 8), quota("b", 8)], None),
        ("a", 7, {"a": 10}, [quota("a", 8), quota("b", 8)], "no idle quota to borrow"),
        ("a", 1, {"a": 10}, [quota("a", 8, borrow=2), quota("b", 8)], "a would use 11 GPUs"),
        ("z", 1000, {"a": 8}, [quota("a", 8)], None),
        ("a", 1, {}, [quota("a", 0)], "no idle quota to borrow"),
    ],
    ids=[
        "within-nominal",
        "fills-nominal-exactly",
        "borrows-idle-quota",
        "borrows-more-than-is-idle",
        "over-borrowing-limit",
        "at-borrowing-limit",
        "over-lending-limit",
        "at-lending-limit",
        "lender-idle-below-its-lending-limit",
        "lender-idle-exactly-needed",
        "idle-partly-taken-by-another-borrower",
        "idle-fully-taken-by-another-borrower",
        "already-borrowing-takes-the-rest",
        "already-borrowing-counts-what-it-took",
        "already-at-borrowing-limit",
        "team-without-quota-is-unlimited",
        "zero-quota-alone-in-cohort",
    ],
)
def test_quota_shortfall(
    team: str, extra: int, usage: dict[str, int], quotas: list[TeamQuota], expected: str | None
) -> None:
    reason = quota_shortfall(team, extra, usage, quotas_of(*quotas))
    if expected is None:
        assert reason is None
    else:
        assert reason is not None
        assert reason.startswith(EXHAUSTED)
        assert expected in reason


@pytest.mark.parametrize(
    ("team", "usage", "borrowed", "lendable"),
    [
        ("a", {}, 0, 12),
        ("a", {"a": 12}, 4, 12),
        ("a", {"b": 10}, 0, 2),
        ("a", {"b": 10, "c": 6}, 0, 0),
        ("c", {"a": 3}, 0, 13),
    ],
    ids=[
        "idle-cohort-c-lends-only-4",
        "borrowing-its-own-take-is-not-subtracted",
        "another-borrower-took-part",
        "lender-idle-below-its-lending-limit",
        "a-lends-all-its-idle",
    ],
)
def test_borrowed_and_lendable(team: str, usage: dict[str, int], borrowed: int, lendable: int) -> None:
    # a: nominal 8 lends everything; b: nominal 8; c: nominal 8 lends at most 4.
    quotas = quotas_of(quota("a", 8), quota("b", 8), quota("c", 8, lend=4))
    assert (borrowed_gpus(team, usage, quotas), lendable_gpus(team, usage, quotas)) == (borrowed, lendable)


def snapshot_with(allocations: list[Allocation]) -> ClusterSnapshot:
    return cluster(
        [pool("p", capacity=16), pool("q", capacity=8)], allocations, [quota("a", 8), quota("b", 8)]
    )


A4 = job("a4").team("a").gpus(4).on("p")
B8 = job("b8").team("b").gpus(8).on("p")
B4Q = job("b4q").team("b").gpus(4).on("q")


@pytest.mark.parametrize(
    ("allocations", "subject", "target", "shortfall"),
    [
        ([], job("j").gpus(8).build(), "p", None),
        ([A4, B8], job("j").gpus(4).build(), "p", None),
        ([A4, B8], job("j").gpus(8).build(), "p", "pool p has 4 free GPUs of the 8 needed"),
        ([A4, B4Q], job("j").gpus(8).build(), "p", None),
        ([A4, B4Q], job("j").gpus(4).nodes(2).build(), "q", "pool q has 4 free GPUs of the 16 needed"),
        ([A4, B8, B4Q], job("j").team("b").gpus(4).build(), "p", "team quota exhausted"),
    ],
    ids=[
        "empty-cluster",
        "fills-the-pool",
        "pool-full",
        "borrows-from-b",
        "gang-needs-whole-nodes",
        "borrower-already-took-all-that-is-idle",
    ],
)
def test_ledger_shortfall(
    allocations: list[Allocation], subject: Job, target: str, shortfall: str | None
) -> None:
    # team a: nominal 8, b: nominal 8; pools p (16) and q (8).
    snapshot = snapshot_with(allocations)
    ledger = Ledger.of(snapshot)
    pools: dict[str, Pool] = snapshot.pools
    reason = ledger.shortfall(subject, pools[target])
    if shortfall is None:
        assert reason is None
    else:
        assert reason is not None
        assert reason.startswith(shortfall)


def test_ledger_take_and_give_back_balance() -> None:
    ledger = Ledger.of(snapshot_with([A4, B8]))
    assert (ledger.free("p"), ledger.team_used) == (4, {"a": 4, "b": 8})
    ledger.take("a", "p", 4)
    assert (ledger.free("p"), ledger.team_used) == (0, {"a": 8, "b": 8})
    ledger.give_back("a", "p", 4)
    assert (ledger.free("p"), ledger.team_used) == (4, {"a": 4, "b": 8})


@pytest.mark.parametrize(
    ("victims", "fits"),
    [
        ([], False),
        ([A4], True),
        ([B8], True),
        ([A4, B8], True),
        ([B4Q], False),
    ],
    ids=["nobody-leaves", "own-team-4-leaves", "other-team-8-leaves", "both-leave", "victim-in-another-pool"],
)
def test_ledger_fits_without(victims: list[Allocation], fits: bool) -> None:
    # p: a4 + b8 of 16 -> 4 free, so 8 more GPUs for team a need 4 freed in p. If a4 leaves, a is
    # within its nominal 8; if b8 leaves, a borrows 4 of b's now idle quota.
    ledger = Ledger.of(snapshot_with([A4, B8, B4Q]))
    before = (dict(ledger.pool_used), dict(ledger.team_used))
    assert ledger.fits_without(job("j").team("a").gpus(8).build(), ledger.pools["p"], victims) is fits
    assert (ledger.pool_used, ledger.team_used) == before


def _lendable_by_definition(team: str, usage: dict[str, int], quotas: dict[str, TeamQuota]) -> int:
    """What the other teams lend (idle quota, capped by the lending limit) minus what borrowers
    already took, written as the cohort rule says it."""
    others = [(q, usage.get(t, 0)) for t, q in quotas.items() if t != team]
    lent = sum(
        max(0, q.nominal_gpus - used)
        if q.lending_limit_gpus is None
        else min(max(0, q.nominal_gpus - used), q.lending_limit_gpus)
        for q, used in others
    )
    taken = sum(max(0, used - q.nominal_gpus) for q, used in others)
    return max(0, lent - taken)


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.none() | st.integers(0, 40), st.integers(0, 60)), max_size=8),
    st.integers(0, 8),
)
def test_lendable_gpus_is_the_cohort_rule(teams: list[tuple[int, int | None, int]], asker: int) -> None:
    quotas = {f"t{i}": quota(f"t{i}", nominal, lend=lend) for i, (nominal, lend, _) in enumerate(teams)}
    usage = {f"t{i}": used for i, (_, _, used) in enumerate(teams) if used}
    team = f"t{asker}"
    assert lendable_gpus(team, usage, quotas) == _lendable_by_definition(team, usage, quotas)
