"""CLI start-up: how long `spotline --help` and `spotline list` take, against a bare `python -c pass`.

Each command runs in a fresh interpreter, `--runs` times, interleaved with the bare interpreter
so a load that changes during the bench moves both sides alike. Reported per command: the median
wall time and the median CPU time of the child process (user + system, from `wait4`), and each as
a ratio to the bare interpreter's. `spotline list` runs the whole command: it reads a
`local.json` in a temporary state directory and lists the jobs of a small HTTP server in this
process that answers `GET /jobs` with two jobs, so the figure includes the request and the table.

`--importtime CMD` prints the ten slowest imports (cumulative, `python -X importtime`) of one of
the commands instead.

    .venv/bin/python -m bench.cli_startup [--runs N] [--importtime help|list]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_JOBS = {
    "jobs": [
        {
            "id": f"job-{n:016x}",
            "name": f"bench-{n}",
            "state": "PENDING",
            "priority": "normal",
            "gpus": 1,
            "nodes": 1,
            "submitted_at": 1_700_000_000.0 + n,
            "wait_reason": "pool a100-spot is full",
        }
        for n in range(2)
    ],
    "next_token": None,
}


class _Jobs(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps(_JOBS).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextmanager
def local_endpoint() -> Iterator[dict[str, str]]:
    """A state directory whose local.json names a server that lists two jobs; yields the
    environment that points the CLI at it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Jobs)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with tempfile.TemporaryDirectory(prefix="spotline-cli-bench-") as state:
            url = f"http://127.0.0.1:{server.server_address[1]}"
            local = {"api_url": url, "teams": {"bench": {"headers": {"x-spotline-access-key": "bench"}}}}
            (Path(state) / "local.json").write_text(json.dumps(local))
            yield {"SPOTLINE_STATE_DIR": state, "XDG_CONFIG_HOME": state}
    finally:
        server.shutdown()
        server.server_close()


COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "spotline --help": [sys.executable, "-m", "spotline.cli", "--help"],
    "spotline list": [sys.executable, "-m", "spotline.cli", "list"],
}


def run_once(argv: Sequence[str], env: Mapping[str, str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run; fails loudly if the command fails."""
    start = time.perf_counter()
    process = subprocess.Popen(argv, env=dict(env), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    stderr = process.stderr.read().decode() if process.stderr else ""
    if process.stderr:
        process.stderr.close()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:])} failed (exit {process.returncode}): {stderr.strip()}")
    return wall, usage.ru_utime + usage.ru_stime


def measure(runs: int, env: Mapping[str, str]) -> dict[str, tuple[list[float], list[float]]]:
    results: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in COMMANDS}
    for argv in COMMANDS.values():  # one unmeasured run each: the bytecode caches are written
        run_once(argv, env)
    for _ in range(runs):
        for name, argv in COMMANDS.items():
            wall, cpu = run_once(argv, env)
            results[name][0].append(wall)
            results[name][1].append(cpu)
    return results


def table(results: Mapping[str, tuple[list[float], list[float]]], runs: int) -> str:
    bare_wall = statistics.median(results["python -c pass"][0])
    bare_cpu = statistics.median(results["python -c pass"][1])
    lines = [
        f"CLI start-up, median of {runs} runs (fresh interpreter each; ratio to a bare `python -c pass`)",
        f"{'command':<18} {'wall ms':>9} {'x bare':>7} {'cpu ms':>9} {'x bare':>7}",
    ]
    for name, (walls, cpus) in results.items():
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        ratios = f"{wall / bare_wall:>7.1f} {cpu * 1000:>9.0f} {cpu / bare_cpu:>7.1f}"
        lines.append(f"{name:<18} {wall * 1000:>9.0f} {ratios}")
    return "\n".join(lines)


def importtime(command: str, env: Mapping[str, str], top: int = 10) -> str:
    argv = COMMANDS["spotline --help" if command == "help" else "spotline list"]
    done = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:]], env=dict(env), capture_output=True, text=True, check=True
    )
    rows = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, self_us, cumulative_us, name = _fields(line)
        rows.append((int(cumulative_us), int(self_us), name))
    total = sum(self_us for _, self_us, _ in rows)
    heaviest = sorted(rows, reverse=True)[:top]
    shown = "--help" if command == "help" else "list"
    out = [f"spotline {shown}: {len(rows)} modules, {total / 1000:.0f} ms of imports (self times summed)"]
    out += [f"  {cumulative / 1000:>7.1f} ms  {name}" for cumulative, _, name in heaviest]
    return "\n".join(out)


def _fields(line: str) -> tuple[str, str, str, str]:
    """`import time: self | cumulative | name` -> (prefix, self, cumulative, name)."""
    head, cumulative, name = line.split("|", 2)
    return head, head.split(":", 1)[1].strip(), cumulative.strip(), name.strip()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each command (default 10)")
    parser.add_argument("--importtime", choices=("help", "list"), help="the slowest imports of one command")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    with local_endpoint() as extra:
        env = {**os.environ, **extra}
        if args.importtime:
            print(importtime(args.importtime, env))
        else:
            print(table(measure(args.runs, env), args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
