"""What the client prints for people: no raw dicts, no `step None`, and tables that wrap to the
terminal's width."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from spotline.cli.render import explain_view, job_table, jobs_table


def _text(renderable: Any, width: int = 200) -> str:
    console = Console(width=width, record=True)
    console.print(renderable)
    return console.export_text()


def test_explain_prints_placement_and_preemption_as_sentences() -> None:
    text = _text(
        explain_view(
            {
                "job_id": "job-1",
                "state": "ADMITTED",
                "summary": "admitted in a100-spot (Spot)",
                "placement": {
                    "pool": "a100-spot",
                    "purchase": "Spot",
                    "reason": "admitted to a100-spot",
                    "why_this_pool": "Spot pools come first",
                },
                "preempted_by": {
                    "by": "job-2",
                    "at": "2026-12-03T07:00:00Z",
                    "reason": "preempted for job-2",
                },
                "estimated_start": {"at": None, "reason": "admitted; waiting for an instance in a100-spot"},
            }
        )
    )
    assert "{" not in text and "'" not in text
    assert "placement: a100-spot (Spot): Spot pools come first; admitted: admitted to a100-spot" in text
    assert "preempted by: job-2 at 2026-12-03T07:00:00Z" in text
    assert "estimated start: unknown (admitted; waiting for an instance in a100-spot)" in text
    assert "(started)" not in text


def test_explain_of_a_started_job_says_when_it_started() -> None:
    text = _text(
        explain_view(
            {
                "job_id": "job-1",
                "state": "RUNNING",
                "estimated_start": {"at": "2026-12-03T07:00:00Z", "at_s": 1.0, "reason": "started"},
            }
        )
    )
    assert "started: 2026-12-03T07:00:00Z" in text and "estimated start" not in text


def test_status_never_shows_step_none() -> None:
    job = {
        "id": "job-1",
        "name": "train",
        "team": "vision",
        "state": "RUNNING",
        "state_reason": "started",
        "priority": "normal",
        "effective_priority": 10.0,
        "gpus": 4,
        "spot": "auto",
        "submitted_at": 1.0,
        "progress": 0.5,
        "step": None,
        "last_checkpoint": {"step": None, "at": None, "uri": "s3://b/k"},
    }
    text = _text(job_table(job))
    assert "None" not in text and "50%" in text and "s3://b/k" in text


def test_the_jobs_table_fits_a_narrow_terminal() -> None:
    job = {
        "id": "job-0123456789abcdef",
        "name": "a-rather-long-job-name",
        "state": "PENDING",
        "priority": "normal",
        "effective_priority": 10.0,
        "gpus": 4,
        "pool": None,
        "submitted_at": None,
        "wait_reason": "waiting for 4 GPUs in a100-spot; quota of team vision is used up",
    }
    text = _text(jobs_table([job]), width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "job-0123456789abcdef" in text  # ids never wrap
