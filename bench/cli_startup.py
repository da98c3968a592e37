"""CLI start-up: how long each client command takes, against a bare `python -c pass`.

Each command runs in a fresh interpreter, `--runs` times, interleaved with the bare interpreter
so a load that changes during the bench moves both sides alike. Reported per command: the median
wall time and the median CPU time of the child process (user + system, from `wait4`), and each as
a ratio to the bare interpreter's. Every client command is measured twice: `CMD --help` (its
start: the interpreter, the imports, the command line parsed) and the whole command (its start,
one request and its table): it reads a `local.json` in a temporary state directory and talks to
a small HTTP server in this process that answers each route with a canned body, so the difference
is the request and the printing, not the control plane's work.

`--importtime CMD` prints the ten slowest imports (cumulative, `python -X importtime`) of one of
the commands instead. `--local-up N` measures how long `spotline local up` takes to exit after
Ctrl-C (SIGINT), N times, once it is up (a local plane of its own each time: slow).

    .venv/bin/python -m bench.cli_startup [--runs N] [--only NAME ...] [--importtime CMD] [--local-up N]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
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


_JOB = {**_JOBS["jobs"][0], "team": "bench", "state_reason": "submitted", "effective_priority": 1.0}
# path -> the body the fake API answers (a GET; a POST to /jobs answers the job).
_ANSWERS: dict[str, Any] = {
    "/jobs": _JOBS,
    f"/jobs/{_JOB['id']}": _JOB,
    f"/jobs/{_JOB['id']}/events": {
        "job_id": _JOB["id"],
        "events": [{"t": 1_700_000_000.0, "from": None, "to": "PENDING", "reason": "submitted"}],
    },
    f"/jobs/{_JOB['id']}/explain": {"job_id": _JOB["id"], "state": "PENDING", "summary": "waiting"},
    f"/jobs/{_JOB['id']}/logs": {
        "job_id": _JOB["id"],
        "run": "b-1",
        "runs": ["b-1"],
        "lines": [{"message": "step 1/10 loss 1.0"}],
        "next_token": None,
    },
    "/usage": {"team": "bench", "month": "2026-12", "gpu_hours": 1.0, "dollars": 2.0},
    "/pools": {
        "at": "2026-12-05T00:00:00Z",
        "nodes_reported": False,
        "pools": [
            {
                "name": "a100-spot",
                "gpu_type": "a100",
                "purchase": "spot",
                "capacity_gpus": 8,
                "gpus_per_node": 4,
                "used_gpus": 4,
                "free_gpus": 4,
                "spot": {"state": "there", "availability": None},
                "team_jobs": [],
                "nodes": None,
                "node_counts": None,
            }
        ],
    },
    "/history": {
        "jobs": [{**_JOB, "state": "SUCCEEDED", "finished_at": 1_700_000_100.0}],
        "next_token": None,
    },
}


class _Api(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self._answer(_ANSWERS.get(self.path.split("?", 1)[0]))

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer(_JOB if self.path == "/jobs" else None, 201)

    def _answer(self, found: Any, status: int = 200) -> None:
        body = json.dumps(found if found is not None else {"message": "not found"}).encode()
        self.send_response(status if found is not None else 404)
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
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with tempfile.TemporaryDirectory(prefix="spotline-cli-bench-") as state:
            url = f"http://127.0.0.1:{server.server_address[1]}"
            local = {"api_url": url, "teams": {"bench": {"headers": {"x-spotline-access-key": "bench"}}}}
            (Path(state) / "local.json").write_text(json.dumps(local))
            (Path(state) / "job.yaml").write_text(SPEC)
            yield {"SPOTLINE_STATE_DIR": state, "XDG_CONFIG_HOME": state}
    finally:
        server.shutdown()
        server.server_close()


SPEC = "name: bench\ngpus: 1\nimage: spotline/train:latest\ncommand: [python, -c, pass]\n"
SPOTLINE = [sys.executable, "-m", "spotline.cli"]
# The client commands, each with the arguments of one whole run ({state}: the state directory).
CLIENT: dict[str, list[str]] = {
    "list": ["list"],
    "status": ["status", _JOB["id"]],
    "events": ["events", _JOB["id"]],
    "explain": ["explain", _JOB["id"]],
    "logs": ["logs", _JOB["id"]],
    "usage": ["usage"],
    "pools": ["pools"],
    "history": ["history"],
    "submit": ["submit", "{state}/job.yaml"],
}
COMMANDS: dict[str, list[str]] = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "spotline --help": [*SPOTLINE, "--help"],
    **{f"{name} --help": [*SPOTLINE, argv[0], "--help"] for name, argv in CLIENT.items()},
    **{f"{name} (run)": [*SPOTLINE, *argv] for name, argv in CLIENT.items()},
}


def run_once(argv: Sequence[str], env: Mapping[str, str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run; fails loudly if the command fails."""
    argv = [a.replace("{state}", env.get("SPOTLINE_STATE_DIR", "")) for a in argv]
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


