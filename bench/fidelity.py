"""Replay fidelity: a workload through the local plane, its history exported, replayed with the
settings that ran; observed and replayed side by side: `python -m bench.fidelity`.

The local plane runs with a Spot availability trace (`--spot-availability`, one tick per
`tick_s` wall seconds); jobs are the example trainer (`spotline.examples.train`, real processes
that checkpoint) of two teams and three classes, 4 GPUs each, arriving a few seconds apart. When
all have ended, `spotline history export` writes the trace and its cluster file, and the simulator
replays them (`spotline.sim.tune.replay`) with the settings that ran, over seeds. Compared: average
JCT, lost GPU-hours and preemptions (the issue's 10% bound), interruptions beside them. Lost
GPU-hours are compared by the control plane's definition on both sides (the work since each
stopped run's latest durable checkpoint: the replay's `lost_gpu_hours_since_checkpoint`); the
replay's own `lost_gpu_hours`, which also counts every restart, is reported beside them.

Everything runs on emulated AWS (moto, the local fleet) and the wall clock: process start-up,
the agent's poll, the scheduler's tick and the checkpoint uploads are seconds here, a large
share of jobs of 10-40 s (see `design-notes/tune-fidelity.md`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

STEP_TIME_S = 0.15
# The figures compared; lost GPU-hours by the control plane's definition on both sides.
COMPARED = ("avg_jct_s", "lost_gpu_hours_since_checkpoint", "preemptions", "interruptions")


@dataclass(frozen=True)
class Workload:
    jobs: int = 8
    seed: int = 1
    # Seconds between submissions (uniform up to this).
    gap_s: float = 4.0
    steps: tuple[int, int] = (60, 200)
    # The Spot pool's instances per tick: whole, half, none, whole again.
    counts: tuple[int, ...] = (2, 2, 2, 2, 1, 1, 1, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2)
    tick_s: float = 4.0
    timeout_s: float = 300.0


# The Spot pool's instances per tick with outages of the whole pool only: the control plane's Spot
# watch sees a pool as there or gone, so these it records as they were.
WHOLE_OUTAGES = (2, 2, 2, 2, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2)


def _body(name: str, steps: int, priority: str) -> dict[str, Any]:
    return {
        "name": name,
        "priority": priority,
        "gpus": 4,
        "image": "spotline/train:latest",
        "command": [
            sys.executable,
            "-m",
            "spotline.examples.train",
            "--steps",
            str(steps),
            "--step-time-s",
            str(STEP_TIME_S),
            "--seed",
            "3",
        ],
        "spot": "auto",
        "checkpoint_interval_s": 1.5,
        "expected_runtime_s": steps * STEP_TIME_S,
    }


def run_workload(info: dict[str, Any], workload: Workload = Workload()) -> list[str]:
    """Submit the workload to the running local plane (`info`: its local.json) and wait until
    every job has ended; their ids."""
    rng = random.Random(workload.seed)
    api = httpx.Client(base_url=info["api_url"], timeout=30.0)
    teams = list(info["teams"])
    ids: list[tuple[str, str]] = []
    for n in range(workload.jobs):
        team = teams[n % len(teams)]
        priority = rng.choice(("low", "low", "normal", "high"))
        body = _body(f"job-{n}", rng.randint(*workload.steps), priority)
        answer = api.post("/jobs", json=body, headers=info["teams"][team]["headers"])
        answer.raise_for_status()
        ids.append((team, answer.json()["id"]))
        time.sleep(rng.uniform(0.0, workload.gap_s))
    deadline = time.time() + workload.timeout_s
    pending = list(ids)
    while pending and time.time() < deadline:
        team, job_id = pending[0]
        state = api.get(f"/jobs/{job_id}", headers=info["teams"][team]["headers"]).json()["state"]
        if state in ("SUCCEEDED", "FAILED", "CANCELLED"):
            pending.pop(0)
        else:
            time.sleep(0.5)
    if pending:
        raise TimeoutError(f"{len(pending)} job(s) did not end within {workload.timeout_s:g} s")
    return [job_id for _, job_id in ids]


def export(state_dir: Path, out: Path) -> None:
    """`spotline history export` against the local plane in `state_dir` (while it runs)."""
    from typer.testing import CliRunner

    from spotline.cli import app

    result = CliRunner(env={"SPOTLINE_STATE_DIR": str(state_dir)}).invoke(
        app, ["history", "export", "--since", "2h", "-o", str(out), "--endpoint", "local"]
    )
    if result.exit_code != 0:
        raise RuntimeError(f"history export failed: {result.output}")


def compare(history_path: Path, seeds: Sequence[int] = (1, 2, 3)) -> dict[str, Any]:
    """The history's observed figures against its replays (mean over `seeds`) with the settings
    that ran."""
    from spotline.sim.history import read_history
    from spotline.sim.tune import replay

    history = read_history(history_path)
    runs = [replay(history, history.config(), seed=s) for s in seeds]
    out: dict[str, Any] = {"jobs": len(history.trace.jobs), "seeds": list(seeds)}
    for key in COMPARED:
        # (A history exported before the key existed has the same figure as `lost_gpu_hours`.)
        observed = float(history.observed.get(key, history.observed.get(_FALLBACK.get(key, key), 0.0)))
        replayed = statistics.fmean(float(r[key]) for r in runs)
        error = (replayed - observed) / observed if observed else (0.0 if replayed == 0 else float("inf"))
        out[key] = {"observed": observed, "replayed": replayed, "relative_error": error}
    out["replayed_lost_gpu_hours_with_restarts"] = statistics.fmean(float(r["lost_gpu_hours"]) for r in runs)
    return out


_FALLBACK = {"lost_gpu_hours_since_checkpoint": "lost_gpu_hours"}


def run(state_dir: Path, out: Path, workload: Workload = Workload()) -> dict[str, Any]:
    """The workload on a local plane with the Spot trace, exported while the plane runs, then
    compared with its replays."""
    from spotline.local.runtime import LocalConfig, LocalControlPlane
    from spotline.sim.availability import AvailabilityTrace

    config = LocalConfig(
        state_dir=state_dir,
        spot_availability=AvailabilityTrace("fidelity", 600, workload.counts),
        spot_tick_s=workload.tick_s,
        tick_s=1.0,
        reconcile_s=1.0,
    )
    plane = LocalControlPlane(config)
    info = plane.start()
    try:
        began = time.time()
        run_workload(info, workload)
        wall = time.time() - began
        export(state_dir, out)
    finally:
        plane.stop()
    return {"wall_s": wall, **compare(out)}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=Workload.jobs)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--cycles", type=int, default=1, help="Play the Spot pattern this many times over (>= 1)."
    )
    parser.add_argument(
        "--whole-outages",
        action="store_true",
        help="A pattern whose outages take the whole pool (no halving): what the Spot watch sees exactly.",
    )
    parser.add_argument("--timeout-s", type=float, default=Workload.timeout_s)
    parser.add_argument(
        "--dir", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "spotline-fidelity"
    )
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.cycles < 1 or args.timeout_s <= 0:
        parser.error("--jobs and --cycles must be at least 1, --timeout-s positive")
    args.dir.mkdir(parents=True, exist_ok=True)
    pattern = WHOLE_OUTAGES if args.whole_outages else Workload.counts
    workload = Workload(
        jobs=args.jobs, seed=args.seed, counts=pattern * args.cycles, timeout_s=args.timeout_s
    )
    result = run(args.dir / "state", args.dir / "history.csv", workload)
    text = json.dumps(result, indent=2)
    (args.dir / "result.json").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
