"""Periodic reconciler: moves on jobs whose expected event never came (see
spotline.control.reconciler), and reports (then repairs) drift between the ledger and the jobs."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import control_plane, loaded, logger, metrics, tracer
from spotline.control.reconciler import reconcile


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    result = reconcile(control_plane())
    metrics.add_metric(name="ReconcilerRequeued", unit=MetricUnit.Count, value=len(result.requeued))
    metrics.add_metric(name="LedgerDrift", unit=MetricUnit.Count, value=len(result.drift))
    metrics.add_metric(name="LedgerRepaired", unit=MetricUnit.Count, value=len(result.repaired))
    # Runs that records gave up and Batch had not confirmed stopped (pending terminations).
    metrics.add_metric(
        name="TerminationsRetried", unit=MetricUnit.Count, value=len(result.terminations_retried)
    )
    metrics.add_metric(
        name="TerminationsConfirmed", unit=MetricUnit.Count, value=len(result.terminations_confirmed)
    )
    logger.info(
        "reconciled",
        extra={
            "examined": result.examined,
            "requeued": result.requeued,
            "drift": result.drift,
            "repaired": result.repaired,
            "terminations_retried": result.terminations_retried,
            "terminations_confirmed": result.terminations_confirmed,
        },
    )
    return {
        "examined": result.examined,
        "requeued": [list(requeued) for requeued in result.requeued],
        "drift": {key: list(counts) for key, counts in result.drift.items()},
        "repaired": {key: list(counts) for key, counts in result.repaired.items()},
    }


loaded()
