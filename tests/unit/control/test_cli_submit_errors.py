"""`spotline submit`'s exit codes and error lines against the real API handler (in memory): a spec
the API refuses is a refusal, exit 1, naming each field and its line in the file; a spec file the
client cannot read or parse is a usage error, exit 2. docs/cli.md quotes one such line."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner

import functions.api
from spotline.cli import app, http
from tests.integration.helpers import api_event, context
from tests.integration.test_api import VISION

ROOT = Path(__file__).resolve().parents[3]
SPEC = "name: train\nimage: spotline/train:latest\n{gpus}\ncommand: [python, train.py]\n"


@pytest.fixture
def api(deployment: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The client's requests go to the API handler, as API Gateway would send them (the vision
    team's identity), over the memory control plane of `deployment`."""

    def send(method: str, url: str, data: bytes | None, *_: Any) -> tuple[int, bytes]:
        parts = urlsplit(url)
        body = None if data is None else json.loads(data)
        response = functions.api.handler(api_event(method, parts.path, identity=VISION, body=body), context())
        return response["statusCode"], (response.get("body") or "").encode()

    monkeypatch.setattr(http, "send", send)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("SPOTLINE_STATE_DIR", str(tmp_path / "no-local-plane"))
    monkeypatch.chdir(tmp_path)


def submit(path: str) -> Any:
    return CliRunner().invoke(app, ["submit", path, "--endpoint", "https://api.example.test"])


def test_a_spec_with_a_misspelt_field_is_refused_by_the_api_with_exit_1(api: None) -> None:
    Path("job.yaml").write_text(SPEC.format(gpus="gpuss: 8"))
    done = submit("job.yaml")
    assert done.exit_code == 1, done.output
    assert done.stderr.strip() == (
        "error: spec refused: job.yaml: gpus: Field required;"
        " job.yaml:3: gpuss: Extra inputs are not permitted"
    )


def test_the_refusal_docs_cli_quotes_is_what_the_client_prints(api: None) -> None:
    quoted = re.search(r"`(error: spec refused: [^`]+)`", (ROOT / "docs" / "cli.md").read_text())
    assert quoted is not None, "docs/cli.md quotes no refusal"
    Path("job.yaml").write_text(SPEC.format(gpus="gpus: 0"))
    done = submit("job.yaml")
    assert done.exit_code == 1 and done.stderr.strip() == quoted.group(1)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "job.yaml: cannot read the spec file"),
        ("name: [unclosed\n", "job.yaml:2: not valid YAML"),
        ("- a list\n", "job.yaml: a job spec is a mapping of fields"),
    ],
)
def test_a_spec_file_the_client_cannot_use_is_a_usage_error_exit_2(
    api: None, content: str | None, message: str
) -> None:
    if content is not None:
        Path("job.yaml").write_text(content)
    done = submit("job.yaml")
    assert done.exit_code == 2 and done.stderr.startswith(f"error: {message}")


def test_an_accepted_spec_exits_0_with_the_pending_job(api: None, deployment: Any) -> None:
    Path("job.yaml").write_text(SPEC.format(gpus="gpus: 8"))
    done = CliRunner().invoke(
        app, ["submit", "job.yaml", "--endpoint", "https://api.example.test", "--output", "json"]
    )
    assert done.exit_code == 0, done.output
    job = json.loads(done.stdout)
    assert job["state"] == "PENDING" and deployment.plane.jobs.get(job["id"]).team == "vision"
