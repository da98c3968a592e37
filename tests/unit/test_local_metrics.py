"""The local runtime's handlers with metrics disabled: nothing piles up, nothing reaches stdout."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from spotline import resources
from spotline.local import lambdas


def test_a_long_local_run_neither_keeps_nor_prints_disabled_metrics(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    metrics = Metrics(namespace="SpotlineTest", service="spotline")

    @metrics.log_metrics
    def handler(event: dict[str, Any], context: Any) -> None:
        metrics.add_metric(name="PassTriggers", unit=MetricUnit.Count, value=1)

    module = types.ModuleType("functions.metrics_probe")
    module.handler = handler  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "functions.metrics_probe", module)
    invoke = lambdas.import_handler(resources.Function(name="metrics-probe", module="metrics_probe"))
    for _ in range(150):  # Powertools prints a metric's set once it holds 100 values
        invoke({}, lambdas.LambdaContextStub())
    assert capsys.readouterr().out == ""
    assert Metrics().metric_set == {}


def test_a_local_handler_that_flushes_an_empty_set_warns_nobody(monkeypatch: pytest.MonkeyPatch) -> None:
    import warnings

    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    metrics = Metrics(namespace="SpotlineTest", service="spotline")

    @metrics.log_metrics
    def handler(event: dict[str, Any], context: Any) -> None:
        return None  # a handler with nothing to count (or whose set another emptied)

    module = types.ModuleType("functions.metrics_quiet")
    module.handler = handler  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "functions.metrics_quiet", module)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        invoke = lambdas.import_handler(resources.Function(name="metrics-quiet", module="metrics_quiet"))
        invoke({}, lambdas.LambdaContextStub())
    assert not [w for w in caught if "No application metrics" in str(w.message)]
