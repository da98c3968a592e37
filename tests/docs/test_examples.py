"""The job specs under `examples/` (the README's first job) are valid `POST /jobs` bodies, read
the way `spotline submit` reads them, and fit the local control plane's cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from spotline.cli.specfile import load
from spotline.domain import JobSpec, Priority
from spotline.local.runtime import LocalConfig

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SPECS = sorted(EXAMPLES.glob("*.yaml"))
LOCAL = LocalConfig()


def test_the_examples_are_there() -> None:
    # The README names these three; a rename must update it.
    assert {p.name for p in SPECS} >= {"long-low.yaml", "critical.yaml", "spot-normal.yaml"}


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_an_example_spec_validates_against_the_job_spec_model(path: Path) -> None:
    body = load(path).body
    spec = JobSpec.model_validate(body, context={"gpu_types": {p.gpu_type for p in LOCAL.pools}})
    # The command is the repository's resumable training loop, which the local fleet can run.
    assert spec.command[:3] == ["python", "-m", "spotline.examples.train"]
    assert "--steps" in spec.command
    # It fits one node of the local cluster (a larger job would wait forever there).
    assert spec.gpus <= max(p.gpus_per_node for p in LOCAL.pools)


def test_the_examples_show_a_preemption_and_a_spot_job() -> None:
    specs = {p.name: JobSpec.model_validate(load(p).body) for p in SPECS}
    assert specs["long-low.yaml"].priority is Priority.LOW
    assert specs["long-low.yaml"].spot.value == "never"  # holds the On-Demand node critical jobs use
    assert specs["critical.yaml"].priority is Priority.CRITICAL
    assert specs["spot-normal.yaml"].spot.value == "required"


def test_a_misspelt_field_in_a_spec_is_refused(tmp_path: Path) -> None:
    # The check above would catch a field the model does not know: extra fields are refused.
    bad = tmp_path / "bad.yaml"
    bad.write_text((EXAMPLES / "critical.yaml").read_text() + "gpu: 4\n")
    with pytest.raises(ValidationError, match="gpu"):
        JobSpec.model_validate(load(bad).body)
