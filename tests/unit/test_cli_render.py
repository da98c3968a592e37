"""What the client prints for people: no raw dicts, no `step None`, and tables that wrap to the
terminal's width."""

from __future__ import annotations

from typing import Any

import pytest
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


def test_the_events_table_keeps_times_states_and_ids_whole_at_80_columns() -> None:
    from spotline.cli.render import events_table

    timeline = {
        "job_id": "job-0b2306f1c9fc8d02",
        "events": [
            {
                "t": 1_764_779_716.0,
                "from": "RUNNING",
                "to": "CHECKPOINTING",
                "reason": "preempted for job-0fbc165d396d0a8a (critical): preempting 1 job(s) in"
                " a100-on-demand by least-lost-work",
            }
        ],
    }
    text = _text(events_table(timeline), width=80)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "2025-12-03T16:35:16Z" in text and "CHECKPOINTING" in text and "RUNNING" in text
    assert "job-0fbc165d396d0a8a" in text.replace("\n", "").replace(" ", "")  # folded, never cut
    assert "…" not in text


def test_the_jobs_table_never_cuts_a_state() -> None:
    job = {
        "id": "job-0123456789abcdef",
        "name": "a-rather-long-job-name",
        "state": "CHECKPOINTING",
        "priority": "normal",
        "effective_priority": 4464.1,
        "gpus": 4,
        "pool": "a100-on-demand",
        "submitted_at": None,
        "progress": 0.5,
    }
    text = _text(jobs_table([job]), width=80)
    assert "CHECKPOINTING" in text and "…" not in text.split("\n", 1)[1]


def test_a_tiny_negative_priority_term_prints_as_zero() -> None:
    text = _text(
        explain_view(
            {"job_id": "j", "state": "RUNNING", "priority": {"effective": 1.0, "terms": {"age": -0.001}}}
        )
    )
    assert "-0.0" not in text


def test_a_table_piped_or_redirected_is_full_width_one_line_a_row(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from spotline.cli.render import Output, emit

    monkeypatch.setenv("COLUMNS", "40")  # even where the environment says the screen is narrow
    reason = "pool a100-spot has 2 free GPUs of the 4 needed; team vision uses 12 of its 12 GPUs"
    job = {
        "id": "job-0123456789abcdef",
        "name": "a-long-name-for-a-job",
        "state": "PENDING",
        "priority": "normal",
        "effective_priority": 12.5,
        "gpus": 4,
        "pool": "a100-spot-normal",
        "submitted_at": 0,
        "wait_reason": reason,
    }
    emit([job, {**job, "id": "job-fedcba9876543210"}], Output.table, jobs_table)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3  # the header and one line per job
    assert "WAIT REASON / PROGRESS" in lines[0] and lines[1].endswith(reason)
    assert all(line == line.rstrip() for line in lines)


def _element(index: int, state: str, reason: str | None = None, pool: str | None = None) -> dict[str, Any]:
    return {
        "id": f"arr-1-{index}",
        "name": "lr-sweep",
        "state": state,
        "priority": "normal",
        "effective_priority": 10.0,
        "gpus": 1,
        "nodes": 1,
        "pool": pool,
        "submitted_at": 0,
        "wait_reason": reason,
        "array_id": "arr-1",
        "array_index": index,
    }


def test_a_sweep_is_one_row_with_counts_and_its_reason_once_expandable() -> None:
    from spotline.cli.render_arrays import folded, jobs_and_arrays_table

    reason = "waiting: array arr-1 has max_running=2 elements running; a long reason " * 2
    jobs = [
        _element(0, "RUNNING", pool="a100-spot"),
        _element(1, "RUNNING", pool="a100-spot"),
        {**_element(9, "PENDING"), "id": "job-solo", "array_id": None, "name": "solo"},
        *(_element(i, "PENDING", reason) for i in range(2, 8)),
    ]
    rows = folded(jobs)
    assert [r.get("array_id") or r["id"] for r in rows] == ["arr-1", "job-solo"]
    assert rows[0]["counts"] == {"RUNNING": 2, "PENDING": 6}

    text = _text(jobs_and_arrays_table(jobs), width=400)
    assert text.count("arr-1-") == 1  # the reason's element, named once; no row per element
    assert "2 RUNNING, 6 PENDING" in text and "lr-sweep (8 elements)" in text and "2 held" in text
    assert text.count("a long reason") == 2  # the reason once (it says it twice itself)
    expanded = _text(jobs_and_arrays_table(jobs, expand=True), width=400)
    assert all(f"arr-1-{i}" in expanded for i in range(8))


def test_every_screen_prints_the_same_step_and_the_reason_dated_by_its_pass() -> None:
    from spotline.cli.render_arrays import jobs_and_arrays_table

    base = {"team": "vision", "priority": "normal", "effective_priority": 1.0, "gpus": 4, "submitted_at": 1.0}
    running = {**base, "id": "job-r", "name": "r", "state": "RUNNING", "progress": 0.459, "step": 459}
    waiting = {
        **base,
        "id": "job-w",
        "name": "w",
        "state": "PENDING",
        "wait_reason": "waiting: pool od has 0 free GPUs of the 4 needed",
        "wait_reason_at": 1_800_000_000.0,
    }
    dated = "waiting: pool od has 0 free GPUs of the 4 needed (pass at 2027-01-15T08:00:00Z)"
    # status and list show the step and progress as the API defines them, and the reason with
    # the time of the pass that decided it
    assert "46% (step 459)" in _text(job_table(running))
    assert dated in _text(job_table(waiting))
    listed = _text(jobs_and_arrays_table([running, waiting]), width=300)
    assert "46% (step 459)" in listed and dated in listed
    # explain says the same reason, dated the same
    why = {"job_id": "job-w", "state": "PENDING", "summary": waiting["wait_reason"]}
    why |= {"wait_reason": waiting["wait_reason"], "wait_reason_at_s": waiting["wait_reason_at"]}
    assert dated in _text(explain_view(why), width=300)
