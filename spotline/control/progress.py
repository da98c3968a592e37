"""A job's progress, defined once: the step it has reached and the fraction of it done.

Its runs report steps three ways, each its own event: heartbeats (the step the loop reached, with
the fraction the loop reported), checkpoints (the step made durable) and the restore a new run
reports (the step it resumed from). Read apart they disagree (a heartbeat's step trails a newer
checkpoint; a run that has not reported yet still shows the last run's fraction), so every
screen (`status`, `list`, `explain`, the dashboard) shows `job_progress` of the record instead.

- The step: while the job holds GPUs, the furthest step its current run is known to have
  reached (heartbeat, checkpoint or restore of that run); until that run reports what it
  restored, the latest durable checkpoint is where it stands (the run resumes from there).
  Otherwise (waiting, or ended) the latest durable checkpoint, or the last run's step when
  further (a run that ended without a checkpoint of its end).
- The fraction: what the loop reported, at the step it reported it (`progress_step`), carried
  to the step above in proportion (a fraction is the steps done of a total); 1 once SUCCEEDED.
"""

from __future__ import annotations

from dataclasses import dataclass

from spotline.control.records import ACTIVE_STATES, JobRecord
from spotline.domain import JobState


@dataclass(frozen=True)
class JobProgress:
    """Where a job stands: its step, and the fraction done (None where nothing says)."""

    step: int | None
    fraction: float | None


def job_step(record: JobRecord) -> int | None:
    """The step a job has reached, as the module's docstring defines it."""
    job = record.job
    durable = job.last_checkpoint_step
    if record.state in ACTIVE_STATES:
        run = record.run
        reached = [
            record.step,
            durable if record.last_checkpoint_run == run else None,
            record.restored_step if record.restored_run == run else None,
        ]
        if record.restored_run != run:
            reached.append(durable)  # where the run resumes, until it says what it restored
        known = [step for step in reached if step is not None]
    else:
        known = [step for step in (durable, record.step) if step is not None]
    return max(known) if known else None


def job_progress(record: JobRecord) -> JobProgress:
    """The job's step and fraction done, as the module's docstring defines them."""
    step = job_step(record)
    if record.state is JobState.SUCCEEDED:
        return JobProgress(step, 1.0)
    fraction = record.job.progress
    at = record.progress_step
    if fraction is not None and step is not None and at is not None and at > 0 and at != step:
        fraction = fraction * step / at
    return JobProgress(step, None if fraction is None else round(min(1.0, max(0.0, fraction)), 4))
