"""`spotline doctor`: check an account (before deploying, from `cdk.json`) or a deployed stack
(`--stack NAME`, from the configuration it published) for what would fail a first training job
(spotline.aws.doctor). Read-only."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from spotline.aws.doctor import (
    CHECKS,
    DoctorPool,
    DoctorTarget,
    Finding,
    Status,
    run_checks,
    target_from_published,
)
from spotline.aws.published import PublishedConfigError, parameter_name, read_published

_STYLE = {Status.OK: "green", Status.WARN: "yellow", Status.FAIL: "bold red", Status.SKIP: "dim"}


def target_from_context(path: Path, region: str | None = None) -> DoctorTarget:
    """The deployment `cdk.json` (and a deployer's own `cdk.context.json` beside it, if any)
    describes, parsed by the stack's own parser (stacks.config), so doctor checks what `cdk deploy`
    would build."""
    try:
        from stacks.config import ConfigError, job_queue_name, parse_context
    except ImportError as error:
        raise typer.BadParameter(
            "run `spotline doctor` from the repository (it reads stacks/ and cdk.json)"
        ) from error
    try:
        context: dict[str, Any] = json.loads(path.read_text())["context"]
    except (OSError, ValueError, KeyError) as error:
        raise typer.BadParameter(f"{path}: not a cdk.json with a context ({error})") from error
    lookups = path.with_name("cdk.context.json")
    if lookups.is_file():
        context.update(json.loads(lookups.read_text()))
    try:
        config = parse_context(context)
    except ConfigError as error:
        raise typer.BadParameter(f"{path}: {error}") from error
    chosen = region or config.region
    if not chosen:
        raise typer.BadParameter("no region: pass --region or set `region` in cdk.json")
    return DoctorTarget(
        region=chosen,
        stage=config.stage,
        pools=tuple(
            DoctorPool(
                p.name,
                p.purchase,
                p.instance_types,
                p.max_vcpus,
                p.availability_zone,
                # A placement-group pool lives in one AZ: its own, else the one the deploy
                # chooses among the VPC's (stacks.batch, spotline.aws.zones.gang_zone).
                one_zone=p.placement_group,
            )
            for p in config.pools
        ),
        identities={str(k): str(v) for k, v in config.identities.items()},
        powertools_layer_version=config.powertools_layer_version,
        training_image=config.training_image,
        availability_zones=config.availability_zones or config.vpc_availability_zones,
        teams=tuple(config.team_names),
        scheduler_reserved_concurrency=config.scheduler_reserved_concurrency,
        team_job_queues={
            p.name: {t: job_queue_name(config.stage, p.name, t) for t in config.queue_owners if t}
            for p in config.pools
            if config.queue_owners != (None,)
        },
        spot_warning_reserved_concurrency=config.spot_warning_reserved_concurrency,
    )


def target_from_stack(stack: str, region: str | None, endpoint_url: str | None) -> DoctorTarget:
    """What `stack` published about itself (SSM GetParameter on `/spotline/<stack>/config`: the
    one permission this needs beyond the checks' own)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        ssm = boto3.session.Session(region_name=region).client("ssm", endpoint_url=endpoint_url)
        published = read_published(ssm, stack)
    except ValueError as error:  # a malformed stack name
        raise typer.BadParameter(str(error), param_hint="--stack") from error
    except PublishedConfigError as error:
        raise typer.BadParameter(str(error), param_hint="--stack") from error
    except (ClientError, BotoCoreError) as error:
        raise typer.BadParameter(
            f"cannot read {parameter_name(stack)}: {error} (it needs ssm:GetParameter on it)",
            param_hint="--stack",
        ) from error
    return target_from_published(published, region)


def render(findings: list[Finding], console: Console) -> None:
    table = Table(title="spotline doctor", show_lines=True)
    for column in ("check", "subject", "status", "what", "how to fix"):
        table.add_column(column, overflow="fold")
    for finding in findings:
        table.add_row(
            finding.check,
            finding.subject,
            f"[{_STYLE[finding.status]}]{finding.status.value}[/]",
            finding.detail,
            finding.fix if finding.status is not Status.OK else "",
        )
    console.print(table)
    counts = {status: sum(f.status is status for f in findings) for status in Status}
    console.print(", ".join(f"{counts[s]} {s.value}" for s in Status))


def register(app: typer.Typer) -> None:
    @app.command()
    def doctor(
        context: Annotated[
            Path, typer.Option(help="the deployment's cdk.json (before deploying; ignored with --stack)")
        ] = Path("cdk.json"),
        stack: Annotated[
            str | None,
            typer.Option(
                help="a deployed stack: check the configuration it published (SSM parameter "
                "/spotline/<stack>/config) instead of cdk.json"
            ),
        ] = None,
        region: Annotated[
            str | None, typer.Option(help="the region (default: the stack's, or cdk.json's)")
        ] = None,
        check: Annotated[
            list[str] | None, typer.Option(help=f"run only these checks (of {', '.join(CHECKS)})")
        ] = None,
        endpoint_url: Annotated[
            str | None, typer.Option(help="an AWS endpoint (e.g. an emulator); default: AWS")
        ] = None,
    ) -> None:
        """Check the account for what would fail a first job: vCPU quotas, Batch compute
        environments and queues, the Powertools layer, the training image and its pull
        permission, AZ offerings, and the callers in `identities`. Exits 1 if anything fails."""
        import boto3

        only = check or list(CHECKS)
        unknown = sorted(set(only) - set(CHECKS))
        if unknown:
            raise typer.BadParameter(f"unknown checks {unknown}; choose from {', '.join(CHECKS)}")
        console = Console(file=sys.stdout, width=200)
        if stack is None:
            target = target_from_context(context, region)
            console.print(f"checking the deployment {context} describes (before or after deploying)")
        else:
            target = target_from_stack(stack, region, endpoint_url)
            console.print(f"checking stack {stack} as deployed ({parameter_name(stack)}, {target.region})")
        session = boto3.session.Session(region_name=target.region)

        def client(service: str) -> Any:
            return session.client(service, endpoint_url=endpoint_url)  # type: ignore[call-overload]

        findings = run_checks(target, client, only)
        render(findings, console)
        if any(f.status is Status.FAIL for f in findings):
            raise typer.Exit(1)
