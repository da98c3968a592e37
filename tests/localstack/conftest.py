"""The LocalStack tier's fixtures: one LocalStack and one moto server per session (see
harness.py for what stands in for what). Without `SPOTLINE_LOCALSTACK_PYTHON` (the tier's
Python 3.13 environment, which `make test-localstack` makes) every test here is skipped, saying so."""

from __future__ import annotations

import os
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from spotline.local.moto_server import SerializedMotoServer
from tests.integration.helpers import REGION

from .harness import LocalStack

ENV_PYTHON = "SPOTLINE_LOCALSTACK_PYTHON"
HERE = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(ENV_PYTHON):
        return
    skip = pytest.mark.skip(
        reason=f"the LocalStack tier runs with `make test-localstack` ({ENV_PYTHON} names its Python 3.13)"
    )
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials and a region; nothing here may reach real AWS."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "WARNING")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture(scope="session")
def localstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    python = os.environ.get(ENV_PYTHON)
    if not python:
        pytest.skip(f"{ENV_PYTHON} is not set")
    stack = LocalStack(python, tmp_path_factory.mktemp("localstack"))
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="session")
def moto_dynamodb() -> Iterator[str]:
    """moto's server (the local runtime's, serialized), standing in for DynamoDB: its URL."""
    server = SerializedMotoServer()
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    urllib.request.urlopen(urllib.request.Request(f"{url}/moto-api/reset", method="POST"))
    try:
        yield url
    finally:
        server.stop()


@pytest.fixture
def unique() -> str:
    """A short suffix that keeps one test's resources apart from another's on the shared LocalStack."""
    return uuid.uuid4().hex[:8]
