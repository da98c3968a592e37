"""The training examples' job specs are valid submissions, and each names a script that exists."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from spotline.domain.models import JobSpec

REPO = Path(__file__).resolve().parents[2]
SPECS = sorted((REPO / "examples" / "training").glob("*.yaml"))


def test_every_integration_has_an_example_and_a_spec() -> None:
    assert {p.stem for p in SPECS} == {"lightning", "transformers", "torchrun", "fsdp2", "deepspeed"}


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_example_job_spec_is_valid_and_runs_its_example(path: Path) -> None:
    spec = JobSpec.model_validate(yaml.safe_load(path.read_text()))
    scripts = [arg for arg in " ".join(spec.command).split() if arg.startswith("examples/training/")]
    assert scripts and all((REPO / script).is_file() for script in scripts)
