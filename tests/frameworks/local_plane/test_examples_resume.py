"""Each framework's example, the file the docs include as it is, run as a job on the local control
plane and stopped twice: by a preemption (`spotline local preempt`) and by a Spot interruption
(`spotline local spot-warning`); the Lightning job also by an unexpected SIGTERM to its training
process. It resumes each time, ends SUCCEEDED, and its losses are those of an uninterrupted run
of the same script, bit for bit, on every rank. The step each run restored is the same in its
log (the agent's line and the loop's first step), in the job's timeline and in its status."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from spotline.cli import app
from spotline.local.fleet import interpreter_first_on_path
from spotline.local.runtime import LocalControlPlane

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples" / "training"
TORCHRUN = (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2")
STEP_TIME_S = "0.25"  # per step under the plane: room to interrupt each run a few steps in
LOSS = re.compile(r"(?:rank (\d+) )?step (\d+) loss (-?[0-9.]+(?:e[-+]?\d+)?|nan|inf)")
RESTORED = re.compile(r"spotline-agent: INFO spotline\.agent\.agent: restored step (\d+)")
TEAM = "vision"  # the CLI acts as the first local team


@dataclass(frozen=True)
class Case:
    script: str
    args: tuple[str, ...]
    launcher: tuple[str, ...] = ()
    # (OMP_NUM_THREADS=1 as torchrun sets it: the number of threads changes float sums' order)
    env: dict[str, str] = field(default_factory=lambda: {"OMP_NUM_THREADS": "1"})

    def command(self, local_dir: Path, *extra: str) -> list[str]:
        return [
            *self.launcher,
            str(EXAMPLES / self.script),
            *self.args,
            "--local-dir",
            str(local_dir),
            *extra,
        ]


# Each 40 steps: tiny models, the data made in the script.
CASES = {
    "lightning": Case("lightning_train.py", ("--epochs", "2", "--examples", "640")),
    "transformers": Case(
        "transformers_train.py",
        ("--epochs", "2", "--examples", "320"),
        env={"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},  # the spec's env
    ),
    "torchrun-ddp": Case("torchrun_ddp.py", ("--steps", "40"), TORCHRUN),
    "fsdp2": Case("fsdp2_train.py", ("--steps", "40"), TORCHRUN),
    "deepspeed": Case("deepspeed_train.py", ("--steps", "40"), TORCHRUN),
}


def losses(text: str) -> dict[tuple[int, int], str]:
    """{(rank, step): loss as printed} (ranks print into one log: lines may run together)."""
    return {(int(m.group(1) or 0), int(m.group(2))): m.group(3) for m in LOSS.finditer(text)}


def uninterrupted(case: Case, tmp: Path) -> dict[tuple[int, int], str]:
    """The same script run to its end outside the plane, with a checkpoint store of its own."""
    # As the fleet runs it: this interpreter's bin first on PATH (DeepSpeed JIT-builds an op with the
    # first `ninja` there, and a different one would build it again).
    env = interpreter_first_on_path({k: v for k, v in os.environ.items() if not k.startswith("SPOTLINE_")})
    env.update(case.env, SPOTLINE_CHECKPOINT_URI=(tmp / "reference-store").as_uri(), SPOTLINE_HEARTBEAT_S="0")
    command = case.command(tmp / "reference")
    done = subprocess.run(
        command if case.launcher else [sys.executable, *command],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return losses(done.stdout)


def cli(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


class Job:
    """A job on the plane, seen as its team sees it, and its runs' logs on the local fleet."""

    def __init__(self, plane: LocalControlPlane, body: dict[str, Any]) -> None:
        self.plane = plane
        info = json.loads((plane.config.state_dir / "local.json").read_text())
        self.api = httpx.Client(base_url=info["api_url"], headers=info["teams"][TEAM]["headers"], timeout=30)
        submitted = self.api.post("/jobs", json=body)
        assert submitted.status_code == 201, submitted.text
        self.id: str = submitted.json()["id"]
        self.runs: dict[int, str] = {}  # run -> Batch job id

    def view(self) -> dict[str, Any]:
        view: dict[str, Any] = self.api.get(f"/jobs/{self.id}").json()
        if view.get("batch_job_id") and view.get("run"):
            self.runs[int(view["run"])] = view["batch_job_id"]
        return view

    def log(self, run: int) -> str:
        assert self.plane.fleet is not None
        path = self.plane.fleet.log_path(self.runs[run])
        return path.read_text(errors="replace") if path is not None and path.exists() else ""

    def wait(self, what: str, predicate: Any, timeout_s: float = 300.0) -> dict[str, Any]:
        deadline = time.time() + timeout_s
        while True:
            view = self.view()
            if predicate(view):
                return view
            if time.time() > deadline or view["state"] in ("FAILED", "CANCELLED"):
                tail = {run: self.log(run)[-2000:] for run in self.runs}
                raise AssertionError(
                    f"{self.id} never {what}: {view['state']} ({view['state_reason']}); {tail}"
                )
            time.sleep(0.3)

    def wait_steps(self, run: int, steps: int) -> None:
        """Run `run` is RUNNING and has trained `steps` steps past where it started."""
        self.wait(f"started run {run}", lambda v: v["run"] == run and v["state"] == "RUNNING")

        def trained(_: dict[str, Any]) -> bool:
            done = [step for (rank, step) in losses(self.log(run)) if rank == 0]
            return len(done) >= steps

        self.wait(f"trained {steps} steps in run {run}", trained)

    def training_pid(self, run: int) -> int:
        """The training process: the child of the agent's wrapper (the container's PID 1)."""
        assert self.plane.fleet is not None
        process = self.plane.fleet.jobs[self.runs[run]].process
        assert process is not None
        children = subprocess.run(
            ["pgrep", "-P", str(process.pid)], capture_output=True, text=True
        ).stdout.split()
        return int(children[0])


