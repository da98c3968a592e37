"""The `spotline` command line (typer + rich).

Each command group lives in its own module with a `register(app)` function. The table below is
the one place that names them, with a one-line summary for `spotline --help`: a module is
imported only when one of its commands runs (or shows its own help), so `spotline list` does not
load the local runtime, moto or the simulator, and `spotline --help` loads none of them
(`bench/cli_startup.py` measures it). `tests/unit/test_cli_commands.py` checks the table against
what the modules register.
"""

from __future__ import annotations

import importlib
from typing import Any

import typer
import typer.main

# typer carries its own click (the types its groups are declared with).
from typer import _click as click
from typer.core import TyperCommand, TyperGroup

# command -> (the module that registers it, the start of its help)
COMMANDS: dict[str, tuple[str, str]] = {
    "submit": (
        "spotline.cli.client",
        "Submit a job from FILE; prints the job (its `id` with --output json).",
    ),
    "status": (
        "spotline.cli.client",
        "A job's state, priority, pool, instance, last checkpoint and wait reason.",
    ),
    "list": (
        "spotline.cli.client",
        "The team's jobs: unfinished ones, or all with --all (every page is read).",
    ),
    "events": ("spotline.cli.client", "The job's timeline: every transition with its reason."),
    "explain": (
        "spotline.cli.client",
        "Why the job waits, where and why it runs, or who preempted it; and its estimated start.",
    ),
    "priority": ("spotline.cli.client", "Change a job's priority class."),
    "deadline": ("spotline.cli.client", "Change a job's deadline (ISO-8601 with a zone)."),
    "cancel": (
        "spotline.cli.client",
        "Cancel jobs (each is tried; the exit code is 1 if any could not be cancelled).",
    ),
    "watch": (
        "spotline.cli.client",
        "A live view until the job ends (or, without ID, until the team has no unfinished job).",
    ),
    "logs": ("spotline.cli.client", "The run's output (CloudWatch Logs on AWS, the process log locally)."),
    "usage": (
        "spotline.cli.client",
        "GPU-hours, dollars, Spot share, lost work and budget state of a team for a month.",
    ),
    "pools": (
        "spotline.cli.pools",
        "Each pool: capacity, GPUs used and free, nodes (running, idle, draining, reclaimed, joining)"
        " and Spot state.",
    ),
    "reservations": (
        "spotline.cli.reservations",
        "Reserved capacity: Capacity Block offerings worth a look, blocks worth extending, and the cost"
        " either way (advice only: it never buys).",
    ),
    "history": (
        "spotline.cli.history",
        "The team's finished jobs, the latest to end first (filters: --state, --since, --team).",
    ),
    "configure": (
        "spotline.cli.client",
        "Write ~/.config/spotline/config.toml: the API URL (given, or from the stack's outputs).",
    ),
    "dashboard": (
        "spotline.cli.dashboard",
        "A web dashboard on localhost: the queue and why, running jobs, job timelines, the team's month.",
    ),
    "demo": (
        "spotline.cli.demo",
        (
            "Run the control plane locally (moto, real handlers and workflows, real training processes)"
            " through a scripted story: preemption with checkpoint and resume, and a Spot interruption"
            " recovered."
        ),
    ),
    "doctor": (
        "spotline.cli.doctor",
        "Check the account for what would fail a first job: vCPU quotas, Batch compute environments"
        " and queues, the Powertools layer, the training image and its pull permission, AZ offerings,"
        " and the callers in `identities`.",
    ),
    "local": ("spotline.cli.local", "The local control plane (moto, the real handlers, a local fleet)."),
    "simulate": (
        "spotline.cli.simulate",
        "Replay a trace through each policy on the same cluster, jobs and Spot reclaims; print a table.",
    ),
    "trace": ("spotline.cli.trace", "Work with traces."),
    "tune": (
        "spotline.cli.tune",
        "Replay candidate settings through the scheduling core on your history; check the best on a"
        " held-out final stretch; print the Pareto table and the recommended diff as cdk.json context.",
    ),
}


def load_commands(module: str) -> dict[str, click.Command]:
    """The click commands `module` registers (by name)."""
    holder = typer.Typer()

    @holder.callback()
    def _group() -> None: ...

    importlib.import_module(module).register(holder)
    return dict(typer.main.get_group(holder).commands)


class LazyGroup(TyperGroup):
    """The top-level group: its commands' modules load on first use. While the group's own help
    is written, each command stands in as its name and summary."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._listing = False
        self._loaded: set[str] = set()

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS) + [name for name in self.commands if name not in COMMANDS]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, summary = COMMANDS[cmd_name]
            if self._listing:
                return TyperCommand(cmd_name, short_help=summary, help=summary)
            self._load(module)
        if cmd_name not in self.commands:  # a command the table does not name yet: look everywhere
            for module in {m for m, _ in COMMANDS.values()}:
                self._load(module)
        return self.commands.get(cmd_name)

    def _load(self, module: str) -> None:
        if module not in self._loaded:
            self._loaded.add(module)
            for name, command in load_commands(module).items():
                self.commands.setdefault(name, command)

    def format_help(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="spotline",
    help="Priority-based, checkpoint-aware scheduling of training jobs on Spot and On-Demand GPUs.",
    no_args_is_help=True,
    add_completion=False,
    cls=LazyGroup,
)


@app.callback()
def main() -> None:
    """Spotline: schedule training jobs on elastic GPUs."""
