"""What an admission reserves on the capacity ledger, and what a release gives back, as steps on
its counters ("POOL#<name>", "TEAM#<team>"). Every `LedgerStore` turns the same steps into
conditional writes of its own (`spotline.aws.ledger` on DynamoDB, `spotline.control.memory` in
memory), committed in the transaction that moves the job, so they agree on what fits.

A team with a quota may use its nominal GPUs, and borrow beyond them what the planner allows
(`quota_shortfall`: at most its borrowing limit, and at most what the other teams lend, less what
others already borrow). Within its nominal quota the team's counter alone decides
(`used <= nominal - gpus`). To borrow, the team counters are read and the transaction also checks
that no other team's counter grew since: what the others lend only shrinks as their usage grows,
so a concurrent admission elsewhere makes this one fail cleanly instead of borrowing past the
cohort's idle quota. A release in between only gives more room, and passes the checks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from spotline.control.errors import CapacityExhausted
from spotline.control.records import Counter, pool_key, team_key
from spotline.domain.models import TeamQuota
from spotline.domain.quota import lendable_gpus, quota_shortfall
from spotline.domain.usage import run_buckets

# A store transaction takes at most 100 items; an admission also writes the job and its timeline.
MAX_QUOTA_ITEMS = 96

Roles = list[tuple[str, str]]


@dataclass(frozen=True)
class Take:
    """Add `gpus` to the counter `key` if it holds at most `limit` before (None: no limit), and
    count `moves` admissions among its changes."""

    key: str
    gpus: int
    limit: int | None
    moves: int = 1


@dataclass(frozen=True)
class NotAbove:
    """A check that the counter `key` holds at most `used` GPUs (a missing one holds 0)."""

    key: str
    used: int


@dataclass(frozen=True)
class Give:
    """Take `gpus` off the counter `key`, unconditionally, count one change, and add `usage` (bucket
    start -> scaled GPU-seconds, `spotline.domain.usage`) to its fair-share buckets."""

    key: str
    gpus: int
    usage: Mapping[int, float] = field(default_factory=dict)


def reserve(
    *,
    pool: str,
    capacity_gpus: int,
    team: str,
    gpus: int,
    quotas: Mapping[str, TeamQuota] | None,
    team_usage_hint: int | None,
    counters: Callable[[list[str]], Mapping[str, Counter]],
) -> tuple[list[Take | NotAbove], Roles]:
    """The steps that take `gpus` in `pool` and for `team`, each within its limit; with their roles
    for error mapping. `counters(teams)` reads the team counters (strongly consistent), only when
    the team would borrow.

    `team_usage_hint`: the team's usage as the caller counted it (the scheduling pass: its
    snapshot plus its own admissions since). Where that plus `gpus` is within the nominal quota,
    nothing is read: the team's own condition decides as it would after the read, and where the
    hint was low the write fails with the team's quota error (the caller then reserves again,
    reading).
    """
    if gpus > capacity_gpus:
        raise CapacityExhausted(f"pool {pool} has {capacity_gpus} GPUs; {gpus} requested")
    steps: list[Take | NotAbove] = [Take(pool_key(pool), gpus, capacity_gpus - gpus)]
    roles: Roles = [("pool", pool)]
    quota = (quotas or {}).get(team)
    if quota is None or quotas is None:
        return [*steps, Take(team_key(team), gpus, None)], [*roles, ("team", team)]
    if team_usage_hint is not None and team_usage_hint + gpus <= quota.nominal_gpus:
        return [*steps, Take(team_key(team), gpus, quota.nominal_gpus - gpus)], [*roles, ("team", team)]
    found = counters(list(quotas))
    usage = {name: found[team_key(name)].used for name in quotas if team_key(name) in found}
    if usage.get(team, 0) + gpus <= quota.nominal_gpus:
        # Within its nominal quota: the team's own counter decides, whatever the others do.
        return [*steps, Take(team_key(team), gpus, quota.nominal_gpus - gpus)], [*roles, ("team", team)]
    why = quota_shortfall(team, gpus, usage, quotas)
    if why is not None:
        raise CapacityExhausted(why)
    others = [name for name in quotas if name != team]
    if len(steps) + 1 + len(others) > MAX_QUOTA_ITEMS:
        raise CapacityExhausted(
            f"team {team} may not borrow: {len(others)} other teams are more than one transaction"
            f" can check ({MAX_QUOTA_ITEMS - 2})"
        )
    borrow = lendable_gpus(team, usage, quotas)
    if quota.borrowing_limit_gpus is not None:
        borrow = min(borrow, quota.borrowing_limit_gpus)
    steps.append(Take(team_key(team), gpus, quota.nominal_gpus + borrow - gpus))
    roles.append(("team", team))
    for other in others:
        steps.append(NotAbove(team_key(other), usage.get(other, 0)))
        roles.append(("lender", other))
    return steps, roles


def reserve_together(
    *, pools: Mapping[str, tuple[int, int, int]], teams: Mapping[str, tuple[int, int | None, int]]
) -> tuple[list[Take], Roles]:
    """The reservations of several admissions in one transaction (`reserve` for each, summed per
    counter): `pools` maps a pool to (GPUs, capacity, admissions), and its counter takes the GPUs
    under `used + GPUs <= capacity`; `teams` maps a team to (GPUs, limit, admissions), and its
    counter takes them under `used + GPUs <= limit` (None: no limit). A counter counts each
    admission among its moves, as one at a time would. Borrowing beyond a nominal quota is not
    reserved this way: that admission reserves alone, reading the counters (`reserve`)."""
    steps: list[Take] = []
    roles: Roles = []
    for pool, (gpus, capacity, admissions) in sorted(pools.items()):
        if gpus > capacity:
            raise CapacityExhausted(f"pool {pool} has {capacity} GPUs; {gpus} requested")
        steps.append(Take(pool_key(pool), gpus, capacity - gpus, moves=admissions))
        roles.append(("pool", pool))
    for team, (gpus, limit, admissions) in sorted(teams.items()):
        steps.append(Take(team_key(team), gpus, None if limit is None else limit - gpus, moves=admissions))
        roles.append(("team", team))
    return steps, roles


def release(
    *,
    pool: str,
    team: str,
    gpus: int,
    held_since: float | None,
    now: float | None,
    usage_half_life_s: float,
) -> tuple[list[Give], Roles]:
    """The steps that give back `gpus`, and add the run (held from `held_since` to `now`) to the
    team's usage buckets.

    A release is not conditional on the counters: a job leaving must never be blocked by a
    drifted counter (admission is where the limit is enforced, and the reconciler reports and
    repairs drift between the ledger and the active jobs)."""
    usage: dict[int, float] = {}
    if held_since is not None and now is not None:
        usage = run_buckets(gpus, held_since, now, usage_half_life_s)
    return (
        [Give(pool_key(pool), gpus), Give(team_key(team), gpus, usage)],
        [("other", f"ledger {pool}"), ("other", f"ledger {team}")],
    )
