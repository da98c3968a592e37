"""The generated reference pages (scripts/mkdocs_hooks.py): the API page covers every route and
schema of the OpenAPI document the handler serves, the CLI page every command, and the pages
carry the markers the hooks replace (else the build would publish them without their reference)."""

from __future__ import annotations

from pathlib import Path

import typer
import typer.core

from scripts import mkdocs_hooks as hooks
from spotline.cli import app

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_api_page_has_every_route_and_schema_of_the_openapi_document() -> None:
    document = hooks.openapi_document()
    page = hooks.render_api(document)
    routes = [(m.upper(), p) for p, ops in document["paths"].items() for m in ops]
    assert len(routes) >= 8
    for method, path in routes:
        assert f"### `{method} {path}`" in page
    for name in document["components"]["schemas"]:
        assert f"### {name}\n" in page
    # Every status a route answers is listed under it.
    submit = page[page.index("### `POST /jobs`") :]
    submit = submit[: submit.index("\n### ")]
    for status in document["paths"]["/jobs"]["post"]["responses"]:
        assert f"\n| {status} |" in submit


def test_a_schema_type_reads_as_a_type() -> None:
    assert hooks.schema_type({"$ref": "#/components/schemas/JobSpec"}) == "[`JobSpec`](#jobspec)"
    assert hooks.schema_type({"anyOf": [{"type": "string"}, {"type": "null"}]}) == "string | null"
    assert hooks.schema_type({"type": "array", "items": {"type": "integer"}}) == "list[integer]"
    assert hooks.schema_type({"enum": ["low", "high"]}) == "`low` | `high`"


def _commands(command: typer.core.TyperGroup, ctx: typer.Context, prefix: str) -> list[str]:
    # Through list_commands / get_command: the top-level group loads its commands lazily.
    names = []
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        names.append(f"{prefix} {name}")
        if isinstance(sub, typer.core.TyperGroup):
            names += _commands(sub, ctx, f"{prefix} {name}")
    return names


def test_the_cli_page_has_every_command_with_its_options() -> None:
    page = hooks.render_cli()
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    names = _commands(group, typer.Context(group), "spotline")
    assert "spotline submit" in names and "spotline local up" in names
    for name in names:
        assert f"## `{name}`" in page
    assert "--idempotency-key" in page
    assert not any(line.startswith("# ") for line in page.splitlines())  # under the page's title


def test_the_pages_carry_the_markers_the_hooks_replace() -> None:
    assert hooks.API_MARKER in (DOCS / "api.md").read_text()
    assert hooks.CLI_MARKER in (DOCS / "cli.md").read_text()
    assert hooks.BENCH_MARKER in (DOCS / "benchmarks.md").read_text()
    replaced = hooks.on_page_markdown(f"x\n{hooks.CLI_MARKER}\n", page=None, config=None, files=None)
    assert hooks.CLI_MARKER not in replaced and "spotline submit" in replaced


def test_the_results_list_names_every_dated_results_file() -> None:
    listed = hooks.results_list()
    dated = [p.name for p in hooks.RESULTS.glob("*.md") if p.name != "latest.md"]
    assert dated, "bench/results/ has no results file"
    for name in dated:
        assert f"`bench/results/{name}`" in listed


def test_the_job_spec_page_lists_every_field_with_what_it_does() -> None:
    from spotline.domain.models import JobSpec

    assert "<!-- spotline:job-spec -->" in (DOCS / "job-spec.md").read_text()
    page = hooks.render_job_spec()
    for name, field in JobSpec.model_fields.items():
        assert f"| `{name}` |" in page
        assert field.description and field.description.split("`")[0][:30] in page, name


def test_the_integrations_page_includes_each_example_the_framework_tests_run() -> None:
    from tests.frameworks.local_plane.test_examples_resume import CASES

    page = (DOCS / "training-integrations.md").read_text()
    for case in CASES.values():
        assert f'--8<-- "examples/training/{case.script}"' in page, case.script
