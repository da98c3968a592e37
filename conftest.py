"""Test tiers and Hypothesis profiles, for every test directory (`tests/`, `bench/tests/`).

Each test is marked with its tier by where it lives, so a tier can be selected (`-m unit`,
`-m "not e2e"`); tests that start processes or servers are also marked `slow` in their module.

    unit         tests/unit         pure and in-process: the domain, parsers, tables
    agent        tests/agent        the in-container agent (some start processes: slow)
    integration  tests/integration  handlers and services on moto in-process
    e2e          tests/e2e          the local runtime end to end (slow)
    infra        tests/infra        the CDK stack, cdk-nag and cfn-lint
    sim          tests/sim          the simulator and its policies
    frameworks   tests/frameworks   real training frameworks on the CPU (they mark themselves too)
    docs         tests/docs         the example specs and this site's pages
    localstack   tests/localstack   the AWS parts on LocalStack (`make test-localstack`; skipped elsewhere)
    bench        bench/tests        the benchmarks' own machinery

Hypothesis profiles: `default` (Hypothesis' own settings) and `fast`, a small budget for
`make test-fast` (`--hypothesis-profile=fast`). A test that asks for more examples than the
default states it with `tests.budget.examples(n)`, which scales with the profile.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).parent
TIERS = {
    "tests/unit": "unit",
    "tests/agent": "agent",
    "tests/integration": "integration",
    "tests/e2e": "e2e",
    "tests/infra": "infra",
    "tests/sim": "sim",
    "tests/frameworks": "frameworks",
    "tests/docs": "docs",
    "tests/localstack": "localstack",
    "bench/tests": "bench",
}

settings.register_profile(
    "fast", max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def tier_of(path: Path) -> str | None:
    try:
        relative = path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None
    for prefix, tier in TIERS.items():
        if relative == prefix or relative.startswith(prefix + "/"):
            return tier
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item.path)
        if tier is not None:
            item.add_marker(tier)
