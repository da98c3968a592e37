"""A scheduling pass puts its Job State Changed events ten to a PutEvents call
(`EventPublisher.batched`), and still puts every one of them when it fails halfway."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from spotline.control.errors import PublishFailed
from spotline.control.publisher import EventPublisher
from spotline.control.records import TimelineEntry


class RecordingSink:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[list[str]] = []
        self.fail = fail

    def put(self, source: str, detail_type: str, details: Sequence[Mapping[str, Any]]) -> None:
        if self.fail:
            raise PublishFailed("refused")
        self.calls.append([str(d["job_id"]) for d in details])


def change(publisher: EventPublisher, n: int) -> None:
    record: Any = SimpleNamespace(
        id=f"job-{n}", team="nlp", job=SimpleNamespace(pool="p", priority=SimpleNamespace(value="normal"))
    )
    publisher.job_state_changed(record, [TimelineEntry(record.id, 2, 0.0, "PENDING", "ADMITTED", "fits")])


def test_outside_a_batch_each_change_is_put_at_once() -> None:
    sink = RecordingSink()
    publisher = EventPublisher(sink)
    change(publisher, 1)
    change(publisher, 2)
    assert sink.calls == [["job-1"], ["job-2"]]


def test_a_batch_puts_ten_to_a_call_and_the_rest_when_it_ends() -> None:
    sink = RecordingSink()
    publisher = EventPublisher(sink)
    with publisher.batched():
        for n in range(25):
            change(publisher, n)
        assert [len(call) for call in sink.calls] == [10, 10]
    assert [len(call) for call in sink.calls] == [10, 10, 5]
    assert [job for call in sink.calls for job in call] == [f"job-{n}" for n in range(25)]
    change(publisher, 99)  # the batch is over
    assert sink.calls[-1] == ["job-99"]


def test_a_batch_that_raises_still_puts_what_it_held() -> None:
    sink = RecordingSink()
    publisher = EventPublisher(sink)
    with pytest.raises(RuntimeError), publisher.batched():
        change(publisher, 1)
        with publisher.batched():  # nested: the outer block flushes
            change(publisher, 2)
        assert sink.calls == []
        raise RuntimeError("the pass failed")
    assert sink.calls == [["job-1", "job-2"]]


def test_a_refused_batch_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    publisher = EventPublisher(RecordingSink(fail=True))
    with publisher.batched():
        change(publisher, 1)
    assert "not published" in caplog.text and "job-1" in caplog.records[-1].__dict__["job_ids"]


def test_another_thread_is_not_batched() -> None:
    sink = RecordingSink()
    publisher = EventPublisher(sink)
    with publisher.batched():
        change(publisher, 1)
        other = threading.Thread(target=change, args=(publisher, 2))
        other.start()
        other.join()
        assert sink.calls == [["job-2"]]
    assert sink.calls == [["job-2"], ["job-1"]]
