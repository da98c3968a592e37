"""docs/concepts/scheduling-policy.md documents every knob of the scheduler and of the control
plane's SPOTLINE_CONFIG with its true default: a field added, removed or re-defaulted in the code
fails here until the page says so."""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from spotline.control.settings import SpotlineConfig
from spotline.domain import SchedulerConfig
from spotline.domain.config import PriorityWeights

PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "scheduling-policy.md"
ROW = re.compile(r"^\| `(?P<name>[a-z_]+)` \| `(?P<default>[^`]*)`", re.MULTILINE)
# SPOTLINE_CONFIG's fields that are the deployment itself, not knobs with a default (they come
# from cdk.json's pools, teams and identities, or are written by the stack).
NOT_KNOBS = {
    "pools",
    "teams",
    "identities",
    "admins",
    "job_definitions",
    "job_definition",
    "efa_job_definitions",
    "multinode_job_definition",
    "scheduler",
}


def documented() -> dict[str, str]:
    rows = ROW.findall(PAGE.read_text())
    names = [name for name, _ in rows]
    assert len(names) == len(set(names)), "a knob is documented twice"
    return dict(rows)


def parse(text: str) -> Any:
    if text.startswith("{") and text.endswith("}"):
        return {item.strip() for item in text[1:-1].split(",") if item.strip()}
    if text in ("true", "false"):
        return text == "true"
    if text == "null":
        return None
    try:
        return float(text)
    except ValueError:
        return text


def expected(value: Any) -> Any:
    if isinstance(value, frozenset | set):
        return {v.value if isinstance(v, Enum) else v for v in value}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    return value


def knobs(model: type[BaseModel], leave_out: frozenset[str] | set[str] = frozenset()) -> dict[str, Any]:
    instance_defaults = {}
    for name, field in model.model_fields.items():
        if name in leave_out or name == "weights":
            continue
        instance_defaults[name] = field.get_default(call_default_factory=True)
    return instance_defaults


CASES = [
    *[("SchedulerConfig", n, v) for n, v in knobs(SchedulerConfig).items()],
    *[("PriorityWeights", n, v) for n, v in knobs(PriorityWeights).items()],
    *[("SpotlineConfig", n, v) for n, v in knobs(SpotlineConfig, NOT_KNOBS).items()],
]


@pytest.mark.parametrize(("model", "name", "default"), CASES, ids=[f"{m}.{n}" for m, n, _ in CASES])
def test_every_knob_is_documented_with_its_default(model: str, name: str, default: Any) -> None:
    rows = documented()
    assert name in rows, f"{model}.{name} is missing from {PAGE.name}"
    assert parse(rows[name]) == expected(default), f"{model}.{name}: the page says {rows[name]!r}"


def test_the_page_documents_no_knob_that_does_not_exist() -> None:
    known = {name for _, name, _ in CASES}
    assert set(documented()) <= known
    assert len(known) > 25  # the three models' knobs, not an empty comparison
