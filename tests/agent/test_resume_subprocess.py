"""Real processes: a training run interrupted by SIGTERM (or killed outright) and resumed ends with
exactly the weights of an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from spotline.agent import EXIT_STOPPED, LocalCheckpointStore, decode_state
from spotline.examples.train import PARAM_NAMES

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
STEPS = 400
SEED = 11


def train_command(*extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "spotline.examples.train",
        "--steps",
        str(STEPS),
        "--seed",
        str(SEED),
        *extra,
    ]


def env_for(store: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPOTLINE_")}
    env.update(
        SPOTLINE_JOB_ID="job-r",
        SPOTLINE_INSTANCE_ID="local-0",
        SPOTLINE_CHECKPOINT_URI=store.as_uri(),
        SPOTLINE_CHECKPOINT_INTERVAL_S="3600",
        SPOTLINE_HEARTBEAT_S="0",
        PYTHONPATH=str(REPO),
    )
    env.update(extra)
    return env


def run_to_end(store: Path, **env: str) -> dict[str, Any]:
    done = subprocess.run(
        train_command(), env=env_for(store, **env), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def start_and_signal_at(
    store: Path, step: int, sig: int, *command_prefix: str, **env: str
) -> tuple[int, str]:
    """Start a run (slowed to 5 ms a step), send `sig` once it logs `step`; (exit status, stderr)."""
    process = subprocess.Popen(
        [*command_prefix, *train_command("--step-time-s", "0.005")],
        env=env_for(store, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stderr is not None
    seen: list[str] = []
    try:
        for line in process.stderr:
            seen.append(line)
            if f"step {step}/{STEPS}" in line:
                process.send_signal(sig)
                break
        _, rest = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, "".join(seen) + rest


def final_weights(store: Path) -> dict[str, np.ndarray[Any, Any]]:
    found = LocalCheckpointStore(store).latest()
    assert found is not None and found[0].final
    state = decode_state(found[1], found[0].encoding)
    return {name: state["params"][name] for name in PARAM_NAMES}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    store = tmp_path_factory.mktemp("uninterrupted")
    return run_to_end(store), store


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = final_weights(a), final_weights(b)
    for name in PARAM_NAMES:
        assert np.array_equal(wa[name], wb[name]), name


def test_sigterm_then_resume_gives_bit_identical_weights(
    uninterrupted: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    expected, expected_store = uninterrupted
    assert expected["resumed_from_step"] is None and expected["steps"] == STEPS

    code, stderr = start_and_signal_at(tmp_path, 160, signal.SIGTERM)

    assert code == EXIT_STOPPED, stderr
    [record] = LocalCheckpointStore(tmp_path).manifests()  # the periodic interval never came
    assert record.reason == "sigterm" and 160 <= record.step < STEPS and not record.final

    resumed = run_to_end(tmp_path)

    assert resumed["resumed_from_step"] == record.step
    assert resumed["weights_sha256"] == expected["weights_sha256"]
    assert_same_weights(expected_store, tmp_path)


def test_a_killed_run_resumes_from_its_last_durable_checkpoint(
    uninterrupted: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    expected, _ = uninterrupted

    code, _ = start_and_signal_at(tmp_path, 200, signal.SIGKILL, SPOTLINE_CHECKPOINT_INTERVAL_S="0.2")

    assert code == -signal.SIGKILL
    periodic = LocalCheckpointStore(tmp_path).manifests()
    assert periodic and all(r.reason == "periodic" for r in periodic)
    resumed = run_to_end(tmp_path)
    assert resumed["resumed_from_step"] == periodic[0].step
    assert resumed["weights_sha256"] == expected["weights_sha256"]


def test_different_seed_gives_different_weights(
    uninterrupted: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    # Guards the two tests above against a hash that ignores the weights.
    done = subprocess.run(
        [*train_command()[:-1], str(SEED + 1)],
        env=env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(done.stdout)["weights_sha256"] != uninterrupted[0]["weights_sha256"]


def test_a_checkpoint_of_another_configuration_is_refused(tmp_path: Path) -> None:
    run_to_end(tmp_path)
    done = subprocess.run(
        [*train_command()[:-1], str(SEED + 1)],
        env=env_for(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2 and "was written with" in done.stderr


def test_wrapper_forwards_sigterm_and_relays_the_childs_heartbeats(tmp_path: Path) -> None:
    wrapper = [sys.executable, "-m", "spotline.agent", "--heartbeat-s", "0.1", "--"]

    code, stderr = start_and_signal_at(tmp_path, 200, signal.SIGTERM, *wrapper, SPOTLINE_HEARTBEAT_S="0.1")

    assert code == EXIT_STOPPED, stderr
    manifests = LocalCheckpointStore(tmp_path).manifests()
    assert len(manifests) == 1, stderr  # (it failed once in CI with none: the log tells why)
    [record] = manifests
    assert record.reason == "sigterm"
    beats = [
        json.loads(line.split("Job Heartbeat ", 1)[1])
        for line in stderr.splitlines()
        if "Job Heartbeat {" in line
    ]
    # Sent by the wrapper (the child wrote its figures to the status file instead of sending them).
    assert beats and all(b["job_id"] == "job-r" and b["instance_id"] == "local-0" for b in beats)
    assert max(b["step"] for b in beats) > 0 and max(b["progress"] or 0 for b in beats) > 0


def test_wrapper_stops_a_command_that_does_not_use_the_library() -> None:
    # It cannot checkpoint: SIGTERM simply ends it, and the status says so.
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "spotline.agent",
            "--",
            sys.executable,
            "-c",
            "import time; print('ready', flush=True); time.sleep(30)",
        ],
        env={**os.environ, "PYTHONPATH": str(REPO), "SPOTLINE_HEARTBEAT_S": "0"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=10)
    assert process.returncode == 128 + signal.SIGTERM


@pytest.mark.parametrize(
    ("script", "expected"),
    [("raise SystemExit(3)", 3), ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + 9)],
)
def test_wrapper_passes_the_exit_status_through(script: str, expected: int) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spotline.agent", "--", sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(REPO), "SPOTLINE_HEARTBEAT_S": "0"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == expected, done.stderr


def test_wrapper_needs_a_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "spotline.agent"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2 and "no command" in done.stderr
