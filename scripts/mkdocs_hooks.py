"""MkDocs hooks (mkdocs.yml `hooks:`): the reference pages are generated at build time from their
sources of truth, so they cannot go stale.

- `docs/api.md`: the marker `<!-- spotline:api-reference -->` becomes the routes and schemas of
  the OpenAPI document the API handler serves at `GET /openapi.json` (Powertools' resolver,
  `get_openapi_json_schema()`, built offline: importing the handler reads no environment).
- `docs/job-spec.md`: the marker `<!-- spotline:job-spec -->` becomes a table of every field of
  the job spec (`spotline.domain.models.JobSpec`: type, default, limits and its description).
- `docs/cli.md`: the marker `<!-- spotline:cli-reference -->` becomes every command's `--help`
  (typer's own Markdown renderer, the one behind `typer spotline.cli utils docs`).
- `benchmarks/latest.md`: `bench/results/latest.md`, the newest results `make bench` wrote, and
  the marker `<!-- spotline:bench-results -->` the list of every dated results file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
API_MARKER = "<!-- spotline:api-reference -->"
CLI_MARKER = "<!-- spotline:cli-reference -->"
JOB_SPEC_MARKER = "<!-- spotline:job-spec -->"
BENCH_MARKER = "<!-- spotline:bench-results -->"
LATEST_PAGE = "benchmarks/latest.md"


# --- the API page, from the OpenAPI document -------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """The document `GET /openapi.json` answers with."""
    from functions import api

    document: dict[str, Any] = json.loads(
        api.app.get_openapi_json_schema(title=api.API_TITLE, version=api.API_VERSION)
    )
    return document


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def schema_type(schema: dict[str, Any]) -> str:
    """A JSON schema as a short type: `JobSpec`, `list[string]`, `integer | null`, `low | high`."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[`{name}`](#{name.lower()})"
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            return " | ".join(schema_type(s) for s in schema[key])
    if "enum" in schema:
        return " | ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"list[{schema_type(schema.get('items', {}))}]"
    if kind == "object" and "additionalProperties" in schema:
        extra = schema["additionalProperties"]
        return f"map[string, {schema_type(extra) if isinstance(extra, dict) else 'any'}]"
    return f"{kind} ({schema['format']})" if "format" in schema else str(kind)


_CONSTRAINTS = (
    ("minimum", ">= {}"),
    ("exclusiveMinimum", "> {}"),
    ("maximum", "<= {}"),
    ("exclusiveMaximum", "< {}"),
    ("minLength", "length >= {}"),
    ("maxLength", "length <= {}"),
    ("minItems", ">= {} items"),
    ("maxItems", "<= {} items"),
    ("pattern", "matches `{}`"),
)


