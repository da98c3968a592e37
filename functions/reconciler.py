"""Periodic reconciler: moves on jobs whose expected event never came (see
spotline.control.reconciler), and reports (then repairs) drift between the ledger and the jobs."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.runtime import METRICS_NAMESPACE, control_plane, loaded, logger, metrics, tracer
from spotline.aws.batch import AwsBatchLauncher
from spotline.aws.environments import invalid_compute_environments
from spotline.control.plane import ControlPlane
from spotline.control.reconciler import reconcile


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    plane = control_plane()
    result = reconcile(plane)
    # Gangs stopped because a node went silent (the StalledGangs alarm).
    metrics.add_metric(name="StalledGangs", unit=MetricUnit.Count, value=len(result.stalled_gangs))
    invalid = _invalid_environments(plane)
    if invalid is not None:
        metrics.add_metric(name="ComputeEnvironmentsInvalid", unit=MetricUnit.Count, value=len(invalid))
    for pool, age in result.oldest_unstarted_s.items():
        # One EMF document per pool (its dimension differs from the handler's metrics): the
        # Spot capacity alarms watch a Spot pool's oldest job waiting to start.
        per_pool = EphemeralMetrics(namespace=METRICS_NAMESPACE)
        per_pool.add_dimension(name="Pool", value=pool)
        per_pool.add_metric(name="OldestUnstartedAge", unit=MetricUnit.Seconds, value=age)
        per_pool.flush_metrics()
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
            "stalled_gangs": result.stalled_gangs,
            "oldest_unstarted_s": result.oldest_unstarted_s,
            "invalid_compute_environments": invalid,
        },
    )
    return {
        "examined": result.examined,
        "requeued": [list(requeued) for requeued in result.requeued],
        "drift": {key: list(counts) for key, counts in result.drift.items()},
        "repaired": {key: list(counts) for key, counts in result.repaired.items()},
    }


def _invalid_environments(plane: ControlPlane) -> list[str] | None:
    """The pools' INVALID compute environments, or None where there is no AWS Batch to ask (the
    local runtime's and the tests' launchers) or Batch did not answer (logged; no data point,
    which the alarm treats as not breaching)."""
    launcher = plane.launcher
    if not isinstance(launcher, AwsBatchLauncher):
        return None
    try:
        invalid = invalid_compute_environments(
            launcher.client, [q for p in plane.config.pools for q in p.job_queues]
        )
    except Exception:
        logger.warning("could not read the compute environments' status", exc_info=True)
        return None
    if invalid:
        logger.error("compute environments INVALID", extra={"invalid": invalid})
    return invalid


loaded()
