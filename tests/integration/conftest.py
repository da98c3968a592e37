"""Fixtures of the integration tests; what they build is `helpers.py`'s.

`deployment` records workflow starts instead of running them; `sfn_deployment` runs the real
workflows on moto's Step Functions engine; `moto_server` is the local runtime's emulated AWS.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from spotline.local.moto_server import SerializedMotoServer

from .helpers import REGION, Deployment, make_deployment, started_moto_server


@pytest.fixture(autouse=True)
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials and a region; nothing here may reach real AWS."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "true")
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "WARNING")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


@pytest.fixture
def deployment() -> Iterator[Deployment]:
    with make_deployment(real_workflows=False) as deployed:
        yield deployed


@pytest.fixture
def sfn_deployment() -> Iterator[Deployment]:
    with make_deployment(real_workflows=True) as deployed:
        yield deployed


@pytest.fixture
def moto_server() -> Iterator[tuple[SerializedMotoServer, str]]:
    """A started `SerializedMotoServer` with fresh state, and its URL; stopped after the test."""
    server, url = started_moto_server()
    try:
        yield server, url
    finally:
        server.stop()
