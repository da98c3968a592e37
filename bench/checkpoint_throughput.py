"""Checkpoint throughput: how fast a checkpoint of files leaves and comes back, against its size.

    nice -n 10 python -m bench.checkpoint_throughput --sizes-mb 100,400,1000 [--shards 4]

For each size it writes a checkpoint of `--shards` files of random bytes (what a sharded model
state looks like to the store: incompressible), then

- **upload**: `S3CheckpointStore.save_files` to a moto server on 127.0.0.1 (multipart, parallel
  parts and files, hashing while reading) and `LocalCheckpointStore.save_files` (copy + hash +
  fsync), manifest last;
- **restore**: `latest_files` back into a directory (parallel ranged GETs, then every hash checked).

It also measures the per-byte CPU costs that bound a real upload whatever the network: SHA-256
(one core: each file is hashed by one thread), `torch.save` of a state dict to a local file, and
`torch.distributed.checkpoint.save` (single process). From those and EC2 network speeds it
ESTIMATES the time to write a 10-100 GB checkpoint, and whether it leaves within the 2-minute Spot
notice. The moto figures measure this code and moto on this machine's CPUs (moto is a Python
HTTP server), not S3: they are a floor for the code's overhead, not a prediction of S3's speed.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

NOTICE_S = 120.0
DETECT_S = 5.0  # the agent polls the notice every 5 s
# EC2 networking (Gbit/s) of a few GPU instances, as AWS lists them; S3 from one instance reaches
# about this with enough parallel connections (AWS's S3 performance guidelines).
NETWORKS_GBPS = {"g5.12xlarge (40 Gb/s)": 40.0, "p4d.24xlarge (400 Gb/s)": 400.0, "10 Gb/s": 10.0}
ESTIMATE_SIZES_GB = (10, 30, 100)
RANKS_PER_NODE = 8


def _random_file(path: Path, size: int) -> None:
    chunk = os.urandom(min(size, 16 * 1024 * 1024))
    with open(path, "wb") as out:
        left = size
        while left > 0:
            out.write(chunk[: min(left, len(chunk))])
            left -= len(chunk)


def _timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _moto_endpoint() -> tuple[str, Callable[[], None]]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return f"http://{host}:{port}", server.stop


def throughput(sizes_mb: list[int], shards: int, work: Path) -> list[dict[str, float | str]]:
    import boto3

    from spotline.agent import LocalCheckpointStore, S3CheckpointStore

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    endpoint, stop = _moto_endpoint()
    rows: list[dict[str, float | str]] = []
    try:
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        for size_mb in sizes_mb:
            source = work / f"src-{size_mb}"
            source.mkdir()
            size = size_mb * 1024 * 1024
            for shard in range(shards):
                _random_file(source / f"__{shard}_0.distcp", size // shards)
            bucket = f"bench-{size_mb}"
            s3.create_bucket(Bucket=bucket)
            stores = {
                "moto S3": S3CheckpointStore(bucket, "team/job/", s3),
                "local disk": LocalCheckpointStore(work / f"store-{size_mb}"),
            }
            for name, store in stores.items():
                up = _timed(
                    lambda store=store, source=source: store.save_files(
                        1, source, job_id="bench", created_at=0.0
                    )
                )
                target = work / f"restore-{size_mb}"
                down = _timed(lambda store=store, target=target: store.latest_files(target))
                shutil.rmtree(target, ignore_errors=True)
                rows.append(
                    {
                        "size_mb": size_mb,
                        "store": name,
                        "upload_s": up,
                        "upload_mb_s": size_mb / up,
                        "restore_s": down,
                        "restore_mb_s": size_mb / down,
                    }
                )
                print(
                    f"  {size_mb:>6} MB {name:<10} upload {up:6.2f} s ({size_mb / up:7.1f} MB/s)"
                    f"  restore {down:6.2f} s ({size_mb / down:7.1f} MB/s)",
                    flush=True,
                )
            shutil.rmtree(work / f"store-{size_mb}", ignore_errors=True)
            for obj in s3.list_objects_v2(Bucket=bucket).get("Contents", []):
                s3.delete_object(Bucket=bucket, Key=obj["Key"])
            shutil.rmtree(source)
    finally:
        stop()
    return rows


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
    parser.add_argument("--shards", type=int, default=4, help="files per checkpoint")
    parser.add_argument("--cpu-mb", type=int, default=256, help="buffer for the per-byte CPU costs")
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes_mb.split(",") if s.strip()]
    except ValueError:
        parser.error(f"--sizes-mb must be comma-separated integers, got {args.sizes_mb!r}")
    if not sizes or min(sizes) <= 0 or args.shards <= 0:
        parser.error("sizes and --shards must be positive")
    with tempfile.TemporaryDirectory(prefix="spotline-bench-") as tmp:
        work = Path(tmp)
        print(f"checkpoint throughput ({args.shards} files per checkpoint, {os.cpu_count()} CPUs):")
        rows = throughput(sizes, args.shards, work)
        print(f"\nper-byte CPU costs ({args.cpu_mb} MB):")
        costs = cpu_costs(work, args.cpu_mb)
    by_store: dict[str, list[float]] = {}
    for row in rows:
        by_store.setdefault(str(row["store"]), []).append(float(row["upload_mb_s"]))
    for store, rates in by_store.items():
        print(f"  median upload {store}: {statistics.median(rates):.1f} MB/s")
    print("\nESTIMATE (not measured): Spot-notice budget for a sharded checkpoint, 8 ranks a node,")
    print("from the per-byte costs above and EC2 network speeds at 80% of line rate:")
    print("\n".join(notice_budget(costs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
