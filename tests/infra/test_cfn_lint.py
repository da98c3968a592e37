"""cfn-lint on the synthesized template: no errors. Warnings and informational
findings are printed, not failed on."""

from __future__ import annotations

import json

from cfnlint.api import ManualArgs, lint

from tests.infra.support import Synthesized


def test_cfn_lint_reports_no_error_on_the_synthesized_template(synthesized: Synthesized) -> None:
    region = synthesized.stack.config.region or "us-east-1"
    matches = lint(json.dumps(synthesized.json), config=ManualArgs(regions=[region]))
    errors = [
        f"{m.rule.id} {'/'.join(map(str, m.path))}: {m.message}" for m in matches if m.rule.id.startswith("E")
    ]
    for match in matches:
        if not match.rule.id.startswith("E"):
            print(f"cfn-lint {match.rule.id}: {match.message}")
    assert errors == []
