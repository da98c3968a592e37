"""What a job's checkpoint costs, from what its agent measured (size, write time, restore time).

The agent reports each checkpoint's size and how long its write (capture to durable manifest) and
the run's restore took (`Checkpoint Completed`); the control plane keeps the last figures on the
job. A job without figures (no checkpoint yet, an older agent) is planned with the global
defaults, as before.

- **Grace period**: how long a preemption waits for the victim's checkpoint. The global
  `grace_period_s` covers the poll interval and the rest of a step for a small checkpoint; a job
  whose measured write needs longer gets `GRACE_FACTOR` times its write plus `GRACE_MARGIN_S`,
  so a 100 GB checkpoint is not cut off and silently replaced by the last periodic one.
- **Lost work**: a preemption or an interruption also costs the restore of the next run.
- **Spot notice**: a checkpoint that cannot be written within the 2-minute notice (less the time
  to notice it) does not save the work: an interruption then loses half a checkpoint interval.
  How long an interruption waits for the checkpoint is sized the same way: a job whose measured
  write would still be running at the usual deadline (the notice less a margin) is waited for
  until the notice ends, since the instance is lost then anyway.
"""

from __future__ import annotations

from spotline.domain.config import SchedulerConfig
from spotline.domain.models import Job

# AWS's Spot instance-action notice, and the agent's worst delay in seeing it (it polls every 5 s).
SPOT_NOTICE_S = 120.0
NOTICE_DETECT_S = 5.0
# A measured write's grace: this many times the write (a slower write than the last one), plus
# the poll interval and the rest of a step.
GRACE_FACTOR = 1.5
GRACE_MARGIN_S = 30.0


def grace_period_s(job: Job, default_s: float) -> float:
    """Seconds a preemption waits for `job`'s checkpoint: the global default, or longer when the
    job's measured write needs it."""
    if job.checkpoint_write_s is None:
        return default_s
    return max(default_s, GRACE_FACTOR * job.checkpoint_write_s + GRACE_MARGIN_S)


def spot_wait_deadline(job: Job, *, requested_at: float, notice_end: float, margin_s: float) -> float:
    """Until when an interruption waits for `job`'s checkpoint, asked for at `requested_at`, on a
    notice that ends (the instance is reclaimed) at `notice_end`: `margin_s` before the end, or
    the end itself when the job's measured write (times `GRACE_FACTOR`) would not be done by
    then. Giving up earlier would stop the run while its checkpoint lands and count its work
    as lost, for no gain: the capacity goes at the end of the notice either way."""
    deadline = notice_end - margin_s
    if job.checkpoint_write_s is not None and requested_at + GRACE_FACTOR * job.checkpoint_write_s > deadline:
        return notice_end
    return deadline


def write_s(job: Job, config: SchedulerConfig) -> float:
    """The job's checkpoint write: measured, else `checkpoint_write_s`."""
    return config.checkpoint_write_s if job.checkpoint_write_s is None else job.checkpoint_write_s


def restore_s(job: Job) -> float:
    """The measured restore time of the job's checkpoint (0 when none was measured)."""
    return job.checkpoint_restore_s or 0.0


def fits_spot_notice(job: Job) -> bool | None:
    """Whether the job's checkpoint can be written inside the Spot notice (None: not measured)."""
    if job.checkpoint_write_s is None:
        return None
    return job.checkpoint_write_s + NOTICE_DETECT_S <= SPOT_NOTICE_S


def interruption_lost_s(job: Job, config: SchedulerConfig) -> float:
    """Work one Spot interruption loses, besides the restart: the checkpoint write the agent makes
    inside the notice (the measured write, else `checkpoint_write_s`), or half a checkpoint
    interval when a measured write does not fit the notice; plus the measured restore."""
    if fits_spot_notice(job) is not False:
        lost = write_s(job, config)
    else:
        lost = job.spec.checkpoint_interval_s / 2.0
    return lost + restore_s(job)


def describe(job: Job, default_grace_s: float) -> dict[str, object] | None:
    """The figures `explain` shows (None when the job has none)."""
    if job.checkpoint_write_s is None and job.checkpoint_bytes is None and job.checkpoint_restore_s is None:
        return None
    return {
        "size_bytes": job.checkpoint_bytes,
        "write_s": job.checkpoint_write_s,
        "restore_s": job.checkpoint_restore_s,
        "grace_period_s": round(grace_period_s(job, default_grace_s), 1),
        "fits_spot_notice": fits_spot_notice(job),
    }
