"""The stack's building blocks without a full synth: context parsing, event patterns, ASL checks,
Lambda code staging, and one synth with an imported VPC (no cdk-nag)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App
from aws_cdk.assertions import Annotations, Match, Template

import stacks.spotline_stack
from spotline import resources as r
from stacks.config import ConfigError, parse_context
from stacks.packaging import bytecode_compiler, stage_lambda_code
from stacks.routing import event_pattern
from stacks.spotline_stack import SpotlineStack
from stacks.workflows import read_definition
from tests.infra.support import cdk_context, source_dirs

SPOT_POOL = {
    "name": "p",
    "gpu_type": "a100",
    "instance_types": ["p4d.24xlarge"],
    "purchase": "spot",
    "max_gpus": 64,
}


def context(**changes: Any) -> dict[str, Any]:
    return {"pools": [dict(SPOT_POOL)], **changes}


# --- context ---------------------------------------------------------------------------------


def test_pool_size_in_vcpus_comes_from_the_instance_shape() -> None:
    (pool,) = parse_context(context()).pools
    assert (pool.vcpus_per_gpu, pool.gpus_per_node, pool.max_vcpus) == (12, 8, 768)
    assert pool.is_spot


def test_mixed_instance_types_size_for_the_most_cpu_heavy() -> None:
    raw = {**SPOT_POOL, "instance_types": ["g5.12xlarge", "g5.48xlarge"], "max_gpus": 8}
    (pool,) = parse_context({"pools": [raw]}).pools
    assert pool.vcpus_per_gpu == 24  # g5.48xlarge: 192 / 8; g5.12xlarge: 48 / 4 = 12
    assert pool.gpus_per_node == 4


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({}, "at least one GPU pool"),
        ({"pools": [{**SPOT_POOL, "purchase": "reserved"}]}, "'purchase' must be"),
        ({"pools": [{**SPOT_POOL, "max_gpu": 8}]}, "unknown keys ['max_gpu']"),
        ({"pools": [{**SPOT_POOL, "instance_types": ["x9.huge"]}]}, "give 'vcpus_per_gpu'"),
        ({"pools": [SPOT_POOL, SPOT_POOL]}, "duplicate pool names"),
        ({"pools": [{**SPOT_POOL, "max_gpus": 0}]}, "positive integer"),
        (context(vpc_id="vpc-1"), "needs 'vpc_subnet_ids'"),
        (context(stage="dev env"), "must be letters"),
        (context(tracing="yes"), "'tracing': 'yes' must be true or false"),
        (
            context(
                scheduler={"preemption_delay_s": 30, "fresh_checkpoint_s": 60, "weights": {"attained": 1}}
            ),
            "not a setting of this version: fresh_checkpoint_s, weights.attained",
        ),
        (context(scheduler={"preemption_delay_s": -1}), "preemption_delay_s: Input should be greater than"),
        (
            context(control_plane={"launch_timeout": 60}),
            "context 'control_plane': not a setting of this version",
        ),
        (context(control_plane={"pools": []}), "not a setting of this version: pools"),
    ],
    ids=[
        "no-pools",
        "purchase",
        "misspelt-key",
        "unknown-instance",
        "duplicate",
        "zero-gpus",
        "vpc",
        "stage",
        "tracing",
        "removed-scheduler-settings",
        "bad-scheduler-value",
        "unknown-control-plane-setting",
        "control-plane-setting-the-stack-writes",
    ],
)
def test_impossible_contexts_fail_with_the_key_named(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=None) as raised:
        parse_context(raw)
    assert message in str(raised.value)


def test_committed_context_parses() -> None:
    config = parse_context(cdk_context())
    assert {p.purchase for p in config.pools} == {"spot", "on-demand"}
    # No account: the committed stack is account-agnostic (its AZs come from Fn::GetAZs at deploy
    # time, not from a lookup cached for some account)
    assert (config.account, config.region) == (None, "us-east-1")
    assert config.tracing is False
    assert parse_context(context(tracing=True)).tracing is True


# --- event patterns --------------------------------------------------------------------------


@pytest.mark.parametrize("rule", r.RULES, ids=lambda rule: rule.name)
def test_every_declared_pattern_maps_onto_cdk(rule: r.Rule) -> None:
    event_pattern(rule.pattern)


def test_a_pattern_key_eventbridge_ignores_is_refused() -> None:
    with pytest.raises(ValueError, match="detail_type"):
        event_pattern({"source": ["x"], "detail_type": ["y"]})


# --- ASL -------------------------------------------------------------------------------------

MACHINE = r.StateMachine("m", "m.asl.json", "ENV", {"TasksArn": "workflow_tasks"})


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.asl.json"
    path.write_text(text)
    return path


def test_definition_with_exactly_the_declared_placeholders_is_accepted(tmp_path: Path) -> None:
    text = json.dumps(
        {"StartAt": "A", "States": {"A": {"Type": "Task", "Resource": "${TasksArn}", "End": True}}}
    )
    assert read_definition(write(tmp_path, text), MACHINE) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"StartAt": ', "not valid JSON"),
        ('{"Resource": "${TasksArn}", "Other": "${Unknown}"}', "undeclared"),
        ('{"Resource": "arn:aws:lambda:x"}', "never uses"),
    ],
    ids=["json", "undeclared", "unused"],
)
def test_broken_definitions_fail_the_synth(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        read_definition(write(tmp_path, text), MACHINE)


def test_repository_asl_files_use_exactly_their_substitutions() -> None:
    repo = Path(__file__).resolve().parents[2] / "statemachines"
    missing = [m.file for m in r.STATE_MACHINES if not (repo / m.file).is_file()]
    if missing:
        pytest.skip(f"statemachines/{missing} not written yet")
    for machine in r.STATE_MACHINES:
        read_definition(repo / machine.file, machine)


# --- Lambda code -----------------------------------------------------------------------------


def test_lambda_code_is_staged_by_content_without_caches(tmp_path: Path) -> None:
    library = tmp_path / "src" / "lib"
    (library / "__pycache__").mkdir(parents=True)
    (library / "__init__.py").write_text("X = 1\n")
    (library / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    build = tmp_path / "build"
    first = stage_lambda_code({"lib": library}, build)
    assert sorted(p.relative_to(first).as_posix() for p in first.rglob("*") if p.is_file()) == [
        "lib/__init__.py"
    ]
    assert stage_lambda_code({"lib": library}, build) == first
    (library / "__init__.py").write_text("X = 2\n")
    second = stage_lambda_code({"lib": library}, build)
    assert second != first
    assert (second / "lib" / "__init__.py").read_text() == "X = 2\n"


def test_lambda_code_ships_bytecode_checked_against_its_source(tmp_path: Path) -> None:
    library = tmp_path / "src" / "lib"
    library.mkdir(parents=True)
    source = b"X = 1\n"
    (library / "__init__.py").write_bytes(source)
    build = tmp_path / "build"
    plain = stage_lambda_code({"lib": library}, build)
    compiled = stage_lambda_code({"lib": library}, build, compile_with=sys.executable)
    assert compiled != plain
    assert not list(plain.rglob("*.pyc"))
    (pyc,) = compiled.rglob("*.pyc")
    assert pyc.name == f"__init__.{sys.implementation.cache_tag}.pyc"
    header = pyc.read_bytes()[:16]
    assert header[:4] == importlib.util.MAGIC_NUMBER
    assert int.from_bytes(header[4:8], "little") == 0b11  # hash-based, checked against the source
    assert header[8:16] == importlib.util.source_hash(source)
    assert stage_lambda_code({"lib": library}, build, compile_with=sys.executable) == compiled


def test_code_that_does_not_compile_fails_the_staging_with_the_error(tmp_path: Path) -> None:
    library = tmp_path / "src" / "lib"
    library.mkdir(parents=True)
    (library / "__init__.py").write_text("def broken(:\n")
    with pytest.raises(RuntimeError, match=r"compiling the Lambda code .* failed"):
        stage_lambda_code({"lib": library}, tmp_path / "build", compile_with=sys.executable)
    assert not [p for p in (tmp_path / "build" / "lambda-code").iterdir() if not p.name.startswith(".")]


def test_the_bytecode_compiler_is_an_interpreter_of_the_runtime_version_that_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert bytecode_compiler(sys.version_info[:2]) == sys.executable
    shim = tmp_path / "python3.99"  # a version manager's shim for a version it cannot run
    shim.write_text("#!/bin/sh\necho 'python3.99: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert bytecode_compiler((3, 99)) is None
    shim.write_text("#!/bin/sh\necho cpython-399\n")
    assert bytecode_compiler((3, 99)) == str(shim)


def test_missing_entry_points_fail_the_synth(tmp_path: Path) -> None:
    functions_dir, statemachines_dir, _ = source_dirs(tmp_path / "sources")
    if functions_dir.is_relative_to(tmp_path):
        (functions_dir / f"{r.FUNCTIONS[0].module}.py").unlink()
    else:
        functions_dir = tmp_path / "empty"
        functions_dir.mkdir()
    app = App(context=cdk_context())
    with pytest.raises(FileNotFoundError, match="Lambda entry points missing"):
        SpotlineStack(
            app,
            "S",
            config=parse_context(cdk_context()),
            functions_dir=functions_dir,
            statemachines_dir=statemachines_dir,
            build_dir=tmp_path / "build",
        )


# --- an existing VPC -------------------------------------------------------------------------


def test_imported_vpc_gets_flow_logs_and_hosts_the_pools(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Also: without an interpreter of the runtime's version, the synth says the code ships as
    # source only.
    monkeypatch.setattr(stacks.spotline_stack, "bytecode_compiler", lambda version: None)
    functions_dir, statemachines_dir, _ = source_dirs(tmp_path / "sources")
    raw = {
        **cdk_context(),
        "vpc_id": "vpc-0123456789abcdef0",
        "vpc_subnet_ids": ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"],
        "vpc_availability_zones": ["us-east-1a", "us-east-1b"],
    }
    raw["pools"] = [
        {**pool, "availability_zone": "us-east-1b"} if pool["purchase"] == "on-demand" else pool
        for pool in raw["pools"]
    ]
    stack = SpotlineStack(
        App(context=raw),
        "Imported",
        config=parse_context(raw),
        functions_dir=functions_dir,
        statemachines_dir=statemachines_dir,
        build_dir=tmp_path / "build",
    )
    Annotations.from_stack(stack).has_info("*", Match.string_like_regexp("ships as source only"))
    assert not list((tmp_path / "build").rglob("*.pyc"))
    template = Template.from_stack(stack)
    template.resource_count_is("AWS::EC2::VPC", 0)
    template.resource_count_is("AWS::EC2::NatGateway", 0)
    template.has_resource_properties(
        "AWS::EC2::FlowLog", {"ResourceId": "vpc-0123456789abcdef0", "ResourceType": "VPC"}
    )
    subnets = {
        stack.get_logical_id(environment.node.default_child): stack.config.pool(pool_name)
        for (pool_name, _), environment in stack.compute.compute_environments.items()
    }
    for logical_id, environment in template.find_resources("AWS::Batch::ComputeEnvironment").items():
        pool = subnets[logical_id]
        # The Spot pool spans both AZs; the On-Demand pool's cluster placement group pins it to
        # the AZ it names (us-east-1b: the second subnet).
        expected = (
            ["subnet-0fedcba9876543210"]
            if pool.placement_group
            else ["subnet-0123456789abcdef0", "subnet-0fedcba9876543210"]
        )
        assert environment["Properties"]["ComputeResources"]["Subnets"] == expected


def test_an_environment_too_large_for_lambda_fails_the_synth(tmp_path: Path) -> None:
    functions_dir, statemachines_dir, _ = source_dirs(tmp_path / "sources")
    raw = cdk_context()
    raw["identities"] = {
        f"arn:aws:iam::123456789012:role/spotline-team-{i:03d}": "research" for i in range(80)
    }
    with pytest.raises(ConfigError, match="over Lambda's 4096"):
        SpotlineStack(
            App(context=raw),
            "TooBig",
            config=parse_context(raw),
            functions_dir=functions_dir,
            statemachines_dir=statemachines_dir,
            build_dir=tmp_path / "build",
        )


@pytest.mark.parametrize("machine", [m for m in r.STATE_MACHINES if m.express], ids=lambda m: m.name)
def test_an_express_workflow_waits_for_nothing_express_cannot_do(machine: r.StateMachine) -> None:
    """Express offers neither task tokens nor .sync integrations, and stops after 5 minutes: its
    retries must end well before that."""
    definition = json.loads(
        (Path(__file__).resolve().parents[2] / "statemachines" / machine.file).read_text()
    )
    worst_s = 0.0
    for state in definition["States"].values():
        resource = str(state.get("Resource", ""))
        assert not resource.endswith((".waitForTaskToken", ".sync")), resource
        assert state["Type"] != "Wait", "an Express workflow should not wait"
        for retry in state.get("Retry", []):
            interval, rate, attempts = (
                retry.get("IntervalSeconds", 1),
                retry.get("BackoffRate", 2.0),
                retry.get("MaxAttempts", 3),
            )
            worst_s += sum(interval * rate**i for i in range(attempts))
    assert worst_s < 240, f"retries may take {worst_s:.0f} s"
