"""Costs and budgets: `GET /usage`, the budget check of a submission, and the budget step of
each scheduling pass.

A team's spend in a month is its ended runs (the cost store's items, `ControlPlane.costs`)
plus its runs going now, priced at each pool's configured price per GPU-hour.

Budgets (`budget_usd`, `budget_soft`, `budget_hard` per team in cdk.json):
- soft (spend >= budget_soft x budget): the pass scales the team's fair-share weight by
  `BUDGET_SOFT_WEIGHT`, and the team gets one `Budget Threshold Crossed` event per month and
  level on the project bus;
- hard (spend >= budget_hard x budget): new submissions are refused with 402 (critical ones
  pass when `budget_critical_exempt`); running jobs continue.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from typing import Any

from spotline import resources
from spotline.control.errors import InvalidRequest, PublishFailed, SpotlineError, Unauthorized
from spotline.control.months import MonthUsage, month_of
from spotline.control.plane import ControlPlane
from spotline.control.records import JobRecord
from spotline.control.settings import TeamSettings
from spotline.domain import Priority, TeamQuota

logger = logging.getLogger(__name__)

# Over its soft budget, a team's fair-share weight is multiplied by this: with Slurm's factor
# 2^(-U/S), halving its share S squares its factor (0.5 -> 0.25 for a team at its share).
BUDGET_SOFT_WEIGHT = 0.5
DETAIL_BUDGET = "Budget Threshold Crossed"
SOURCE_BUDGET = resources.SOURCE_SCHEDULER


class BudgetExceeded(SpotlineError):
    """The team spent its hard budget threshold this month (HTTP 402)."""


def prices(cp: ControlPlane) -> dict[str, float]:
    return {p.name: p.price for p in cp.config.pools}


def budget_state(settings: TeamSettings | None, dollars: float) -> dict[str, Any]:
    if settings is None or settings.budget_usd is None:
        return {"budget_usd": None, "level": "none"}
    budget = settings.budget_usd
    level = "ok"
    if dollars >= settings.budget_hard * budget:
        level = "hard"
    elif dollars >= settings.budget_soft * budget:
        level = "soft"
    return {
        "budget_usd": budget,
        "soft_usd": round(settings.budget_soft * budget, 2),
        "hard_usd": round(settings.budget_hard * budget, 2),
        "spent_fraction": round(dollars / budget, 4),
        "level": level,
        "critical_exempt": settings.budget_critical_exempt,
    }


def _month_usage(cp: ControlPlane, teams: Sequence[str], month: str, now: float) -> dict[str, MonthUsage]:
    active = cp.jobs.active() if month == month_of(now) else []
    return cp.costs.months(teams, month, active, now)


def team_usage(cp: ControlPlane, caller: str, *, team: str | None, month: str | None) -> dict[str, Any]:
    """`GET /usage`: the caller's team (another team's only is refused) for `month` (YYYY-MM)."""
    if team is not None and team != caller:
        raise Unauthorized(f"team {caller} may read only its own usage")
    now = cp.clock()
    month = month or month_of(now)
    if (
        len(month) != 7
        or month[4] != "-"
        or not (month[:4] + month[5:]).isdigit()
        or not 1 <= int(month[5:]) <= 12
    ):
        raise InvalidRequest([{"loc": ["query", "month"], "msg": "expected YYYY-MM", "type": "value_error"}])
    usage = _month_usage(cp, [caller], month, now)[caller]
    view = usage.to_json(cp.config)
    view["budget"] = budget_state(cp.config.teams_by_name.get(caller), view["dollars"])
    return view


def check_budget(cp: ControlPlane, team: str, priority: Priority) -> None:
    """Refuse a submission of a team past its hard threshold (critical passes if exempt)."""
    settings = cp.config.teams_by_name.get(team)
    if settings is None or settings.budget_usd is None:
        return
    if priority is Priority.CRITICAL and settings.budget_critical_exempt:
        return
    now = cp.clock()
    month = month_of(now)
    dollars = _month_usage(cp, [team], month, now)[team].dollars(prices(cp))
    hard = settings.budget_hard * settings.budget_usd
    if dollars >= hard:
        raise BudgetExceeded(
            f"team {team} spent ${dollars:,.2f} of its ${settings.budget_usd:,.2f} budget for {month}"
            f" (hard threshold ${hard:,.2f}): new submissions are refused until next month or a"
            " larger budget; running jobs continue"
        )


def budget_pass(
    cp: ControlPlane, active: list[JobRecord], now: float, spend: dict[str, float] | None = None
) -> set[str]:
    """The budget step of a scheduling pass: the teams past their soft threshold (their fair-share
    weight is scaled down), after announcing each new crossing once; `spend` gets each budgeted
    team's dollars this month (the scheduler's `TeamSpend` metric)."""
    budgeted = [t for t in cp.config.teams if t.budget_usd is not None]
    if not budgeted:
        return set()
    month = month_of(now)
    book = cp.costs
    usage = book.months([t.team for t in budgeted], month, active, now)
    over: set[str] = set()
    for settings in budgeted:
        dollars = usage[settings.team].dollars(prices(cp))
        if spend is not None:
            spend[settings.team] = round(dollars, 2)
        state = budget_state(settings, dollars)
        level = state["level"]
        if level not in {"soft", "hard"}:
            continue
        over.add(settings.team)
        previous = usage[settings.team].notified
        if previous == level or previous == "hard":
            continue
        if not book.mark_notified(settings.team, month, level, previous):
            continue
        try:
            cp.publisher.sink.put(
                SOURCE_BUDGET,
                DETAIL_BUDGET,
                [
                    {
                        "team": settings.team,
                        "month": month,
                        "level": level,
                        "dollars": round(dollars, 2),
                        **state,
                    }
                ],
            )
        except PublishFailed:
            logger.exception("Budget Threshold Crossed not published", extra={"team": settings.team})
    return over


def soften(quotas: Sequence[TeamQuota], over: AbstractSet[str]) -> list[TeamQuota]:
    """The quotas with the fair-share weight of the teams in `over` scaled by BUDGET_SOFT_WEIGHT."""
    return [
        q.model_copy(update={"weight": q.weight * BUDGET_SOFT_WEIGHT}) if q.team in over else q
        for q in quotas
    ]