@pytest.mark.parametrize("name", list(CASES))
def test_the_documented_example_resumes_exactly_after_a_preemption_and_a_spot_warning(
    name: str, plane: LocalControlPlane, state_dir: Path, tmp_path: Path
) -> None:
    case = CASES[name]
    started = time.monotonic()
    reference = uninterrupted(case, tmp_path)
    assert len(reference) == 40 * (2 if case.launcher else 1)

    # Given the example submitted as a job on a Spot pool (1 GPU; no periodic checkpoint)
    command = case.command(tmp_path / "job", "--step-time-s", STEP_TIME_S)
    body = {
        "name": f"example-{name}",
        "gpus": 1,
        "image": "spotline/train:local",
        "command": [sys.executable, *command] if not case.launcher else command,
        "spot": "required",
        "checkpoint_interval_s": 3600,
        "env": case.env,
    }
    job = Job(plane, body)

    # When it is preempted a few steps in
    job.wait_steps(1, 3)
    assert "preempting" in cli("local", "preempt", "--job", job.id).stdout
    # Then it is requeued and resumes; when a Spot warning reaches its instance a few steps later
    job.wait(
        "resumed after the preemption",
        lambda v: v["run"] == 2 and v["preemptions"] == 1 and v["state"] == "RUNNING",
    )
    job.wait_steps(2, 3)
    cli("local", "spot-warning", "--job", job.id)
    job.wait("resumed after the warning", lambda v: v["run"] == 3 and v["interruptions"] == 1)
    last = 3
    if name == "lightning":
        # And (Lightning) when SIGTERM reaches its training process, unannounced
        job.wait_steps(3, 3)
        os.kill(job.training_pid(3), signal.SIGTERM)
        job.wait("requeued after SIGTERM", lambda v: v["run"] == 4 and v["interruptions"] == 2)
        last = 4
    # Then it ends SUCCEEDED, never before its last step
    done = job.wait("succeeded", lambda v: v["state"] == "SUCCEEDED", timeout_s=600)
    assert (done["preemptions"], done["run"]) == (1, last)

    # And every step's loss on every rank is the uninterrupted run's, bit for bit
    logs = {run: job.log(run) for run in range(1, last + 1)}
    trained: dict[tuple[int, int], str] = {}
    for run in sorted(logs):
        trained.update(losses(logs[run]))  # a step run again after a resume: the later run's
    assert trained == reference
    for run in sorted(logs):  # (steps run twice agree too)
        assert all(reference[key] == loss for key, loss in losses(logs[run]).items()), run

    # And each run's restored step is the same in its log, the loop, the timeline and the status
    events = json.loads(cli("events", job.id, "--output", "json").stdout)
    reasons = [e["reason"] for e in events["events"]]
    for run in range(2, last + 1):
        restored = {int(s) for s in RESTORED.findall(logs[run])}
        assert len(restored) == 1, (run, restored)  # every rank restored the same checkpoint
        (step,) = restored
        first = min(s for (_, s) in losses(logs[run]))
        assert first == step + 1, (run, step, first)
        assert any(r.startswith(f"run {run} resumed from checkpoint step {step}") for r in reasons), reasons
    assert done["restored"]["run"] == last and done["restored"]["step"] == step
    # (the agent's own log lines reach `spotline logs`: the script configures no logging)
    assert "spotline-agent: INFO spotline.agent.agent: restored step" in cli("logs", job.id).stdout
    if name == "lightning":
        assert any("stopped by SIGTERM from outside the job" in r for r in reasons), reasons
    print(f"{name}: {time.monotonic() - started:.0f} s")
