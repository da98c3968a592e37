"""Spotline's decisions on two small synthetic traces, pinned by their values: a change of the
planner or the simulator meant to keep every decision (a refactoring, a speed-up, a reworded
reason) must leave each admission, preemption, move and wait as it was, and every job's record
(`spotline.sim.fingerprint`: the action, job, effective priority, pool, victims, a wait's reason
type and fields; never the words).

A change that is meant to change decisions updates `data/decisions_reference.json` (say why in the
commit): `python -m bench.decisions_check --record /tmp/ref.json --samples synth-600,synth-2000`,
then copy the pinned fields of its entries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spotline.sim.fingerprint import fingerprint
from spotline.trace.canonical import Trace
from spotline.trace.synth import synth_trace

REFERENCE = json.loads((Path(__file__).parent / "data" / "decisions_reference.json").read_text())
# name -> (jobs, load, GPUs, seed) of a synthetic trace (`bench.decisions_check.SAMPLES`).
SAMPLES = {"synth-600": (600, 1.1, 64, 1), "synth-2000": (2000, 1.1, 128, 101)}


@pytest.mark.parametrize("key", sorted(REFERENCE))
def test_spotline_decisions_unchanged(key: str) -> None:
    sample, _ = key.split("/")
    jobs, load, gpus, seed = SAMPLES[sample]
    trace = Trace(jobs=synth_trace(jobs, load, gpus, seed), source=f"synth {jobs} jobs load {load:g} s{seed}")
    got = fingerprint(trace, gpus=gpus, seed=seed)
    want = REFERENCE[key]
    assert {field: got[field] for field in want} == want
