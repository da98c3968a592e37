"""`spotline local up`: run the control plane locally until stopped."""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from spotline.local.runtime import LocalConfig, LocalControlPlane

local_app = typer.Typer(
    help="The local control plane (moto, the real handlers, a local fleet).", no_args_is_help=True
)


def register(app: typer.Typer) -> None:
    app.add_typer(local_app, name="local")


@local_app.command("up")
def up(
    state_dir: Annotated[Path, typer.Option(help="Where local.json and the job logs go.")] = Path(
        ".spotline"
    ),
) -> None:
    """Start the control plane and keep it running until Ctrl-C (SIGINT) or SIGTERM.
    Writes STATE_DIR/local.json once ready."""
    logging.basicConfig(level=logging.ERROR)
    console = Console()
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    plane = LocalControlPlane(LocalConfig(state_dir=state_dir))
    info = plane.start()
    console.print(f"Spotline is up: API {info['api_url']}, AWS endpoint {info['aws_endpoint_url']}")
    console.print(f"wrote {state_dir / 'local.json'}:")
    console.print_json(json.dumps(info))
    try:
        stop.wait()
    finally:
        console.print("stopping ...")
        plane.stop()
