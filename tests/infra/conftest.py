"""The Spotline stack, synthesized once per session with the AwsSolutions checks, the way
`make synth` does it (same context: cdk.json + cdk.context.json)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

# jsii prints a banner about Node 20 when it starts; scripts/synth.sh silences it the same way.
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

import pytest
from aws_cdk import App
from aws_cdk.assertions import Template

import app as cdk_app
from tests.infra.support import Synthesized, cdk_context, source_dirs


@pytest.fixture(scope="session")
def synthesized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesized]:
    tmp = tmp_path_factory.mktemp("infra")
    functions_dir, statemachines_dir, real = source_dirs(tmp / "sources")
    outdir = tmp / "cdk.out"
    app = App(context=cdk_context(), outdir=str(outdir))
    stack = cdk_app.build_app(
        app, functions_dir=functions_dir, statemachines_dir=statemachines_dir, build_dir=tmp / "build"
    )
    error: Exception | None = None
    try:
        app.synth()
    except RuntimeError as raised:  # cdk-nag's ValidationFailed comes back through jsii
        error = raised
    template_json = json.loads((outdir / f"{stack.stack_name}.template.json").read_text())
    report_path = outdir / "validation-report.json"
    report = json.loads(report_path.read_text()) if report_path.is_file() else None
    yield Synthesized(
        stack=stack,
        template=Template.from_json(template_json),
        json=template_json,
        synth_error=error,
        validation_report=report,
        real_sources=real,
        outdir=outdir,
    )
