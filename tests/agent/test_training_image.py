"""The training image's recipe, without Docker: install the agent the way images/training/Dockerfile
does (a wheel of this checkout, `pip install "<wheel>[agent]"`) into a fresh venv, then run its
entrypoint around the example trainer through a checkpoint, a SIGTERM and a resume.

Offline and fast: the wheel is built here without build isolation, and the agent's dependencies
(boto3, numpy and theirs) are taken from this environment through a .pth file that exposes those
distributions only, so pip finds them installed and needs no index. Were any other dependency
required (pydantic, typer, Powertools...), the install would fail for want of an index.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "images" / "training" / "Dockerfile"
STEPS = 300


def _requirement_names(distribution: str) -> set[str]:
    names = set()
    for requirement in metadata.requires(distribution) or []:
        if "extra ==" in requirement:
            continue
        names.add(re.split(r"[ ;<>=!~\[(]", requirement, maxsplit=1)[0])
    return names


def _closure(roots: set[str]) -> set[str]:
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        seen.add(key)
        todo.extend(_requirement_names(name))
    return seen


def _expose(distributions: set[str], into: Path) -> None:
    """Symlink each distribution's top-level files (packages, modules, dist-info) into `into`."""
    into.mkdir()
    for name in distributions:
        dist = metadata.distribution(name)
        for file in dist.files or []:
            top = file.parts[0]
            if top == ".." or (into / top).exists():
                continue
            source = Path(str(dist.locate_file(top)))
            if source.exists():
                (into / top).symlink_to(source)


def _agent_dependencies() -> set[str]:
    """The base requirements of pyproject.toml (what `spotline[agent]` installs)."""
    text = (REPO / "pyproject.toml").read_text()
    block = re.search(r"^dependencies = \[(.*?)\]", text, re.S | re.M)
    assert block is not None
    return {
        re.split(r"[<>=!~\[ ]", item.strip().strip('",'), maxsplit=1)[0]
        for item in re.findall(r'"[^"]+"', block[1])
    }


@pytest.fixture(scope="module")
def agent_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("image")
    # The Dockerfile's first stage: a wheel of this checkout (sources copied, the repo untouched).
    source = tmp / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("spotline", "functions"):
        shutil.copytree(REPO / name, source / name, ignore=ignore)
    wheels = tmp / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(source),
        ],
        check=True,
        timeout=240,
    )
    [wheel] = wheels.glob("spotline-*.whl")
    # A fresh venv, with only the agent's dependencies visible.
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    deps = tmp / "deps"
    _expose(_closure(_agent_dependencies()), deps)
    (site / "agent-deps.pth").write_text(f"{deps}\n")
    # The Dockerfile's install step, with no index: it succeeds only if nothing else is needed.
    assert '"$(ls /tmp/wheels/spotline-*.whl)[agent]"' in DOCKERFILE.read_text()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-index",
            f"{wheel}[agent]",
        ],
        check=True,
        timeout=240,
    )
    return venv


def _env(store: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "SPOTLINE_JOB_ID": "job-image",
        "SPOTLINE_INSTANCE_ID": "local-0",
        "SPOTLINE_CHECKPOINT_URI": store.as_uri(),
        "SPOTLINE_CHECKPOINT_INTERVAL_S": "3600",
        "SPOTLINE_HEARTBEAT_S": "0",
    }


def _entrypoint(venv: Path) -> list[str]:
    """The Dockerfile's ENTRYPOINT, with the venv's python for `python`."""
    [line] = [line for line in DOCKERFILE.read_text().splitlines() if line.startswith("ENTRYPOINT")]
    entry: list[str] = json.loads(line.removeprefix("ENTRYPOINT").strip())
    python = str(venv / "bin" / "python")
    return [python if part == "python" else part for part in entry]


def test_the_agent_installs_alone_and_imports_nothing_of_the_control_plane(agent_venv: Path) -> None:
    python = str(agent_venv / "bin" / "python")
    probe = (
        "import importlib.util, spotline.agent, spotline.examples.train; "
        "print(sorted(m for m in ('pydantic', 'typer', 'aws_lambda_powertools', 'rich', 'yaml') "
        "if importlib.util.find_spec(m)))"
    )
    done = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"}
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_entrypoint_checkpoints_on_sigterm_and_the_next_run_resumes(
    agent_venv: Path, tmp_path: Path
) -> None:
    store = tmp_path / "checkpoints"
    python = str(agent_venv / "bin" / "python")
    command = [
        *_entrypoint(agent_venv),
        python,
        "-m",
        "spotline.examples.train",
        "--steps",
        str(STEPS),
        "--seed",
        "3",
    ]
    # Given the wrapped trainer running (5 ms a step)
    first = subprocess.Popen(
        [*command, "--step-time-s", "0.005"],
        env=_env(store),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stderr is not None
    try:
        for line in first.stderr:
            logged = re.search(rf"step (\d+)/{STEPS}", line)
            if logged and int(logged[1]) > 0:
                # When Batch stops the container (SIGTERM to the entrypoint)
                first.send_signal(signal.SIGTERM)
                break
        first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    # Then the trainer checkpointed and stopped with the agent's status, passed through
    assert first.returncode == 143
    manifests = sorted(store.rglob("manifest-*.json"))
    assert manifests, "no checkpoint written on SIGTERM"
    saved = json.loads(manifests[-1].read_text())["step"]
    assert 0 < saved < STEPS
    # And the next run resumes from that checkpoint and finishes
    second = subprocess.run(
        command, env=_env(store), capture_output=True, text=True, timeout=120, check=False
    )
    assert second.returncode == 0, second.stderr
    result = json.loads(second.stdout.strip().splitlines()[-1])
    assert result["resumed_from_step"] == saved
    assert result["steps"] == STEPS
