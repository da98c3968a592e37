"""Check the commits a branch adds to main: a subject of at most 72 characters, then a blank
line and a body that says why, and no merge commits (experiments are kept as design notes with a
patch file, not merged into history). `make lint` runs it; history already on main is not
checked, so it never fails on commits made before the rule.

    python scripts/check_commits.py                 # the commits of HEAD not on main
    python scripts/check_commits.py --base v0.1.0   # ... not on another base
    python scripts/check_commits.py --message FILE  # one message (a commit-msg hook:
                                                    #   .git/hooks/commit-msg runs it with "$1")
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

MAX_SUBJECT = 72
# Where a branch's own commits start, in order of preference (a fresh CI clone has only origin/main).
BASES = ("main", "origin/main")
# git's own separators between the commits of `git log` (NUL-safe, never in a message).
_RECORD, _FIELD = "\x1e", "\x1f"


def problems(message: str, parents: int = 1) -> list[str]:
    """What is wrong with one commit: its message (subject, blank line, body) and its parents."""
    lines = message.rstrip("\n").split("\n")
    subject = lines[0]
    found = []
    if len(subject) > MAX_SUBJECT:
        found.append(f"subject of {len(subject)} characters (at most {MAX_SUBJECT})")
    if not subject.strip():
        found.append("empty subject")
    if len(lines) < 3 or lines[1].strip() or not any(line.strip() for line in lines[2:]):
        found.append("no body after a blank line (say why)")
    if parents > 1:
        found.append("a merge commit (rebase instead)")
    return found


def base_ref(requested: str | None) -> str | None:
    for ref in [requested] if requested else BASES:
        done = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], capture_output=True, text=True
        )
        if done.returncode == 0:
            return ref
    return None


def branch_commits(base: str) -> list[tuple[str, str, int]]:
    """(short hash, message, number of parents) of each commit of HEAD not on `base`."""
    out = subprocess.run(
        ["git", "log", f"--format=%h{_FIELD}%P{_FIELD}%B{_RECORD}", f"{base}..HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    commits = []
    for record in filter(None, (r.strip("\n") for r in out.split(_RECORD))):
        short, parents, body = record.split(_FIELD, 2)
        commits.append((short, body, len(parents.split())))
    return commits


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="check the commits of HEAD not on this ref (default: main)")
    parser.add_argument("--message", type=Path, help="check one commit message file instead")
    args = parser.parse_args(argv)
    if args.message is not None:
        text = "\n".join(line for line in args.message.read_text().split("\n") if not line.startswith("#"))
        found = problems(text)
        for problem in found:
            print(f"commit message: {problem}", file=sys.stderr)
        return 1 if found else 0
    base = base_ref(args.base)
    if base is None:
        print(f"check_commits: no {args.base or ' or '.join(BASES)} to compare with; nothing checked")
        return 2 if args.base else 0
    bad = [
        (short, problem)
        for short, body, parents in branch_commits(base)
        for problem in problems(body, parents)
    ]
    for short, problem in bad:
        print(f"{short}: {problem}", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
