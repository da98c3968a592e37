"""Where `make bench` puts what it measured: `bench/results/<UTC start>-<commit>.md` for each run
(the commit, whether the tree had uncommitted changes, the machine, the wall time, each part's
wall time and output as it printed it), and the same text as `bench/results/latest.md`, which
the docs site publishes (docs/benchmarks.md). No figure is typed in by hand: every table is the bench's own
output, captured from its standard output (its subprocesses' too).

`python -m bench.results --from-raw FILE ...` files the saved output of an earlier run the same
way, with its provenance given on the command line; it does not touch `latest.md` unless asked
(`--latest`).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, redirect_stdout
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "bench" / "results"
LATEST = "latest.md"
# Colour and cursor codes a library may print even into a pipe.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(frozen=True)
class Section:
    title: str
    output: str
    wall_s: float | None = None  # how long the part ran (None for output filed afterwards)


@dataclass
class Run:
    """One bench run: what ran, where, and what it printed."""

    started: datetime
    finished: datetime
    commit: str
    dirty: bool
    machine: dict[str, str]
    command: str
    sections: list[Section] = field(default_factory=list)
    note: str = ""
    # False for a run filed afterwards, whose times are known to the minute at best.
    timed_here: bool = True

    @property
    def file_name(self) -> str:
        return f"{self.started:%Y-%m-%dT%H%MZ}-{self.commit[:7]}.md"


def git_state(root: Path = ROOT) -> tuple[str, bool]:
    """The checked-out commit and whether the tree differs from it ("unknown" outside git)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False
    return commit, bool(status.strip())


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def machine() -> dict[str, str]:
    """What the figures depend on: the CPU, how many cores, memory, Python, and the load when
    the run started (other processes on a shared machine slow it)."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/cpuinfo").splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    memory = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/meminfo").splitlines()
            if line.startswith("MemTotal")
        ),
        "unknown",
    )
    try:
        load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        load = "unknown"
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count() or "unknown"),
        "memory": memory,
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "os": platform.platform(),
        "load average at the start (1, 5, 15 min)": load,
    }


def render(run: Run) -> str:
    wall_s = (run.finished - run.started).total_seconds()
    commit = f"`{run.commit}`" + (" with uncommitted changes" if run.dirty else "")
    lines = [
        f"# Benchmark results, {run.started:%Y-%m-%d %H:%M} UTC",
        "",
        f"Written by `{run.command}`; every table below is its own output.",
        "",
        "| | |",
        "|---|---|",
        f"| commit | {commit} |",
        *(
            [
                f"| started | {run.started:%Y-%m-%d %H:%M:%S} UTC |",
                f"| finished | {run.finished:%Y-%m-%d %H:%M:%S} UTC ({wall_s / 60:.1f} minutes) |",
            ]
            if run.timed_here
            else [f"| ran | {run.started:%Y-%m-%d %H:%M}-{run.finished:%H:%M} UTC (as recorded) |"]
        ),
        *(f"| {key} | {value} |" for key, value in run.machine.items()),
        "",
    ]
    if run.note:
        lines += [run.note.strip(), ""]
    timed = [section for section in run.sections if section.wall_s is not None]
    if timed:
        lines += ["| part | wall time |", "|---|---|"]
        lines += [f"| {section.title} | {_duration(section.wall_s)} |" for section in timed]
        lines += [""]
    for section in run.sections:
        text = _ANSI.sub("", section.output).rstrip()
        lines += [f"## {section.title}", "", "```text", text or "(no output)", "```", ""]
    return "\n".join(lines)


def _duration(seconds: float | None) -> str:
    seconds = seconds or 0.0
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min ({seconds:.0f} s)"


def write(run: Run, out_dir: Path | None = None, *, latest: bool = True) -> Path:
    """Write the run's dated file (and `latest.md`) into `out_dir` (default `bench/results/`);
    returns the dated file's path."""
    out_dir = out_dir or RESULTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    text = render(run)
    path = out_dir / run.file_name
    path.write_text(text)
    if latest:
        (out_dir / LATEST).write_text(text)
    return path