def measure(
    runs: int, env: Mapping[str, str], only: Sequence[str] = ()
) -> dict[str, tuple[list[float], list[float]]]:
    chosen = {
        name: argv
        for name, argv in COMMANDS.items()
        if name == "python -c pass" or not only or name.split(" ")[0] in only
    }
    results: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in chosen}
    for argv in chosen.values():  # one unmeasured run each: the bytecode caches are written
        run_once(argv, env)
    for _ in range(runs):
        for name, argv in chosen.items():
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
        "(`CMD --help`: its start; `CMD (run)`: start, one request to a canned local API, the table)",
    ]
    for name, (walls, cpus) in results.items():
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        ratios = f"{wall / bare_wall:>7.1f} {cpu * 1000:>9.0f} {cpu / bare_cpu:>7.1f}"
        lines.append(f"{name:<18} {wall * 1000:>9.0f} {ratios}")
    return "\n".join(lines)


def importtime(command: str, env: Mapping[str, str], top: int = 10) -> str:
    argv = COMMANDS["spotline --help" if command == "help" else f"{command} (run)"]
    argv = [a.replace("{state}", env.get("SPOTLINE_STATE_DIR", "")) for a in argv]
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
    shown = "--help" if command == "help" else command
    out = [f"spotline {shown}: {len(rows)} modules, {total / 1000:.0f} ms of imports (self times summed)"]
    out += [f"  {cumulative / 1000:>7.1f} ms  {name}" for cumulative, _, name in heaviest]
    return "\n".join(out)


def _fields(line: str) -> tuple[str, str, str, str]:
    """`import time: self | cumulative | name` -> (prefix, self, cumulative, name)."""
    head, cumulative, name = line.split("|", 2)
    return head, head.split(":", 1)[1].strip(), cumulative.strip(), name.strip()


def local_up_stop_s(tries: int) -> list[float]:
    """Seconds from SIGINT to the exit of `spotline local up`, once it is up, `tries` times."""
    found = []
    for _ in range(tries):
        with tempfile.TemporaryDirectory(prefix="spotline-up-bench-") as state:
            process = subprocess.Popen(
                [*SPOTLINE, "local", "up", "--state-dir", state],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.time() + 300
            while not (Path(state) / "local.json").exists():
                if time.time() > deadline or process.poll() is not None:
                    process.kill()
                    raise SystemExit("spotline local up did not come up")
                time.sleep(0.1)
            time.sleep(2.0)  # its threads at work: the ticks, the router, the API
            sent = time.perf_counter()
            process.send_signal(signal.SIGINT)
            process.wait(timeout=120)
            found.append(time.perf_counter() - sent)
            if process.returncode != 0:
                raise SystemExit(f"spotline local up exited {process.returncode} after SIGINT")
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="runs of each command (default 10)")
    parser.add_argument("--only", nargs="+", default=(), help="only these commands (e.g. list pools)")
    parser.add_argument("--importtime", choices=("help", *CLIENT), help="the slowest imports of one command")
    parser.add_argument("--local-up", type=int, default=0, metavar="N", help="time local up's stop, N times")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if args.local_up:
        stops = local_up_stop_s(args.local_up)
        print(
            f"spotline local up, SIGINT to exit: median {statistics.median(stops):.2f} s,"
            f" max {max(stops):.2f} s over {len(stops)} run(s) (target: within 5 s)"
        )
        return 0
    with local_endpoint() as extra:
        env = {**os.environ, **extra}
        if args.importtime:
            print(importtime(args.importtime, env))
        else:
            print(table(measure(args.runs, env, args.only), args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
