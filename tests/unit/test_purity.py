"""The scheduling core stays pure: no AWS SDK, no Powertools, no clock, no global randomness.

The same domain code runs in Lambda, in the local runtime and in the simulator, and is tested
with a fixed `now` and a seeded `random.Random`; these checks keep it that way.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import spotline.domain

DOMAIN = Path(spotline.domain.__file__).parent
FORBIDDEN_PACKAGES = ("boto3", "botocore", "aws_lambda_powertools")


def test_importing_the_domain_loads_no_aws_package() -> None:
    probe = (
        "import json, sys; import spotline.domain; "
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN_PACKAGES!r})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(result.stdout) == []


def impurities(source: str) -> list[str]:
    """What in `source` breaks the domain's purity rules, one line each (empty when pure).

    1. No import of time, boto3, botocore or aws_lambda_powertools.
    2. No clock: datetime.now / utcnow / today, date.today, time.time and friends.
    3. No module-level randomness: `random.<anything but Random>` and `from random import`
       anything but Random (a seeded `random.Random` is passed in).
    4. No environment: os.environ, os.getenv.
    """
    found: list[str] = []
    banned_modules = {"time", *FORBIDDEN_PACKAGES}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in banned_modules:
                    found.append(f"line {node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module is not None:
            root = node.module.split(".")[0]
            if root in banned_modules:
                found.append(f"line {node.lineno}: from {node.module} import ...")
            if root == "random":
                found.extend(
                    f"line {node.lineno}: from random import {a.name}"
                    for a in node.names
                    if a.name != "Random"
                )
            if root == "datetime" and any(a.name in {"now", "utcnow", "today"} for a in node.names):
                found.append(f"line {node.lineno}: imports a clock from datetime")
            if root == "os" and any(a.name in {"environ", "getenv"} for a in node.names):
                found.append(f"line {node.lineno}: reads the environment")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner, name = node.value.id, node.attr
            if owner == "random" and name != "Random":
                found.append(f"line {node.lineno}: random.{name}")
            if owner in {"datetime", "date"} and name in {"now", "utcnow", "today"}:
                found.append(f"line {node.lineno}: {owner}.{name}")
            if owner == "os" and name in {"environ", "getenv"}:
                found.append(f"line {node.lineno}: os.{name}")
        elif isinstance(node, ast.Attribute) and name_of(node) in {
            "datetime.datetime.now",
            "datetime.datetime.utcnow",
        }:
            found.append(f"line {node.lineno}: {name_of(node)}")
    return found


def name_of(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{name_of(node.value)}.{node.attr}"
    return ""


DOMAIN_FILES = sorted(DOMAIN.rglob("*.py"))


def test_the_domain_has_the_expected_modules() -> None:
    names = {p.name for p in DOMAIN_FILES}
    assert {
        "models.py",
        "config.py",
        "priority.py",
        "quota.py",
        "placement.py",
        "preemption.py",
        "planner.py",
    } <= names


@pytest.mark.parametrize("path", DOMAIN_FILES, ids=[p.name for p in DOMAIN_FILES])
def test_domain_module_is_pure(path: Path) -> None:
    assert impurities(path.read_text()) == []


@pytest.mark.parametrize(
    ("source", "finding"),
    [
        ("import time", "line 1: import time"),
        ("import boto3", "line 1: import boto3"),
        ("import botocore.exceptions", "line 1: import botocore.exceptions"),
        ("from aws_lambda_powertools import Logger", "line 1: from aws_lambda_powertools import ..."),
        ("from time import monotonic", "line 1: from time import ..."),
        ("import random\nx = random.random()", "line 2: random.random"),
        ("import random\nx = random.choice([1])", "line 2: random.choice"),
        ("from random import shuffle", "line 1: from random import shuffle"),
        ("from datetime import datetime\nt = datetime.now()", "line 2: datetime.now"),
        ("import datetime\nt = datetime.datetime.utcnow()", "line 2: datetime.datetime.utcnow"),
        ("from datetime import date\nt = date.today()", "line 2: date.today"),
        ("import os\nx = os.environ['A']", "line 2: os.environ"),
    ],
    ids=[
        "time",
        "boto3",
        "botocore",
        "powertools",
        "from-time",
        "random-random",
        "random-choice",
        "from-random-shuffle",
        "datetime-now",
        "datetime-module-utcnow",
        "date-today",
        "environment",
    ],
)
def test_purity_check_catches(source: str, finding: str) -> None:
    assert impurities(source) == [finding]


@pytest.mark.parametrize(
    "source",
    [
        "import random\ndef f(rng: random.Random) -> float:\n    return rng.random()",
        "from random import Random",
        "from datetime import datetime\ndef f(d: datetime) -> float:\n    return d.timestamp()",
    ],
    ids=["random-Random-type-hint", "from-random-import-Random", "datetime-type-only"],
)
def test_purity_check_allows(source: str) -> None:
    assert impurities(source) == []
