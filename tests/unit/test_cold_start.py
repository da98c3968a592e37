"""A handler's cold start imports only what it runs: the X-Ray SDK only when tracing is on, and
the idempotency utility only when a handler that uses it is first invoked."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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
    from spotline.aws import lambda_runtime

    monkeypatch.delenv("LAMBDA_TASK_ROOT", raising=False)
    assert not lambda_runtime.tracing_enabled()
    monkeypatch.setenv("LAMBDA_TASK_ROOT", "/var/task")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "TRUE")
    assert not lambda_runtime.tracing_enabled()
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "false")
    assert lambda_runtime.tracing_enabled()
