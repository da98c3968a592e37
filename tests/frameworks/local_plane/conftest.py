"""A local control plane for the module's tests (the documented examples run on its fleet)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from spotline.local.runtime import LocalConfig, LocalControlPlane


@pytest.fixture(autouse=True)
def aws_env() -> None:
    """Not the framework tier's fake AWS: the local plane sets its own environment."""


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalControlPlane]:
    state = tmp_path_factory.mktemp("plane")
    local = LocalControlPlane(LocalConfig(state_dir=state))
    local.start()
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture
def state_dir(plane: LocalControlPlane, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The `spotline` client pointed at the module's plane."""
    monkeypatch.setenv("SPOTLINE_STATE_DIR", str(plane.config.state_dir))
    monkeypatch.delenv("SPOTLINE_ENDPOINT", raising=False)
    return plane.config.state_dir
