"""The client commands' common options, declared once: `--endpoint`, `--team`, `--profile` and
`--output`.

A client command takes a `Session` as its first parameter instead of the four options;
`client_command` adds them to the command line (after the command's own arguments and options,
so `spotline list --output json` reads as before), builds the `Session` from them, and turns a
`ClientError` into one line on stderr and its exit code.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from spotline.cli.http import ClientError, Endpoint, resolve
from spotline.cli.render import Output, emit, errors

EndpointOpt = Annotated[
    str | None,
    typer.Option(
        "--endpoint",
        help="`local` (default where .spotline/local.json exists) or the API URL (SigV4-signed);"
        " also SPOTLINE_ENDPOINT.",
        show_default=False,
    ),
]
TeamOpt = Annotated[
    str | None, typer.Option("--team", help="The local team to act as (default: the first in local.json).")
]
ProfileOpt = Annotated[str | None, typer.Option("--profile", help="AWS profile for SigV4 (or AWS_PROFILE).")]
OutputOpt = Annotated[Output, typer.Option("--output", "-o", help="table, json or yaml.")]

# name -> (annotation, default) of each common option.
COMMON_OPTIONS: dict[str, tuple[Any, Any]] = {
    "endpoint": (EndpointOpt, None),
    "team": (TeamOpt, None),
    "profile": (ProfileOpt, None),
    "output": (OutputOpt, Output.table),
}


@dataclass
class Session:
    """What the common options say: where the API is, as whom, and how to print."""

    endpoint: str | None = None
    team: str | None = None
    profile: str | None = None
    output: Output = Output.table
    _api: Endpoint | None = None

    @property
    def api(self) -> Endpoint:
        """The endpoint, resolved on first use (reads local.json or the AWS credentials)."""
        if self._api is None:
            self._api = resolve(self.endpoint, team=self.team, profile=self.profile)
        return self._api

    def emit(self, data: Any, table: Callable[[Any], Any]) -> None:
        emit(data, self.output, table)


def reported(command: Callable[..., None]) -> Callable[..., None]:
    """Turn a ClientError into one line on stderr and its exit code."""

    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> None:
        try:
            command(*args, **kwargs)
        except ClientError as error:
            errors.print(f"error: {error}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(error.exit_code) from None

    return run


def client_command(
    command: Callable[..., None], *, options: Sequence[str] = tuple(COMMON_OPTIONS)
) -> Callable[..., None]:
    """`command(session, ...)` as a typer command with the common `options` added."""
    signature = inspect.signature(command, eval_str=True)
    first, *own = signature.parameters.values()
    if first.name != "session":
        raise TypeError(f"{command.__name__}: a client command takes `session` first")
    clash = {p.name for p in own} & set(options)
    if clash:
        raise TypeError(f"{command.__name__}: {sorted(clash)} are common options")
    added = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=COMMON_OPTIONS[name][0],
            default=COMMON_OPTIONS[name][1],
        )
        for name in options
    ]

    def run(**kwargs: Any) -> None:
        session = Session(**{name: kwargs.pop(name) for name in options})
        command(session, **kwargs)

    run.__name__ = command.__name__
    run.__qualname__ = command.__qualname__
    run.__doc__ = command.__doc__
    run.__module__ = command.__module__
    parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + added
    run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in parameters}
    return reported(run)
