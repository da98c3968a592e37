"""Checkpoint throughput: how long a checkpoint takes to write and to restore, against its size.

    nice -n 10 python -m bench.checkpoint_throughput --sizes-mb 100,400,1000,2000,4096 \
        --stores local,moto --moto-max-mb 1000 --json bench/results/checkpoint-throughput.json

For each size it makes a model state of that many bytes (8 float32 tensors of random values:
incompressible), then, for each checkpoint store the agent has (`local`: `LocalCheckpointStore`
on this machine's disk; `moto`: `S3CheckpointStore` against a moto server on 127.0.0.1):

- **write**, what the agent reports as a checkpoint's `write_s`: `torch.distributed.checkpoint.save`
  (one process) into a local directory (*serialise*), then `save_files` of that directory (*upload*:
  the store's copy or multipart upload, every file hashed, the manifest last);
- **restore**, what a resumed run waits for: `latest_files` into a directory (*download*: parallel
  ranged GETs or copies, every hash checked against the manifest), then
  `torch.distributed.checkpoint.load` into the state's tensors (*load*).

It also measures the per-byte CPU costs that bound a real upload whatever the network: SHA-256
(one core: each file is hashed by one thread), `torch.save` of a state dict to a local file, and
`torch.distributed.checkpoint.save` (single process). From those and EC2 network speeds it
ESTIMATES the time to write a 10-100 GB checkpoint, and whether it leaves within the 2-minute Spot
notice. The moto figures measure this code and moto on this machine's CPUs (moto is a Python
HTTP server that keeps every object in memory), not S3: a floor for the code's overhead, not a
prediction of S3's speed; sizes above `--moto-max-mb` are not run on it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

NOTICE_S = 120.0
DETECT_S = 5.0  # the agent polls the notice every 5 s
# EC2 networking (Gbit/s) of a few GPU instances, as AWS lists them; S3 from one instance reaches
# about this with enough parallel connections (AWS's S3 performance guidelines).
NETWORKS_GBPS = {"g5.12xlarge (40 Gb/s)": 40.0, "p4d.24xlarge (400 Gb/s)": 400.0, "10 Gb/s": 10.0}
ESTIMATE_SIZES_GB = (10, 30, 100)
RANKS_PER_NODE = 8


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _timed_call(fn: Callable[..., object], *args: Any, **kwargs: Any) -> float:
    started = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - started


def _moto_endpoint() -> tuple[str, Callable[[], None]]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return f"http://{host}:{port}", server.stop


def _state(size_mb: int) -> dict[str, Any]:
    import torch

    per_tensor = size_mb * 1024 * 1024 // 4 // 8
    generator = torch.Generator().manual_seed(size_mb)
    return {f"layer{i}": torch.rand(per_tensor, generator=generator) for i in range(8)}


def throughput(
    sizes_mb: list[int], stores: list[str], moto_max_mb: int, work: Path
) -> list[dict[str, float | str]]:
    import boto3
    from torch.distributed.checkpoint.state_dict_loader import load as dcp_load
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    from spotline.agent import CheckpointStore, LocalCheckpointStore, S3CheckpointStore

    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    endpoint, stop = _moto_endpoint() if "moto" in stores else ("", lambda: None)
    rows: list[dict[str, float | str]] = []
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1") if endpoint else None
        for size_mb in sizes_mb:
            state = _state(size_mb)
            for name in stores:
                if name == "moto" and size_mb > moto_max_mb:
                    print(f"  {size_mb:>6} MB moto: not run (above --moto-max-mb {moto_max_mb})", flush=True)
                    continue
                store: CheckpointStore
                if name == "moto":
                    assert s3 is not None
                    bucket = f"bench-{size_mb}"
                    s3.create_bucket(Bucket=bucket)
                    store = S3CheckpointStore(bucket, "team/job/", s3)
                else:
                    store = LocalCheckpointStore(work / f"store-{size_mb}")
                source, target = work / f"src-{size_mb}", work / f"restore-{size_mb}"
                serialise = _timed_call(dcp_save, state, checkpoint_id=str(source), no_dist=True)
                upload = _timed_call(store.save_files, 1, source, job_id="bench", created_at=0.0)
                shutil.rmtree(source)
                download = _timed_call(store.latest_files, target)
                load = _timed_call(dcp_load, state, checkpoint_id=str(target), no_dist=True)
                shutil.rmtree(target, ignore_errors=True)
                write, restore = serialise + upload, download + load
                rows.append(
                    {
                        "size_mb": size_mb,
                        "store": name,
                        "serialise_s": round(serialise, 3),
                        "upload_s": round(upload, 3),
                        "write_s": round(write, 3),
                        "write_mb_s": round(size_mb / write, 1),
                        "download_s": round(download, 3),
                        "load_s": round(load, 3),
                        "restore_s": round(restore, 3),
                        "restore_mb_s": round(size_mb / restore, 1),
                    }
                )
                print(
                    f"  {size_mb:>6} MB {name:<6} write {write:7.2f} s (serialise {serialise:6.2f} + upload"
                    f" {upload:6.2f}; {size_mb / write:6.1f} MB/s)  restore {restore:7.2f} s (download"
                    f" {download:6.2f} + load {load:6.2f}; {size_mb / restore:6.1f} MB/s)",
                    flush=True,
                )
                if name == "moto" and s3 is not None:
                    for obj in s3.list_objects_v2(Bucket=f"bench-{size_mb}").get("Contents", []):
                        s3.delete_object(Bucket=f"bench-{size_mb}", Key=obj["Key"])
                else:
                    shutil.rmtree(work / f"store-{size_mb}", ignore_errors=True)
    finally:
        stop()
    return rows


def table(rows: list[dict[str, float | str]]) -> list[str]:
    """The measured rows as a Markdown table."""
    lines = [
        "| size | store | serialise (s) | upload (s) | write (s) | write (MB/s) | download (s) | load (s)"
        " | restore (s) | restore (MB/s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['size_mb']} MB | {'local disk' if r['store'] == 'local' else 'moto S3'}"
            f" | {r['serialise_s']:.2f} | {r['upload_s']:.2f} | {r['write_s']:.2f} | {r['write_mb_s']:.1f}"
            f" | {r['download_s']:.2f}"
            f" | {r['load_s']:.2f} | {r['restore_s']:.2f} | {r['restore_mb_s']:.1f} |"
        )
    return lines


def cpu_costs(work: Path, size_mb: int) -> dict[str, float]:
    """MB/s of the per-byte work an upload does besides the network (best of 3)."""
    import hashlib

    import torch
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    data = os.urandom(size_mb * 1024 * 1024)

    def sha() -> None:
        digest = hashlib.sha256()
        view = memoryview(data)
        for offset in range(0, len(data), 8 * 1024 * 1024):
            digest.update(view[offset : offset + 8 * 1024 * 1024])

    state = {f"layer{i}": torch.randn(size_mb * 1024 * 1024 // 4 // 8) for i in range(8)}
    path = work / "state.pt"

    def torch_save() -> None:
        torch.save(state, path)
        with open(path, "rb") as f:
            os.fsync(f.fileno())

    def dcp() -> None:
        target = work / "dcp"
        shutil.rmtree(target, ignore_errors=True)
        dcp_save(state, checkpoint_id=str(target), no_dist=True)

    warnings.filterwarnings("ignore", message="torch.distributed is disabled")
    costs = {}
    for name, fn in {"sha256 (one core)": sha, "torch.save": torch_save, "dcp.save (1 process)": dcp}.items():
        best = min(_timed(fn) for _ in range(3))
        costs[name] = size_mb / best
        print(f"  {name:<22} {size_mb / best:8.1f} MB/s", flush=True)
    path.unlink(missing_ok=True)
    shutil.rmtree(work / "dcp", ignore_errors=True)
    return costs


def notice_budget(costs: dict[str, float]) -> list[str]:
    """ESTIMATED write time (serialise to local NVMe + upload) of 10-100 GB per network speed."""
    serialize = costs["dcp.save (1 process)"]  # per process; every rank writes its own shard
    # Every rank uploads (and hashes, one thread per file) its own shard file: 8 at once a node.
    hash_rate = costs["sha256 (one core)"] * RANKS_PER_NODE
    lines = [
        "| checkpoint | network | serialise (s) | upload (s) | total (s) | fits 115 s? |",
        "|---|---|---|---|---|---|",
    ]
    for size_gb in ESTIMATE_SIZES_GB:
        size_mb = size_gb * 1024
        # Serialisation runs on every rank in parallel (one shard each).
        ser_s = size_mb / (serialize * RANKS_PER_NODE)
        for name, gbps in NETWORKS_GBPS.items():
            net_mb_s = gbps * 1000 / 8 * 0.8  # 80% of line rate to S3
            up_s = size_mb / min(net_mb_s, hash_rate)
            total = ser_s + up_s
            fits = "yes" if total + DETECT_S <= NOTICE_S else "no"
            lines.append(f"| {size_gb} GB | {name} | {ser_s:.0f} | {up_s:.0f} | {total:.0f} | {fits} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", default="100,400,1000", help="comma-separated checkpoint sizes")
    parser.add_argument("--stores", default="local,moto", help="comma-separated: local, moto")
    parser.add_argument("--moto-max-mb", type=int, default=1000, help="largest size run on moto")
    parser.add_argument("--cpu-mb", type=int, default=256, help="buffer for the per-byte CPU costs")
    parser.add_argument("--json", type=Path, help="write the measurements here")
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes_mb.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes-mb must be comma-separated integers, got {args.sizes_mb!r}")
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    if not sizes or min(sizes) <= 0 or args.cpu_mb <= 0:
        parser.error("sizes and --cpu-mb must be positive")
    if not stores or set(stores) - {"local", "moto"}:
        parser.error(f"--stores: each of local, moto, got {args.stores!r}")
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="spotline-bench-") as tmp:
        work = Path(tmp)
        print(f"checkpoint write and restore ({os.cpu_count()} CPUs; {', '.join(stores)}):")
        rows = throughput(sizes, stores, args.moto_max_mb, work)
        print(f"\nper-byte CPU costs ({args.cpu_mb} MB):")
        costs = cpu_costs(work, args.cpu_mb)
    print("\n" + "\n".join(table(rows)))
    budget = notice_budget(costs)
    print("\nESTIMATE (not measured): Spot-notice budget for a sharded checkpoint, 8 ranks a node,")
    print("from the per-byte costs above and EC2 network speeds at 80% of line rate:")
    print("\n".join(budget))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        result = {
            "command": "python -m bench.checkpoint_throughput "
            + " ".join(argv if argv is not None else sys.argv[1:]),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
            "wall_s": round(time.time() - started, 1),
            "cpus": os.cpu_count(),
            "rows": rows,
            "cpu_costs_mb_s": {k: round(v, 1) for k, v in costs.items()},
            "notice_budget_estimate": budget,
        }
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
