"""design-notes/ keeps the records of experiments, outside the docs site: every note is listed in
its README, its relative links resolve, and the site's pages carry no tuning diary."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NOTES = ROOT / "design-notes"
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")
# A heading of a lab notebook: a tuning round, an issue number, a mechanism "not kept".
DIARY_HEADING = re.compile(
    r"^#+ .*(\bround\b|\bissue \d+|not kept|nothing kept)", re.IGNORECASE | re.MULTILINE
)


def test_the_readme_lists_every_note() -> None:
    listed = {target for target, _ in LINK.findall((NOTES / "README.md").read_text())}
    notes = {path.name for path in NOTES.glob("*.md") if path.name != "README.md"}
    assert notes, "no design notes"
    assert notes <= listed, f"design-notes/README.md does not list {sorted(notes - listed)}"


def test_every_relative_link_of_a_note_exists() -> None:
    missing = [
        f"{path.name}: {target}"
        for path in NOTES.glob("*.md")
        for target, _ in LINK.findall(path.read_text())
        if "://" not in target and not (path.parent / target).exists()
    ]
    assert not missing, "design notes link to missing files:\n" + "\n".join(missing)


def test_every_anchor_a_note_links_to_in_the_docs_exists() -> None:
    from markdown.extensions.toc import slugify

    def anchors(page: Path) -> set[str]:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
        return {slugify(m.group(1), "-") for m in re.finditer(r"^#+ (.+)$", text, re.MULTILINE)}

    missing = [
        f"{path.name}: {target}{anchor}"
        for path in NOTES.glob("*.md")
        for target, anchor in LINK.findall(path.read_text())
        if anchor and target.startswith("../docs/") and anchor[1:] not in anchors(path.parent / target)
    ]
    assert not missing, "design notes link to missing anchors:\n" + "\n".join(missing)


def test_no_page_of_the_site_is_a_tuning_diary() -> None:
    pages = sorted((ROOT / "docs").rglob("*.md"))
    diaries = [
        f"{page.relative_to(ROOT)}: {match.group(0)}"
        for page in pages
        for match in DIARY_HEADING.finditer(page.read_text())
    ]
    assert not diaries, (
        "headings of a lab notebook in the docs site (move it to design-notes/):\n" + "\n".join(diaries)
    )
