"""`job_items.new_job_write`: the one way a new job is stored, whether submitted alone
(`JobRepository.create_many`) or as an array's element (`array_items.add_elements`)."""

from __future__ import annotations

from typing import Any

import pytest

from spotline.aws.dynamo import deserialize_item
from spotline.aws.job_items import new_job_write
from spotline.aws.timeline import TimelineRepository
from spotline.control.errors import InvalidTransition, ItemTooLarge
from spotline.domain import Job, JobSpec, JobState

NOW = 1_800_000_000.0
# Only the table's name is read: building the items calls no AWS.
TIMELINE = TimelineRepository(None, "Timeline")  # type: ignore[arg-type]


def job(job_id: str = "job-1", state: JobState = JobState.PENDING, command: list[str] | None = None) -> Job:
    spec = JobSpec(name="train", gpus=8, image="img", command=command or ["train"], priority="high")
    return Job(id=job_id, team="vision", spec=spec, state=state, submitted_at=NOW, enqueued_at=NOW)


def put(item: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    body = item["Put"]
    return body["TableName"], deserialize_item(body["Item"]), body["ConditionExpression"]


def test_a_new_job_is_its_item_if_the_id_is_free_and_its_first_timeline_entry() -> None:
    write = new_job_write("Jobs", TIMELINE, job(), "submitted", now=NOW, request_digest="d1")

    (table, item, condition), (timeline_table, entry, entry_condition) = map(put, write.items)
    assert (table, condition) == ("Jobs", "attribute_not_exists(job_id)")
    assert item["job_id"] == "job-1" and item["state"] == "PENDING" and item["queue_pk"] == "Q#high"
    assert item["request_digest"] == "d1" and item["state_reason"] == "submitted"
    assert (timeline_table, entry_condition) == ("Timeline", "attribute_not_exists(seq)")
    assert [entry[k] for k in ("job_id", "from", "to", "reason")] == ["job-1", "-", "PENDING", "submitted"]
    assert write.roles == [("new-job", "job-1"), ("timeline", "job-1")]
    assert write.record.state_reason == "submitted" and write.entry.at == NOW


def test_an_array_element_is_the_same_item_staged_out_of_the_queue() -> None:
    alone = new_job_write("Jobs", TIMELINE, job(), "submitted", now=NOW, request_digest="d1")
    element = new_job_write(
        "Jobs", TIMELINE, job(), "submitted", now=NOW, request_digest="d1", staged_for_array="array-1"
    )

    _, alone_item, _ = put(alone.items[0])
    _, element_item, _ = put(element.items[0])
    assert element_item["staged_for_array"] == "array-1"
    assert "queue_pk" not in element_item and "queue_sk" not in element_item
    unstaged = {k: v for k, v in element_item.items() if k != "staged_for_array"}
    assert unstaged == {k: v for k, v in alone_item.items() if k not in ("queue_pk", "queue_sk")}
    assert element.items[1] == alone.items[1]


def test_a_job_that_is_not_pending_is_refused() -> None:
    with pytest.raises(InvalidTransition, match="starts PENDING"):
        new_job_write("Jobs", TIMELINE, job(state=JobState.RUNNING), "x", now=NOW, request_digest=None)


def test_a_job_too_large_to_grow_is_refused_before_any_write() -> None:
    with pytest.raises(ItemTooLarge):
        new_job_write("Jobs", TIMELINE, job(command=["x" * 4000] * 100), "x", now=NOW, request_digest=None)
