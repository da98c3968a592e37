"""Costs and budgets in the stack: the budgets of cdk.json reach the functions' configuration,
and the dashboard graphs each team's spend."""

from __future__ import annotations

import json

from spotline import resources as r
from tests.infra.support import Synthesized
from tests.infra.test_stack import flatten


def test_budgets_reach_the_functions_and_the_dashboard_graphs_spend(synthesized: Synthesized) -> None:
    functions = synthesized.resources("AWS::Lambda::Function").values()
    configs = [
        json.loads(flatten(f["Properties"]["Environment"]["Variables"][r.ENV_CONFIG]))
        for f in functions
        if r.ENV_CONFIG in f["Properties"].get("Environment", {}).get("Variables", {})
    ]
    assert configs
    budgets = {t["team"]: t.get("budget_usd") for t in configs[0]["teams"]}
    assert budgets and all(b is not None and b > 0 for b in budgets.values())
    (dashboard,) = synthesized.resources("AWS::CloudWatch::Dashboard").values()
    assert "TeamSpend" in flatten(dashboard["Properties"]["DashboardBody"])
