"""Issue 29's gang hold made backfill-aware, measured on the contended tuning set.

Runs `bench.contention.GANG_BACKFILL_STEPS` (the third rules' defaults without the gang hold, with
the plain gang hold, and with the backfill-aware hold, `gang_hold_backfill`) for Spotline on the
tuning set's contended counterparts only (`CONTENDED_TUNING`, never the evaluation samples), and
judges the goal rows against the peers' runs saved in `bench/data/contention_tuning_3.json` (the
peers do not depend on Spotline's configuration; they are not run again). Writes the record
`bench/data/contention_tuning_4.json` after every run (`"complete": false` until all ran; a
rerun of the same command resumes).

Run: `nice -n 10 python -m bench.retune_gang_backfill [--samples N ...] [--steps NAME ...]`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.contention import CONTENDED_TUNING, GANG_BACKFILL_STEPS, available
from bench.retune_spot_traces import RECORD as PEERS_RECORD
from bench.retune_spot_traces import run_steps, summarise

RECORD = Path(__file__).resolve().parent / "data" / "contention_tuning_4.json"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.retune_gang_backfill", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--samples", type=int, nargs="*", default=None, help="indices into CONTENDED_TUNING (default: all)"
    )
    parser.add_argument(
        "--steps", nargs="*", default=None, help="names in GANG_BACKFILL_STEPS (default: all)"
    )
    parser.add_argument("--out", type=Path, default=RECORD)
    args = parser.parse_args(argv)
    samples = available(CONTENDED_TUNING)
    if args.samples is not None:
        samples = [CONTENDED_TUNING[i] for i in args.samples]
    steps = GANG_BACKFILL_STEPS
    if args.steps is not None:
        unknown = set(args.steps) - set(steps)
        if unknown:
            parser.error(f"--steps: not in GANG_BACKFILL_STEPS: {sorted(unknown)}")
        steps = {name: steps[name] for name in args.steps}
    peers_record = json.loads(PEERS_RECORD.read_text())
    record: dict[str, Any] = {
        "command": "nice -n 10 python -m bench.retune_gang_backfill",
        "peers_from": "bench/data/contention_tuning_3.json",
        "spot_model": peers_record["spot_model"],
        "set": "tuning (bench.contention.CONTENDED_TUNING)",
        "complete": False,
        "samples": {},
    }
    if args.out.exists():  # resume: keep what earlier runs measured
        record["samples"] = json.loads(args.out.read_text()).get("samples", {})

    def save() -> None:
        record["goals"] = summarise(record, GANG_BACKFILL_STEPS)
        if record["goals"]:
            record["chosen"] = max(record["goals"], key=lambda n: record["goals"][n]["rows_met"])
        record["complete"] = all(
            set(GANG_BACKFILL_STEPS) <= set(record["samples"].get(s.label, {}).get("spotline", {}))
            for s in available(CONTENDED_TUNING)
        )
        args.out.write_text(json.dumps(record, indent=1) + "\n")

    for sample in samples:
        peers = peers_record["samples"][sample.label]["peers"]
        entry = record["samples"].setdefault(sample.label, {"peers": peers, "spotline": {}, "wall_s": {}})
        run_steps(sample, steps, entry, save)
    save()
    for name, summary in record["goals"].items():
        print(f"{summary['rows_met']:3d} rows met  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
