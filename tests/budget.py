"""How many examples a property test runs, relative to the Hypothesis profile in force: a test
that wants `n` examples under the default profile (100 examples) gets `n` there and
proportionally fewer under `fast` (`make test-fast`), never fewer than one."""

from __future__ import annotations

from hypothesis import settings

DEFAULT_EXAMPLES = 100


def examples(n: int) -> int:
    return max(1, n * settings.default.max_examples // DEFAULT_EXAMPLES)
