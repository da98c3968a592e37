"""`bench/cli_startup.py`: its table puts each command beside the bare interpreter, and its
`-X importtime` reader takes the fields Python writes."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from bench import cli_startup


def test_ratios_are_to_the_bare_interpreter() -> None:
    results = {
        "python -c pass": ([0.1, 0.1, 0.3], [0.05, 0.05, 0.05]),
        "spotline --help": ([0.4, 0.5, 0.6], [0.2, 0.3, 0.4]),
        "spotline list": ([1.0, 1.0, 1.0], [0.5, 0.5, 0.5]),
    }
    rows = {
        line.split("  ")[0].strip(): line.split() for line in cli_startup.table(results, 3).splitlines()[2:]
    }
    assert rows["python -c pass"][-4:] == ["100", "1.0", "50", "1.0"]
    assert rows["spotline --help"][-4:] == ["500", "5.0", "300", "6.0"]
    assert rows["spotline list"][-4:] == ["1000", "10.0", "500", "10.0"]


def test_an_importtime_line_is_read_into_its_fields() -> None:
    line = "import time:       181 |       2236 |   spotline.cli"
    assert cli_startup._fields(line)[1:] == ("181", "2236", "spotline.cli")


def test_the_endpoint_lists_jobs_from_a_local_json() -> None:
    with cli_startup.local_endpoint() as env:
        local = json.loads((Path(env["SPOTLINE_STATE_DIR"]) / "local.json").read_text())
        with urllib.request.urlopen(local["api_url"] + "/jobs") as response:
            assert [j["state"] for j in json.load(response)["jobs"]] == ["PENDING", "PENDING"]


@pytest.mark.slow
def test_one_run_of_each_command_succeeds(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_startup.main(["--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "list (run)" in out and "pools --help" in out and "spotline --help" in out


def test_the_fake_api_answers_every_client_commands_route() -> None:
    with cli_startup.local_endpoint() as env:
        local = json.loads((Path(env["SPOTLINE_STATE_DIR"]) / "local.json").read_text())
        for path in cli_startup._ANSWERS:
            with urllib.request.urlopen(local["api_url"] + path) as response:
                assert response.status == 200, path
    assert set(cli_startup.CLIENT) >= {"list", "status", "explain", "logs", "pools", "history", "submit"}
