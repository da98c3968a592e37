"""The benchmarks' compiled simulator (`bench.native`): a build made of today's source only, and
used only once it decides exactly as the interpreted code."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import native


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(
        native.ROOT / "spotline", root / "spotline", ignore=shutil.ignore_patterns("__pycache__", "*.so")
    )
    shutil.copy2(native.ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_the_build_key_follows_every_source_file(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    before = native.key(root)
    assert native.key(root) == before
    path = root / "spotline" / "sim" / "engine.py"
    path.write_text(path.read_text() + "\n# edited\n")
    assert native.key(root) != before


def test_verify_accepts_the_same_code_and_rejects_code_that_decides_otherwise(tmp_path: Path) -> None:
    # A tree is what `SPOTLINE_NATIVE_TREE` names: here the interpreted source itself, then one
    # with a changed rule (the preemption margin read as 0: more preemptions).
    same = _copy(tmp_path)
    ok, report = native.verify(same)
    assert ok, report
    assert report.count(": same") == len(report.splitlines()) >= 7
    changed = tmp_path / "changed"
    shutil.copytree(same, changed)
    for name in ("planner.py", "preemption.py"):
        path = changed / "spotline" / "domain" / name
        text = path.read_text()
        assert "config.preemption_margin" in text
        text = text.replace("self._config.preemption_margin", "0.0")
        path.write_text(text.replace("config.preemption_margin", "0.0"))
    ok, report = native.verify(changed)
    assert not ok
    assert "DIFFERENT" in report


_WHERE = "import spotline.domain.planner as p, spotline.sim.engine as e; print(p.__file__, e.__file__)"


@pytest.mark.skipif(native.compiler_missing() is not None, reason="no C compiler or Python headers here")
def test_the_compiled_build_imports_compiled_and_decides_as_the_interpreted(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    tree = native.build(root, quiet=True)
    assert "spotline.domain.planner" in native.compiled(tree)
    assert native.build(root, quiet=True) == tree  # found, not made again
    where = subprocess.run(
        [sys.executable, "-c", _WHERE],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert all(path.endswith(".so") and path.startswith(str(tree)) for path in where), where
    ok, report = native.verify(tree)
    assert ok, report
