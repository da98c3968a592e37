"""Spotline's decisions on two small synthetic traces, pinned: a change of the planner or the
simulator meant to be a pure speed-up (caching, lazy scoring, incremental indexes) must leave
every decision and every job's record as they were (`bench/decisions_check.py` fingerprints a run:
a SHA-256 of every logged decision, time, job, pool, victims and reason, and of each job's start,
finish, disruptions, lost and useful GPU-seconds and time queued).

A change that is meant to change decisions updates `data/decisions_reference.json`:
`python -m bench.decisions_check --record /tmp/ref.json --samples synth-600,synth-2000`, then copy
the pinned fields of its entries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.decisions_check import SAMPLES, fingerprint

REFERENCE = json.loads((Path(__file__).parent / "data" / "decisions_reference.json").read_text())


@pytest.mark.parametrize("key", sorted(REFERENCE))
def test_spotline_decisions_unchanged(key: str) -> None:
    sample, policy = key.split("/")
    got = fingerprint(SAMPLES[sample], policy)
    want = REFERENCE[key]
    assert {field: got[field] for field in want} == want
