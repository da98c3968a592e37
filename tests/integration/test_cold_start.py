"""A handler's cold start imports only what it runs: the X-Ray SDK only when tracing is on, the
idempotency utility only when a handler that uses it is first invoked, the planner only in the
scheduler, numpy only when a deadline plan is solved; and pydantic models build their validators
when first used, not at import (`bench/cold_start.py` measures the time)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# Each test starts interpreters (a cold start is a fresh process).
pytestmark = pytest.mark.slow

PROBE = (
    "import sys; import functions.{module}; "
    "print(','.join(m for m in ('aws_xray_sdk', 'aws_lambda_powertools.utilities.idempotency') "
    "if m in sys.modules))"
)


def loaded_after_import(module: str, **env: str) -> set[str]:
    environment = {k: v for k, v in os.environ.items() if k != "POWERTOOLS_TRACE_DISABLED"}
    environment.update({"LAMBDA_TASK_ROOT": "/var/task", "AWS_DEFAULT_REGION": "us-east-1", **env})
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    return set(filter(None, out.stdout.strip().split(",")))


@pytest.mark.parametrize("module", ["heartbeat", "api"])
def test_tracing_off_leaves_xray_and_idempotency_unimported(module: str) -> None:
    assert loaded_after_import(module, POWERTOOLS_TRACE_DISABLED="true") == set()


def test_tracing_on_traces_with_powertools() -> None:
    assert "aws_xray_sdk" in loaded_after_import("heartbeat", POWERTOOLS_TRACE_DISABLED="false")


def test_outside_lambda_nothing_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    from functions import runtime as lambda_runtime

    monkeypatch.delenv("LAMBDA_TASK_ROOT", raising=False)
    assert not lambda_runtime.tracing_enabled()
    monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "TRUE")
    assert not lambda_runtime.tracing_enabled()
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "false")
    assert lambda_runtime.tracing_enabled()


HANDLERS = (
    "api",
    "scheduler",
    "heartbeat",
    "checkpoint_completed",
    "batch_state_change",
    "spot_interruption",
    "rebalance",
    "capacity_reservation",
    "reconciler",
    "workflow_tasks",
)


def probe(code: str) -> str:
    environment = {k: v for k, v in os.environ.items() if k != "POWERTOOLS_TRACE_DISABLED"}
    environment.update(
        {
            "LAMBDA_TASK_ROOT": "/var/task",
            "AWS_DEFAULT_REGION": "us-east-1",
            "POWERTOOLS_TRACE_DISABLED": "true",
        }
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True
    )
    return out.stdout.rstrip("\n").split("\n")[-1].strip()


def test_only_the_scheduler_imports_the_planner() -> None:
    # Every other handler imported into one interpreter: none of them brings the pass along.
    others = ", ".join(f"functions.{h}" for h in HANDLERS if h != "scheduler")
    loaded = probe(
        f"import sys, {others}; "
        "print(','.join(m for m in ('spotline.domain.planner', 'spotline.control.scheduling', "
        "'spotline.control.insight') if m in sys.modules))"
    )
    assert loaded == ""


def test_no_handler_imports_numpy_at_cold_start() -> None:
    # numpy is the deadline plan's, imported when a plan is fitted or solved: at import it more
    # than doubled every handler's cold start (`spotline.domain.deadline_plan`).
    handlers = ", ".join(f"functions.{h}" for h in HANDLERS)
    assert probe(f"import sys, {handlers}; print('numpy' in sys.modules)") == "False"


def test_the_scheduler_imports_the_planner() -> None:
    assert probe("import sys, functions.scheduler; print('spotline.domain.planner' in sys.modules)") == "True"


def test_models_build_their_validators_on_first_use() -> None:
    """`defer_build`: importing the heartbeat handler builds none of Spotline's models (only the
    Powertools base it parses with); parsing a heartbeat builds the model it uses, and only that."""
    code = """
import json, pydantic, functions.heartbeat
from spotline.aws import event_models
from spotline.control.records import JobRecord
from spotline.control.settings import Settings
from spotline.domain import Job, SchedulerConfig

def spotline_built():
    seen, todo = set(), [pydantic.BaseModel]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in seen:
                seen.add(sub)
                todo.append(sub)
    return sorted(c.__name__ for c in seen if c.__module__.startswith("spotline") and c.__pydantic_complete__)

before = spotline_built()
event = {"version": "0", "id": "1", "source": "spotline.agent.vision", "account": "123456789012",
         "time": "2026-12-01T00:00:00Z", "region": "us-east-1", "resources": [],
         "detail-type": "Job Heartbeat", "detail": {"job_id": "job-1", "step": 3}}
event_models.HeartbeatEvent.model_validate(event)
print(json.dumps({"before": before, "after": spotline_built()}))
"""
    built = json.loads(probe(code))
    assert built["before"] == []
    assert built["after"] == ["HeartbeatEvent"]  # its detail's schema is built into it


GC_PROBE = "import gc, sys; import functions.{module}; print(gc.isenabled(), gc.get_freeze_count() > 0)"


@pytest.mark.parametrize("module", HANDLERS)
def test_in_lambda_a_handler_loads_without_the_collector_and_turns_it_back_on(module: str) -> None:
    """`functions/__init__.py` turns the cyclic garbage collector off for the cold start's
    imports; the handler module's last statement freezes what was loaded and turns it back on."""
    assert probe(GC_PROBE.format(module=module)) == "True True"


def test_outside_lambda_loading_a_handler_leaves_the_collector_alone() -> None:
    environment = {k: v for k, v in os.environ.items() if k != "LAMBDA_TASK_ROOT"}
    code = (
        "import gc; gc.disable(); import functions; off = not gc.isenabled(); gc.enable(); "
        "import functions.heartbeat; print(off, gc.isenabled(), gc.get_freeze_count())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "True True 0"
