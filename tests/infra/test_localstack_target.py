"""`cdk synth -c target=localstack`: the template LocalStack's free edition can deploy (no AWS
Batch, ECR or VPC; no public Powertools layer, whose fetch is a paid feature), with Powertools and
pydantic bundled into the functions' code. The default target is test_stack.py's."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Environment
from cfnlint.api import ManualArgs, lint

import app as cdk_app
from spotline import resources as r
from stacks.config import NETWORK_KEYS, ConfigError, job_queue_name, parse_context
from stacks.functions import runtime_version
from stacks.packaging import bundled_requirements, bytecode_compiler
from stacks.spotline_stack import SpotlineStack
from tests.infra.support import Synthesized, cdk_context, source_dirs


@pytest.fixture(scope="module")
def localstack_stack(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, Any], Path, SpotlineStack]]:
    tmp = tmp_path_factory.mktemp("localstack")
    functions_dir, statemachines_dir, _ = source_dirs(tmp / "sources")
    outdir = tmp / "cdk.out"
    app = App(context={**cdk_context(), "target": "localstack"}, outdir=str(outdir))
    # The repository's build/ keeps the bundled wheels between runs (pip runs once per version set).
    stack = cdk_app.build_app(app, functions_dir=functions_dir, statemachines_dir=statemachines_dir)
    app.synth()  # cdk-nag's errors raise here
    yield json.loads((outdir / f"{stack.stack_name}.template.json").read_text()), outdir, stack


@pytest.fixture(scope="module")
def localstack_template(
    localstack_stack: tuple[dict[str, Any], Path, SpotlineStack],
) -> tuple[dict[str, Any], Path]:
    template, outdir, _ = localstack_stack
    return template, outdir


def resources_of(template: dict[str, Any], prefix: str) -> list[str]:
    return sorted(name for name, res in template["Resources"].items() if res["Type"].startswith(prefix))


def function_asset(template: dict[str, Any], outdir: Path) -> Path:
    [function, *_] = [res for res in template["Resources"].values() if res["Type"] == "AWS::Lambda::Function"]
    key = function["Properties"]["Code"]["S3Key"]  # <asset hash>.zip
    return outdir / f"asset.{key.removesuffix('.zip')}"


def runtime_python_from_pyenv(version: tuple[int, int]) -> str | None:
    """A pyenv-installed interpreter of `version` (pyenv's shim on the PATH runs only the selected one)."""
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    found = sorted(root.glob(f"versions/{version[0]}.{version[1]}.*/bin/python{version[0]}.{version[1]}"))
    return str(found[-1]) if found else None


def test_no_batch_ecr_or_vpc_resource_and_no_unknown_arn(
    localstack_template: tuple[dict[str, Any], Path],
) -> None:
    template, _ = localstack_template
    assert resources_of(template, "AWS::Batch::") == []
    assert resources_of(template, "AWS::ECR::") == []
    assert resources_of(template, "AWS::EC2::") == []
    assert "unknown" not in json.dumps(template).lower()
    # The control plane is all there: every function, rule, table and workflow.
    assert len(resources_of(template, "AWS::Lambda::Function")) == len(r.FUNCTIONS)
    assert len(resources_of(template, "AWS::StepFunctions::StateMachine")) == len(r.STATE_MACHINES)
    assert len(resources_of(template, "AWS::DynamoDB::")) == len(r.TABLES)
    assert len(resources_of(template, "AWS::Events::Rule")) == len(r.RULES) + 2


def test_no_layer_arn(localstack_template: tuple[dict[str, Any], Path]) -> None:
    template, _ = localstack_template
    functions = [res for res in template["Resources"].values() if res["Type"] == "AWS::Lambda::Function"]
    assert functions and all("Layers" not in f["Properties"] for f in functions)
    assert not re.search(r":layer:", json.dumps(template))


def _queues(pools: Any) -> dict[str, tuple[Any, Any]]:
    return {p["name"]: (p.get("job_queue"), p.get("team_job_queues")) for p in pools}


def test_each_teams_queue_in_each_pool_is_named_as_on_aws(
    localstack_stack: tuple[dict[str, Any], Path, SpotlineStack], synthesized: Synthesized
) -> None:
    template, _, stack = localstack_stack
    context = cdk_context()
    teams = [t["team"] for t in context["teams"]]
    assert stack.config.team_instances and teams  # cdk.json's default: a queue per team and pool
    names = {p["name"]: {t: job_queue_name("dev", p["name"], t) for t in teams} for p in context["pools"]}
    # What the functions are told (SPOTLINE_CONFIG) and what the stack publishes: the AWS target's.
    ours = stack.spotline_config()["pools"]
    assert _queues(ours) == _queues(synthesized.stack.spotline_config()["pools"])
    assert {p["name"]: p["team_job_queues"] for p in ours} == names
    published = {p.name: p.team_job_queues for p in stack.published_config().pools}
    assert published == {p.name: p.team_job_queues for p in synthesized.stack.published_config().pools}
    assert published == names
    functions = [res for res in template["Resources"].values() if res["Type"] == "AWS::Lambda::Function"]
    config = json.dumps(functions[0]["Properties"]["Environment"]["Variables"][r.ENV_CONFIG])
    for by_team in names.values():
        for queue in by_team.values():
            assert f'\\"{queue}\\"' in config
    # The launcher may submit to each of those queues, by ARN, and to no other.
    [submit] = [
        s["Resource"]
        for res in template["Resources"].values()
        if res["Type"] == "AWS::IAM::Policy"
        for s in res["Properties"]["PolicyDocument"]["Statement"]
        if s["Action"] == "batch:SubmitJob"
    ]
    arns = [json.dumps(arn) for arn in submit if "job-queue/" in json.dumps(arn)]
    expected = sorted(q for by_team in names.values() for q in by_team.values())
    assert sorted(re.sub(r'^.*job-queue/([^"]+)".*$', r"\1", arn) for arn in arns) == expected
    # In the deploying account (the committed context names none: AWS::AccountId at deploy time)
    assert all(':batch:us-east-1:", {"Ref": "AWS::AccountId"}, ":job-queue/' in arn for arn in arns)


def test_without_team_instances_each_pool_has_one_queue_arn(tmp_path: Path) -> None:
    functions_dir, statemachines_dir, _ = source_dirs(tmp_path / "sources")
    raw = {**cdk_context(), "target": "localstack", "team_instances": False}
    config = parse_context(raw)
    stack = SpotlineStack(
        App(context=raw),
        "Shared",
        config=config,
        env=Environment(account="123456789012", region="us-east-1"),
        functions_dir=functions_dir,
        statemachines_dir=statemachines_dir,
    )
    pools = stack.resolve(stack.spotline_config())["pools"]
    assert all("team_job_queues" not in p for p in pools)
    assert [p["job_queue"] for p in pools] == [
        f"arn:aws:batch:us-east-1:123456789012:job-queue/spotline-dev-{p.name}" for p in config.pools
    ]
    assert [p.job_queue for p in stack.published_config().pools] == [
        f"spotline-dev-{p.name}" for p in config.pools
    ]


@pytest.mark.parametrize(
    "change",
    [
        {"vpc_endpoints": True},
        {"nat_per_zone": True},
        {"nat_gateways": 1},
        {"availability_zones": ["us-east-1a", "us-east-1b"]},
        {"vpc_id": "vpc-1", "vpc_subnet_ids": ["subnet-1"], "vpc_availability_zones": ["us-east-1a"]},
    ],
)
def test_network_options_are_refused_under_target_localstack(change: dict[str, Any]) -> None:
    context = {**cdk_context(), **change}
    parse_context(context)  # the AWS target takes them
    with pytest.raises(ConfigError) as refused:
        parse_context({**context, "target": "localstack"})
    message = str(refused.value)
    assert "target 'localstack' creates no VPC" in message
    assert all(f"'{key}'" in message for key in change)
    assert set(change) <= set(NETWORK_KEYS)


def test_network_options_turned_off_are_accepted_under_target_localstack() -> None:
    off = {"vpc_endpoints": False, "nat_per_zone": False, "vpc_id": None, "availability_zones": []}
    assert parse_context({**cdk_context(), **off, "target": "localstack"}).localstack


def test_the_code_asset_carries_powertools_and_pydantic_for_the_runtime(
    localstack_template: tuple[dict[str, Any], Path],
) -> None:
    template, outdir = localstack_template
    asset = function_asset(template, outdir)
    major, minor = runtime_version()
    for requirement in bundled_requirements((major, minor)):
        name, version = requirement.split("==")
        assert list(asset.glob(f"{name.replace('-', '_')}-{version}.dist-info")), requirement
    assert list(asset.glob(f"pydantic_core/_pydantic_core.cpython-{major}{minor}-x86_64-linux-gnu.so"))
    # The runtime's own SDK is not shadowed by a copy.
    assert not (asset / "boto3").exists() and not (asset / "botocore").exists()
    assert (asset / "functions" / "workflow_tasks.py").is_file() and (asset / "spotline").is_dir()


def test_every_handler_imports_from_the_asset_on_the_runtimes_python(
    localstack_template: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    version = runtime_version()
    python = bytecode_compiler(version) or runtime_python_from_pyenv(version)
    if python is None:
        pytest.skip(f"no Python {version[0]}.{version[1]} here to import the asset with")
    template, outdir = localstack_template
    asset = function_asset(template, outdir)
    # The runtime's SDK (pure Python) from this environment, alone: nothing else of it is visible.
    sdk = tmp_path / "runtime-sdk"
    sdk.mkdir()
    import boto3
    import botocore
    import dateutil
    import jmespath
    import s3transfer
    import six
    import urllib3

    for module in (boto3, botocore, s3transfer, jmespath, dateutil, urllib3):
        (sdk / Path(module.__file__ or "").parent.name).symlink_to(Path(module.__file__ or "").parent)
    (sdk / "six.py").symlink_to(six.__file__)
    modules = ", ".join(f'"functions.{f.module}"' for f in r.FUNCTIONS)
    code = (
        "import importlib, sys; sys.path[:0] = [sys.argv[1], sys.argv[2]]; "
        f"[importlib.import_module(m) for m in ({modules},)]; "
        "import aws_lambda_powertools.utilities.idempotency, aws_lambda_powertools.utilities.parser; "
        "import pydantic_core; print(pydantic_core.__file__)"
    )
    env = {
        "PATH": os.environ.get("PATH", ""),
        "AWS_DEFAULT_REGION": "us-east-1",
        "LAMBDA_TASK_ROOT": str(asset),
    }
    ran = subprocess.run(
        [python, "-I", "-S", "-c", code, str(asset), str(sdk)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip().startswith(str(asset))


def test_cfn_lint_reports_no_error_on_the_localstack_template(
    localstack_template: tuple[dict[str, Any], Path],
) -> None:
    template, _ = localstack_template
    matches = lint(json.dumps(template), config=ManualArgs(regions=["us-east-1"]))
    errors = [
        f"{m.rule.id} {'/'.join(map(str, m.path))}: {m.message}" for m in matches if m.rule.id.startswith("E")
    ]
    assert errors == []
