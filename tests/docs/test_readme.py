"""README.md stays an entry point: short, and every file or page it links to exists (the docs
site's links are checked by `mkdocs build --strict`; the README is not part of the site)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_the_readme_is_at_most_250_lines() -> None:
    assert len(README.read_text().splitlines()) <= 250


def test_every_relative_link_in_the_readme_exists() -> None:
    targets = [t for t, _ in LINK.findall(README.read_text()) if "://" not in t]
    assert len(targets) >= 10
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing {missing}"
