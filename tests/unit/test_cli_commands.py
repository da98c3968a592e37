"""The CLI's command table (spotline.cli.COMMANDS) against what the command modules register:
every command is named there, by the module that registers it, with the start of its own help;
and `spotline --help` and a client command load none of the heavy modules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from spotline.cli import COMMANDS, load_commands


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_table_names_every_registered_command_with_its_module_and_help() -> None:
    registered = {}
    for module in sorted({m for m, _ in COMMANDS.values()}):
        for name, command in load_commands(module).items():
            assert name not in registered, f"{name} registered twice"
            registered[name] = (module, command)
    assert set(registered) == set(COMMANDS)
    for name, (module, summary) in COMMANDS.items():
        assert registered[name][0] == module, name
        assert _words(registered[name][1].help or "").startswith(_words(summary)), name


def _loaded(argv: list[str]) -> set[str]:
    code = (
        "import sys\nfrom spotline.cli import app\n"
        f"try:\n    app({argv!r})\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(done.stderr.split())


@pytest.mark.parametrize("argv", [["--help"], ["list", "--help"]])
def test_help_and_a_client_command_leave_the_runtime_and_the_simulator_unloaded(argv: list[str]) -> None:
    loaded = _loaded(argv)
    assert "spotline.cli" in loaded
    for heavy in ("moto", "spotline.local", "spotline.sim", "spotline.control", "boto3", "yaml"):
        assert heavy not in loaded, heavy


def test_a_command_runs_through_the_lazy_group(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from spotline.cli import app

    done = CliRunner().invoke(app, ["status", "job-1"], env={"SPOTLINE_STATE_DIR": str(tmp_path)})
    assert done.exit_code == 2  # a usage error: no endpoint given or found
    assert "no endpoint" in done.output
