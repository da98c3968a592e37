"""Every repository path the docs and the README name in code style exists: a file moved or
renamed fails here until the pages follow it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TOP = (
    "spotline",
    "functions",
    "stacks",
    "bench",
    "tests",
    "scripts",
    "images",
    "statemachines",
    "examples",
    "design-notes",
)
PATH = re.compile("`((?:" + "|".join(TOP) + r")/[A-Za-z0-9_./-]*[A-Za-z0-9_])/?`")


def test_every_path_the_docs_name_exists() -> None:
    named = {(page.relative_to(ROOT).as_posix(), m) for page in PAGES for m in PATH.findall(page.read_text())}
    assert len(named) > 20
    missing = sorted(f"{page}: {path}" for page, path in named if not (ROOT / path).exists())
    assert not missing, "the docs name paths that do not exist:\n" + "\n".join(missing)
