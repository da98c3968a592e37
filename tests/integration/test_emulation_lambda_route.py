"""The one patch on moto (`spotline.local.moto_lambda_route`): Step Functions' Lambda tasks run
the Python handlers with Lambda's error semantics (Retry and Catch match the exception's class),
it is refused on any moto but the pinned one, and uninstalling puts moto back."""

from __future__ import annotations

import importlib
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from spotline.local.emulator import MOTO_CONFIG
from spotline.local.lambdas import function_arn
from spotline.local.moto_lambda_route import (
    _LAMBDA_EVAL,
    MOTO_VERSION,
    LambdaTaskDispatcher,
    UnsupportedMotoVersion,
    dispatch_lambda_tasks,
    require_moto_version,
)
from spotline.local.moto_server import SerializedMotoServer

from .helpers import moto_client


@pytest.fixture
def sfn(moto_server: tuple[SerializedMotoServer, str]) -> Iterator[Any]:
    from moto.core.config import default_user_config

    saved = {service: dict(default_user_config[service]) for service in MOTO_CONFIG}  # type: ignore[literal-required]
    default_user_config["stepfunctions"]["execute_state_machine"] = True
    try:
        yield moto_client("stepfunctions", moto_server[1])
    finally:
        for service, config in saved.items():
            default_user_config[service] = config  # type: ignore[literal-required]


def _machine(sfn: Any, name: str, function: str) -> str:
    definition = {
        "StartAt": "Flaky",
        "States": {
            "Flaky": {
                "Type": "Task",
                "Resource": "arn:aws:states:::lambda:invoke",
                "Parameters": {"FunctionName": function_arn(function), "Payload.$": "$"},
                "ResultSelector": {"attempts.$": "$.Payload.attempts"},
                "Retry": [
                    {"ErrorEquals": ["Flaked"], "IntervalSeconds": 1, "BackoffRate": 1, "MaxAttempts": 2}
                ],
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "GaveUp"}],
                "End": True,
            },
            "GaveUp": {"Type": "Pass", "End": True},
        },
    }
    return sfn.create_state_machine(  # type: ignore[no-any-return]
        name=name, definition=json.dumps(definition), roleArn="arn:aws:iam::123456789012:role/sfn"
    )["stateMachineArn"]


def _run_to_end(sfn: Any, machine: str, payload: dict[str, Any]) -> dict[str, Any]:
    execution = sfn.start_execution(
        stateMachineArn=machine, name=uuid.uuid4().hex, input=json.dumps(payload)
    )["executionArn"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        described = sfn.describe_execution(executionArn=execution)
        if described["status"] != "RUNNING":
            return described  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError("the execution never ended")


def test_a_task_runs_the_handler_and_is_retried_then_caught_by_its_exception_class(sfn: Any) -> None:
    machine = _machine(sfn, "flaky", "flaky")
    attempts: dict[str, int] = {}

    class Flaked(Exception):
        pass

    def flaky(event: dict[str, Any], context: Any) -> dict[str, Any]:
        run = event["run"]
        attempts[run] = attempts.get(run, 0) + 1
        if attempts[run] <= event["failures"]:
            raise Flaked(run)
        return {"attempts": attempts[run]}

    with dispatch_lambda_tasks({"flaky": flaky}) as dispatcher:
        # Two failures, two retries allowed (per execution): the third attempt succeeds.
        for n in range(2):
            output = json.loads(_run_to_end(sfn, machine, {"run": f"r{n}", "failures": 2})["output"])
            assert output == {"attempts": 3}
        # Three failures exhaust the retries: caught, with Lambda's error shape.
        output = json.loads(_run_to_end(sfn, machine, {"run": "r9", "failures": 3})["output"])
        assert output["error"]["Error"] == "Flaked"
        assert [name for name, _ in dispatcher.invocations].count("flaky") == 9


def test_a_function_not_registered_fails_the_task_as_aws_would(sfn: Any) -> None:
    machine = _machine(sfn, "absent", "no-such-function")
    with dispatch_lambda_tasks({}):
        output = json.loads(_run_to_end(sfn, machine, {"run": "x", "failures": 0})["output"])
    assert output["error"]["Error"] == "Lambda.ResourceNotFoundException"


def test_uninstall_puts_moto_back() -> None:
    module = importlib.import_module(_LAMBDA_EVAL)
    before = (module._invoke_lambda_function, module.exec_lambda_function)
    with dispatch_lambda_tasks({}):
        assert (module._invoke_lambda_function, module.exec_lambda_function) != before
    assert (module._invoke_lambda_function, module.exec_lambda_function) == before


def test_another_moto_version_is_refused_with_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    import moto

    require_moto_version()  # the installed one is the pinned one
    with pytest.raises(
        UnsupportedMotoVersion, match=rf"moto 5\.3\.0 is installed: install moto=={MOTO_VERSION}"
    ):
        require_moto_version("5.3.0")
    module = importlib.import_module(_LAMBDA_EVAL)
    before = module.exec_lambda_function
    monkeypatch.setattr(moto, "__version__", "5.3.0")
    with pytest.raises(UnsupportedMotoVersion):
        LambdaTaskDispatcher({}).install()
    assert module.exec_lambda_function is before  # nothing patched


def test_the_pin_matches_the_project_pin() -> None:
    from pathlib import Path

    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert f"=={MOTO_VERSION}" in pyproject.split("moto[", 1)[1].split('"', 1)[0]
