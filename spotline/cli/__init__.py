"""The `spotline` command line (typer + rich).

Each command group lives in its own module with a `register(app)` function; the list below is
the one place that wires them into the app.
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="spotline",
    help="Priority-based, checkpoint-aware scheduling of training jobs on Spot and On-Demand GPUs.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def main() -> None:
    """Spotline: schedule training jobs on elastic GPUs."""


COMMAND_MODULES = [
    "spotline.cli.client",
    "spotline.cli.demo",
    "spotline.cli.doctor",
    "spotline.cli.local",
    "spotline.cli.simulate",
    "spotline.cli.trace",
]

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)
