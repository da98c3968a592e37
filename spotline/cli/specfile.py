"""A job spec file (YAML or JSON) read for `spotline submit`, remembering where each field is, so
an error the API reports for a field can name the file's line."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from spotline.cli.http import EXIT_USAGE, ClientError


@dataclass
class SpecFile:
    path: Path
    body: dict[str, Any]
    lines: dict[tuple[str, ...], int] = field(default_factory=dict)  # field path -> 1-based line
    overridden: set[tuple[str, ...]] = field(default_factory=set)  # set with --set

    def where(self, loc: Sequence[Any]) -> str:
        """`FILE:LINE` (or `--set`) of the field at `loc` (the API's error location, which
        starts with "body"), the nearest enclosing field when that one is not in the file."""
        parts = tuple(str(p) for p in loc if str(p) != "body")
        while parts:
            if parts in self.overridden:
                return "--set " + ".".join(parts)
            if parts in self.lines:
                return f"{self.path}:{self.lines[parts]}"
            parts = parts[:-1]
        return str(self.path)


def _positions(node: yaml.Node, prefix: tuple[str, ...], out: dict[tuple[str, ...], int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            path = (*prefix, str(key.value))
            out[path] = key.start_mark.line + 1
            _positions(value, path, out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            path = (*prefix, str(index))
            out[path] = item.start_mark.line + 1
            _positions(item, path, out)


def load(path: Path, sets: Sequence[str] = ()) -> SpecFile:
    """Read `path` (JSON is YAML, so one parser gives both the values and their lines) and
    apply `--set key=value` overrides (dotted keys; values read as YAML scalars)."""
    try:
        text = path.read_text()
    except OSError as error:
        raise ClientError(f"{path}: cannot read the spec file ({error.strerror})", EXIT_USAGE) from error
    try:
        node = yaml.compose(text)
        body = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        kind = "JSON" if path.suffix == ".json" else "YAML"
        raise ClientError(f"{where}: not valid {kind}: {problem}", EXIT_USAGE) from error
    if not isinstance(body, dict):
        raise ClientError(f"{path}: a job spec is a mapping of fields (name, gpus, command, ...)", EXIT_USAGE)
    spec = SpecFile(path=path, body=body)
    if node is not None:
        _positions(node, (), spec.lines)
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ClientError(f"--set {item!r}: expected key=value", EXIT_USAGE)
        keys = tuple(k.strip() for k in key.split("."))
        try:
            value = yaml.safe_load(raw) if raw else ""
        except yaml.YAMLError:
            value = raw
        target = spec.body
        for part in keys[:-1]:
            nested = target.get(part)
            if not isinstance(nested, dict):
                nested = target[part] = {}
            target = nested
        target[keys[-1]] = value
        spec.overridden.add(keys)
    return spec


def dump_json(body: Any) -> str:
    return json.dumps(body, indent=2, sort_keys=True, default=str)
