"""The health of the compute environments behind Spotline's job queues.

Batch publishes no CloudWatch metric and no event when a compute environment turns INVALID (a
role, subnet, security group or launch template at fault): its jobs then wait RUNNABLE for good.
The reconciler asks every run (two read-only calls) and reports the count as a metric, which an
alarm watches. `spotline doctor --check batch` says the same on demand, with the fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mypy_boto3_batch import BatchClient


def invalid_compute_environments(batch: BatchClient, job_queues: Sequence[str]) -> list[str]:
    """The names of the compute environments behind `job_queues` (names or ARNs) that Batch
    reports INVALID, with the reason: `"<name>: <statusReason>"`, sorted. A queue Batch does not
    know is left out (doctor reports it). Raises what boto3 raises."""
    if not job_queues:
        return []
    queues = batch.describe_job_queues(jobQueues=list(dict.fromkeys(job_queues)))["jobQueues"]
    arns = sorted({o["computeEnvironment"] for q in queues for o in q.get("computeEnvironmentOrder", [])})
    if not arns:
        return []
    described = batch.describe_compute_environments(computeEnvironments=arns)["computeEnvironments"]
    return sorted(
        f"{environment.get('computeEnvironmentName', '?')}: {environment.get('statusReason', '')}"
        for environment in described
        if environment.get("status") == "INVALID"
    )
