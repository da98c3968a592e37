"""docs/operations.md names every check `spotline doctor --check` accepts."""

from __future__ import annotations

from pathlib import Path

from spotline.aws.doctor import CHECKS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_every_doctor_check_is_described() -> None:
    text = PAGE.read_text()
    assert CHECKS
    missing = [name for name in CHECKS if f"`{name}`" not in text]
    assert not missing, f"{PAGE.name} does not describe doctor's checks {missing}"
