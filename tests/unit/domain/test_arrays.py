"""Arrays and dependencies in the domain: parsing, sweep expansion, the max_running cap in
`plan`, and the dependency verdict (tables, fixed NOW)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from spotline.domain import JobSpec
from spotline.domain.arrays import Dependency, dependency_verdict, element_environment, parse_array_range
from spotline.domain.decisions import Wait
from tests.unit.domain.builders import cluster, job, pool, run_plan, summary

BASE = {"name": "s", "gpus": 1, "image": "img", "command": ["python", "train.py"]}


@pytest.mark.parametrize(
    ("text", "want"),
    [("0-15", list(range(16))), ("1,3,8-10", [1, 3, 8, 9, 10]), ("4", [4]), ("2-3,3", [2, 3])],
)
def test_array_ranges(text: str, want: list[int]) -> None:
    assert parse_array_range(text) == want


@pytest.mark.parametrize(
    ("body", "fault"),
    [
        ({"array": "5-2"}, "runs backwards"),
        ({"array": "a-b"}, "not an index or a range"),
        ({"array": "0-1000"}, "more than 1000"),
        ({"array": "0-3", "sweep": {"lr": [1]}}, "not both"),
        ({"max_running": 2}, "applies to an array"),
        ({"sweep": {"lr": []}}, "has no value"),
        ({"sweep": {"lr": [1, 1]}}, "repeats a value"),
        ({"sweep": {"9x": [1]}}, "letters, digits"),
        ({"sweep": {"a": list(range(40)), "b": list(range(26))}}, "1040 combinations"),
        ({"dependency": "afterany"}, "give after"),
        ({"after": ["j1", "j1"]}, "names a job twice"),
        ({"after": []}, "at least 1"),
    ],
)
def test_bad_array_and_dependency_fields_are_named(body: dict[str, object], fault: str) -> None:
    with pytest.raises(ValidationError) as error:
        JobSpec.model_validate({**BASE, **body})
    assert fault in str(error.value)


def test_slurms_percent_cap_is_max_running() -> None:
    spec = JobSpec.model_validate({**BASE, "array": "0-15%4"})
    assert (spec.array, spec.max_running, len(spec.elements())) == ("0-15", 4, 16)
    for bad, fault in (({"array": "0-3%x"}, "after %"), ({"array": "0-3%2", "max_running": 2}, "not both")):
        with pytest.raises(ValidationError, match=fault):
            JobSpec.model_validate({**BASE, **bad})


def test_sweep_makes_the_cartesian_product_first_parameter_slowest() -> None:
    spec = JobSpec.model_validate({**BASE, "sweep": {"lr": [0.1, 0.01], "seed": [1, 2], "warm": [True]}})
    assert spec.elements() == [
        (0, {"lr": "0.1", "seed": "1", "warm": "true"}),
        (1, {"lr": "0.1", "seed": "2", "warm": "true"}),
        (2, {"lr": "0.01", "seed": "1", "warm": "true"}),
        (3, {"lr": "0.01", "seed": "2", "warm": "true"}),
    ]
    assert spec.element_spec().is_array is False
    assert element_environment("arr-1", 2, {"lr": "0.01"}) == {
        "SPOTLINE_ARRAY_ID": "arr-1",
        "SPOTLINE_ARRAY_INDEX": "2",
        "SPOTLINE_PARAM_LR": "0.01",
    }


def _element(index: int, *, max_running: int = 4, array: str = "arr-1") -> object:
    return (
        job(f"{array}-{index}")
        .submitted(index)
        ._with(array_id=array, array_index=index, max_running=max_running)
    )


def test_max_running_caps_the_elements_admitted_and_says_why() -> None:
    # Given room for 16 one-GPU jobs and a sweep of 16 capped at 4, one of which runs already
    running = _element(0).running_since(0).on("od")
    pending = [_element(i).build() for i in range(1, 16)]
    decisions = run_plan(cluster([pool("od", capacity=16)], [running]), pending)
    # Then three more are admitted, and the rest wait, naming the array and its cap
    admitted = [row[1] for row in summary(decisions) if row[0] == "admit"]
    assert admitted == ["arr-1-1", "arr-1-2", "arr-1-3"]
    waits = [d for d in decisions if isinstance(d, Wait)]
    assert len(waits) == 12
    assert {w.reason for w in waits} == {"waiting: array arr-1 has max_running=4 elements running"}


def test_the_cap_is_per_array_and_leaves_other_jobs_alone() -> None:
    pending = [_element(i, max_running=1).build() for i in range(3)]
    pending += [_element(i, max_running=1, array="arr-2").build() for i in range(2)]
    pending.append(job("plain").submitted(50).build())
    decisions = run_plan(cluster([pool("od", capacity=16)]), pending)
    admitted = sorted(row[1] for row in summary(decisions) if row[0] == "admit")
    assert admitted == ["arr-1-0", "arr-2-0", "plain"]


@pytest.mark.parametrize(
    ("mode", "states", "want"),
    [
        ("afterok", {"a": "SUCCEEDED", "b": "SUCCEEDED"}, ("ready", None)),
        ("afterok", {"a": "SUCCEEDED", "b": "RUNNING"}, ("waiting", "b")),
        # A requeued dependency (preempted, pending again) is not done.
        ("afterok", {"a": "PENDING", "b": "SUCCEEDED"}, ("waiting", "a")),
        ("afterok", {"a": "PREEMPTED", "b": "SUCCEEDED"}, ("waiting", "a")),
        ("afterok", {"a": "RUNNING", "b": "FAILED"}, ("broken", "b")),
        ("afterok", {"a": "CANCELLED", "b": "SUCCEEDED"}, ("broken", "a")),
        ("afterok", {"a": None, "b": "SUCCEEDED"}, ("broken", "a")),
        ("afterany", {"a": "FAILED", "b": "CANCELLED"}, ("ready", None)),
        ("afterany", {"a": "FAILED", "b": "INTERRUPTED"}, ("waiting", "b")),
    ],
)
def test_dependency_verdict(mode: str, states: dict[str, str | None], want: tuple[str, str | None]) -> None:
    verdict = dependency_verdict(["a", "b"], Dependency(mode), states)
    assert (verdict.outcome, verdict.job_id) == want
    if verdict.job_id is not None:
        assert verdict.job_id in verdict.text()
