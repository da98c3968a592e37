"""The Development page's example of testing code against the control plane in memory runs as
written."""

from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "development.md"


def test_the_memory_control_plane_example_runs() -> None:
    section = PAGE.read_text().split("### The control plane in memory", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert blocks, "the section has no Python example"
    exec(compile(blocks[0], str(PAGE), "exec"), {})  # its own asserts are the test
