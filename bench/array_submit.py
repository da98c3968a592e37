"""One array's submission on moto (in-process): its time and its DynamoDB calls, by size.

An array is written in steps (spotline.aws.array_items): the record CREATING, the elements staged
49 a transaction, the flip to READY, the release 49 a transaction. What to compare is the calls:
about 2 * ceil(N / 49) + 2 TransactWriteItems for N elements, and the reads. moto's time is not
DynamoDB's: its TransactWriteItems deep-copies the whole table once per item of the
transaction, so on moto the time grows with the table's size times the items written.

    .venv/bin/python -m bench.array_submit [--elements 200,1000]
"""

from __future__ import annotations

import argparse
import json
import time

from bench.pass_scale import config, control_plane, metered

SPEC = {
    "name": "sweep",
    "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/train:1",
    "command": ["python", "train.py"],
    "gpus": 1,
    "gpu_type": "a100",
}


def submit(elements: int) -> dict[str, object]:
    from spotline.control import jobs as service

    now = 1_800_000_000.0
    with control_plane(config(64), now) as plane, metered() as meters:
        body = {**SPEC, "array": f"0-{elements - 1}"}
        started = time.perf_counter()
        array, records, _ = service.submit_array_request(
            plane, "vision", body, idempotency_key=f"bench-{elements}"
        )
        seconds = time.perf_counter() - started
        calls = {op: n for (_, op), n in sorted(meters[-1].calls.items())}
    return {
        "elements": elements,
        "written": len(records),
        "state": array.state,
        "seconds_on_moto": round(seconds, 2),
        "calls": calls,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--elements", default="200,1000")
    args = parser.parse_args(argv)
    for size in (int(s) for s in args.elements.split(",")):
        print(json.dumps(submit(size)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