def _plain(value: Any) -> Any:
    """1800.0 as 1800: the document's numbers are floats where the model's bound was an int."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _constraints(schema: dict[str, Any]) -> str:
    found = [text.format(_plain(schema[key])) for key, text in _CONSTRAINTS if key in schema]
    for option in schema.get("anyOf", []):
        found += [text.format(_plain(option[key])) for key, text in _CONSTRAINTS if key in option]
    return ", ".join(found)


def render_api(document: dict[str, Any]) -> str:
    lines: list[str] = [
        f"OpenAPI {document['openapi']}, {document['info']['title']} {document['info']['version']}.",
        "",
    ]
    for path, operations in sorted(document["paths"].items()):
        for method, op in operations.items():
            lines += [f"### `{method.upper()} {path}`", ""]
            if op.get("summary"):
                lines += [op["summary"] + ".", ""]
            if op.get("description"):
                lines += [op["description"], ""]
            params = op.get("parameters", [])
            if params:
                lines += ["| parameter | in | type | required | constraints |", "|---|---|---|---|---|"]
                for p in params:
                    schema = p.get("schema", {})
                    lines.append(
                        f"| `{p['name']}` | {p['in']} | {_cell(schema_type(schema))} | "
                        f"{'yes' if p.get('required') else 'no'} | {_cell(_constraints(schema))} |"
                    )
                lines.append("")
            body = op.get("requestBody")
            if body:
                for media, content in body.get("content", {}).items():
                    lines += [f"Body ({media}): {schema_type(content.get('schema', {}))}.", ""]
            lines += ["| status | meaning | body |", "|---|---|---|"]
            for status, response in sorted(op.get("responses", {}).items()):
                schemas = [
                    schema_type(c["schema"]) for c in response.get("content", {}).values() if "schema" in c
                ]
                lines.append(
                    f"| {status} | {_cell(response.get('description', ''))} | "
                    f"{_cell(', '.join(schemas) or '-')} |"
                )
            lines.append("")
    lines += ["## Schemas", ""]
    for name, schema in sorted(document.get("components", {}).get("schemas", {}).items()):
        lines += [f"### {name}", ""]
        if schema.get("description"):
            lines += [" ".join(schema["description"].split()), ""]
        properties = schema.get("properties")
        if not properties:
            lines += [f"Type: {schema_type(schema)}.", ""]
            continue
        required = set(schema.get("required", []))
        lines += ["| field | type | required | default | constraints |", "|---|---|---|---|---|"]
        for field, prop in properties.items():
            default = f"`{json.dumps(_plain(prop['default']))}`" if "default" in prop else ""
            lines.append(
                f"| `{field}` | {_cell(schema_type(prop))} | {'yes' if field in required else 'no'} | "
                f"{_cell(default)} | {_cell(_constraints(prop))} |"
            )
        lines.append("")
    return "\n".join(lines)


# --- the job spec, from its model -------------------------------------------------------------


def _inline_refs(schema: Any, defs: dict[str, Any]) -> Any:
    """`schema` with each `$ref` to one of the model's own `$defs` replaced by what it names."""
    if isinstance(schema, dict):
        if "$ref" in schema:
            named = defs[schema["$ref"].rsplit("/", 1)[-1]]
            return _inline_refs({**named, **{k: v for k, v in schema.items() if k != "$ref"}}, defs)
        return {k: _inline_refs(v, defs) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_inline_refs(v, defs) for v in schema]
    return schema


def render_job_spec() -> str:
    """Every field of the job spec: type, required, default, constraints, description."""
    from spotline.domain.models import JobSpec

    schema = JobSpec.model_json_schema()
    defs = schema.get("$defs", {})
    required = set(schema.get("required", []))
    lines = [
        "| field | type | required | default | constraints | what it does |",
        "|---|---|---|---|---|---|",
    ]
    for field, prop in schema["properties"].items():
        prop = _inline_refs(prop, defs)
        default = f"`{json.dumps(_plain(prop['default']))}`" if "default" in prop else ""
        lines.append(
            f"| `{field}` | {_cell(schema_type(prop))} | {'yes' if field in required else 'no'} | "
            f"{_cell(default)} | {_cell(_constraints(prop))} | {_cell(prop.get('description', ''))} |"
        )
    return "\n".join(lines)


# --- the CLI page, from --help --------------------------------------------------------------


def render_cli() -> str:
    """Every command's usage, arguments and options, from the typer app itself."""
    import typer
    from typer.cli import get_docs_for_click

    from spotline.cli import app

    command = typer.main.get_command(app)
    ctx = typer.Context(command)
    docs = get_docs_for_click(obj=command, ctx=ctx, name="spotline", title="spotline")
    # typer titles the page `# spotline`; the page has its own title, so every heading goes a
    # level down.
    return "\n".join("#" + line if line.startswith("#") else line for line in docs.splitlines())


# --- benchmark results ------------------------------------------------------------------------


def results_list() -> str:
    dated = sorted((p for p in RESULTS.glob("*.md") if p.name != "latest.md"), reverse=True)
    if not dated:
        return "No results yet: run `make bench`."
    return "\n".join(f"- `bench/results/{p.name}`" for p in dated)


# --- the hooks --------------------------------------------------------------------------------


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    latest = RESULTS / "latest.md"
    content = (
        latest.read_text() if latest.exists() else "# Latest results\n\nNo results yet: run `make bench`."
    )
    files.append(File.generated(config, LATEST_PAGE, content=content))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if API_MARKER in markdown:
        markdown = markdown.replace(API_MARKER, render_api(openapi_document()))
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, render_cli())
    if JOB_SPEC_MARKER in markdown:
        markdown = markdown.replace(JOB_SPEC_MARKER, render_job_spec())
    if BENCH_MARKER in markdown:
        markdown = markdown.replace(BENCH_MARKER, results_list())
    return markdown
