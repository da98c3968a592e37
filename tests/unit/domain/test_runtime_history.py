"""Run-time prediction from history (`spotline.domain.runtime_history`): an upper quantile of
what the team's earlier runs say, the declaration when history is thin, the cap always."""

from __future__ import annotations

import pytest

from spotline.domain.runtime_history import PastRun, predict_runtime, upper_quantile
from tests.unit.domain.builders import HOUR, job


def test_the_upper_quantile_rounds_up_to_an_observed_value():
    assert upper_quantile([1, 2, 3], 0.9) == 3
    assert upper_quantile(list(range(1, 21)), 0.9) == 18
    assert upper_quantile([5], 0.5) == 5


def test_history_raises_an_under_declaration_never_lowers_one():
    # The team's runs took 1.5 to 2.5 times what it declared: planned at the worst ratio seen.
    under = [PastRun(3 * HOUR, 2 * HOUR), PastRun(4 * HOUR, 2 * HOUR), PastRun(5 * HOUR, 2 * HOUR)]
    found = predict_runtime(job("j").expected_runtime(2 * HOUR).build(), under)
    assert found is not None
    assert found.planned_s == pytest.approx(5 * HOUR)
    assert found.low_s == pytest.approx(3 * HOUR) and found.high_s == pytest.approx(5 * HOUR)
    assert found.source == "history: 3 runs' actual / declared" and found.samples == 3
    # A team that declares twice what it needs keeps its declaration; the range says less.
    over = [PastRun(1.0 * HOUR, 2 * HOUR), PastRun(0.9 * HOUR, 2 * HOUR), PastRun(1.1 * HOUR, 2 * HOUR)]
    found = predict_runtime(job("j").expected_runtime(4 * HOUR).build(), over)
    assert found is not None and found.planned_s == 4 * HOUR
    assert found.high_s == pytest.approx(2.2 * HOUR) and found.source.startswith("declared; history")


def test_without_a_declaration_history_gives_its_run_times_upper_quantile():
    history = [PastRun(h * HOUR) for h in (1, 2, 3, 10)]
    found = predict_runtime(job("j").build(), history)
    assert found is not None and found.planned_s == 10 * HOUR and found.low_s == HOUR


@pytest.mark.parametrize("runs", [0, 1, 2])
def test_thin_history_keeps_the_declaration(runs):
    history = [PastRun(HOUR, 2 * HOUR)] * runs
    found = predict_runtime(job("j").expected_runtime(3 * HOUR).build(), history)
    assert found is not None and found.planned_s == 3 * HOUR and found.source == "declared"
    assert predict_runtime(job("j").build(), history) is None


def test_the_cap_bounds_every_prediction():
    capped = job("j").build()
    capped = capped.model_copy(update={"spec": capped.spec.model_copy(update={"max_runtime_s": 2 * HOUR})})
    found = predict_runtime(capped, [PastRun(h * HOUR) for h in (1, 5, 9)])
    assert found is not None and found.planned_s == 2 * HOUR and found.high_s == 2 * HOUR
