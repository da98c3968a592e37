"""`spotline configure --stack` on moto: the API's URL comes from the configuration the stack
published (SSM `/spotline/<stack>/config`, spotline.aws.published), with one ssm:GetParameter."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws
from typer.testing import CliRunner

from spotline.aws.published import PublishedConfig, PublishedPool, parameter_name
from spotline.cli import app

REGION = "us-east-1"
URL = "https://abc123.execute-api.us-east-1.amazonaws.com/dev/"


@pytest.fixture
def account(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "XDG_CONFIG_HOME": str(tmp_path),
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    with mock_aws():
        yield tmp_path / "spotline" / "config.toml"


def _publish(value: str) -> None:
    boto3.client("ssm", region_name=REGION).put_parameter(
        Name=parameter_name("Spotline"), Value=value, Type="String"
    )


def test_configure_takes_the_api_url_the_stack_published(account: Path) -> None:
    published = PublishedConfig(
        stack="Spotline",
        region=REGION,
        stage="dev",
        api_url=URL,
        pools=(
            PublishedPool(
                name="p", purchase="spot", instance_types=("p4d.24xlarge",), max_vcpus=96, job_queue="q"
            ),
        ),
        powertools_layer_version=37,
        training_image="repo:latest",
    )
    _publish(published.model_dump_json())

    result = CliRunner().invoke(app, ["configure", "--stack", "Spotline", "--region", REGION])

    assert result.exit_code == 0, result.output
    assert tomllib.loads(account.read_text())["api_url"] == URL


def test_configure_refuses_a_published_document_it_cannot_read(account: Path) -> None:
    _publish('{"version": 1, "stack": "Spotline"}')
    result = CliRunner().invoke(app, ["configure", "--stack", "Spotline", "--region", REGION])
    assert result.exit_code == 1
    assert "/spotline/Spotline/config: not a Spotline configuration" in result.output
    assert not account.exists()
