"""`scripts/check_commits.py`: a branch's commits have a subject of at most 72 characters, a body
after a blank line, and no merges; history already on main is never checked."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from scripts.check_commits import main, problems

GOOD = "Say what make demo installs\n\nA new user read that it installs .[dev]; it does not.\n"


@pytest.mark.parametrize(
    ("message", "parents", "expected"),
    [
        (GOOD, 1, []),
        ("x" * 72 + "\n\nwhy\n", 1, []),
        ("x" * 73 + "\n\nwhy\n", 1, ["subject of 73 characters (at most 72)"]),
        ("Fix the thing\n", 1, ["no body after a blank line (say why)"]),
        ("Fix the thing\nno blank line\n", 1, ["no body after a blank line (say why)"]),
        ("Fix the thing\n\n\n", 1, ["no body after a blank line (say why)"]),
        (GOOD, 2, ["a merge commit (rebase instead)"]),
    ],
)
def test_a_commit_needs_a_short_subject_a_body_and_one_parent(
    message: str, parents: int, expected: list[str]
) -> None:
    assert problems(message, parents) == expected


def test_a_hook_checks_the_message_file_without_gits_comments(tmp_path: Path) -> None:
    message = tmp_path / "COMMIT_EDITMSG"
    message.write_text(GOOD + "# Please enter the commit message for your changes.\n")
    assert main(["--message", str(message)]) == 0
    message.write_text("Fix\n# a comment is not a body\n")
    assert main(["--message", str(message)]) == 1


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.mark.slow  # runs git
def test_only_the_commits_a_branch_adds_to_main_are_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "dev@example.com")
    _git(repo, "config", "user.name", "Dev")
    _git(
        repo,
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "an old subject far longer than seventy-two characters, from before the rule",
    )
    _git(repo, "checkout", "-q", "-b", "work")
    _git(repo, "commit", "-q", "--allow-empty", "-m", GOOD)
    monkeypatch.chdir(repo)

    assert main([]) == 0  # the old commit is main's: not checked

    _git(repo, "commit", "-q", "--allow-empty", "-m", "No body")
    _git(repo, "checkout", "-q", "-b", "side", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "An experiment\n\nNot kept.")
    _git(repo, "checkout", "-q", "work")
    _git(repo, "merge", "-q", "--no-ff", "-s", "ours", "side", "-m", "Merge side\n\nhistory only")
    capsys.readouterr()
    assert main([]) == 1
    errors = capsys.readouterr().err
    assert "no body after a blank line" in errors and "a merge commit" in errors
    assert main(["--base", "no-such-ref"]) == 2