@contextmanager
def captured_stdout() -> Iterator[bytearray]:
    """Everything written to file descriptor 1 while inside, by this process or its children,
    still goes to the real standard output and is also collected."""
    sys.stdout.flush()
    saved = os.dup(1)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.close(write_end)
    collected = bytearray()

    def pump() -> None:
        while chunk := os.read(read_end, 65536):
            os.write(saved, chunk)
            collected.extend(chunk)

    thread = threading.Thread(target=pump, name="bench-stdout", daemon=True)
    thread.start()
    # Python-level writes go to descriptor 1 too, even where sys.stdout was replaced (by pytest,
    # say); line-buffered, so the real output keeps up with the bench.
    stream = open(1, "w", encoding="utf-8", errors="replace", closefd=False, buffering=1)  # noqa: SIM115
    try:
        with redirect_stdout(stream):
            yield collected
    finally:
        stream.close()  # flushes; descriptor 1 stays open (closefd=False)
        os.dup2(saved, 1)  # the pipe's last write end closes: the pump reads to its end
        thread.join(timeout=30)
        os.close(read_end)
        os.close(saved)


class Recorder:
    """Collects a bench run part by part: `with recorder.section("title"): ...`."""

    def __init__(self, command: str) -> None:
        self.command = command
        self.started = datetime.now(UTC)
        self.machine = machine()
        self.sections: list[Section] = []

    @contextmanager
    def section(self, title: str) -> Iterator[None]:
        began = time.perf_counter()
        with captured_stdout() as output:
            yield
        wall_s = time.perf_counter() - began
        self.sections.append(Section(title, output.decode(errors="replace"), wall_s))

    def finish(self, out_dir: Path | None = None, *, latest: bool = True) -> Path:
        """Write the run (see `write`); `latest=False` leaves `latest.md` alone (a run of one
        part, such as `make bench-speed`)."""
        commit, dirty = git_state()
        run = Run(
            started=self.started,
            finished=datetime.now(UTC),
            commit=commit,
            dirty=dirty,
            machine=self.machine,
            command=self.command,
            sections=self.sections,
        )
        return write(run, out_dir, latest=latest)


def _utc(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r}: give the time zone (e.g. 2026-12-02T02:24Z)")
    return value.astimezone(UTC)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.results",
        description="File the raw output of an earlier bench run under bench/results/ with its provenance.",
    )
    parser.add_argument("--from-raw", type=Path, required=True, help="the run's saved standard output")
    parser.add_argument("--commit", required=True, help="the commit the run measured")
    parser.add_argument("--started", type=_utc, required=True, help="ISO-8601 with a zone")
    parser.add_argument("--finished", type=_utc, required=True, help="ISO-8601 with a zone")
    parser.add_argument("--command", default="make bench", help="what produced the output")
    parser.add_argument(
        "--machine", action="append", default=[], metavar="KEY=VALUE", help="what is known of the machine"
    )
    parser.add_argument("--note", default="", help="provenance and caveats, printed above the output")
    parser.add_argument("--out-dir", type=Path, default=None, help="default: bench/results/")
    parser.add_argument("--latest", action="store_true", help="also make it latest.md")
    args = parser.parse_args(argv)
    if args.finished < args.started:
        parser.error("--finished is before --started")
    known: dict[str, str] = {}
    for item in args.machine:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            parser.error(f"--machine {item!r}: expected KEY=VALUE")
        known[key.strip()] = value.strip()
    try:
        output = args.from_raw.read_text()
    except OSError as error:
        parser.error(f"--from-raw {args.from_raw}: {error.strerror}")
    run = Run(
        started=args.started,
        finished=args.finished,
        commit=args.commit,
        dirty=False,
        machine=known or {"machine": "not recorded"},
        command=args.command,
        sections=[Section(f"Output (filed from `{args.from_raw}`)", output)],
        note=args.note,
        timed_here=False,
    )
    print(write(run, args.out_dir, latest=args.latest))
    return 0


if __name__ == "__main__":
    sys.exit(main())
