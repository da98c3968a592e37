"""`make bench` files its results under bench/results/ (bench.results): the output each part
printed, the commit and the machine, in a dated file and in latest.md, which the docs publish."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import results


def test_captured_output_still_reaches_stdout_and_includes_child_processes(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with results.captured_stdout() as output:
        print("from this process", flush=True)
        subprocess.run([sys.executable, "-c", "print('from a child')"], check=True)
    text = output.decode()
    assert "from this process" in text
    assert "from a child" in text
    assert "from a child" in capfd.readouterr().out


def test_a_recorded_run_writes_a_dated_file_and_latest(tmp_path: Path) -> None:
    record = results.Recorder("make bench")
    with record.section("First part"):
        print("| pending | ms |\n| 1,000 | 64.7 |", flush=True)
    with record.section("Second part"):
        print("\x1b[1mbold\x1b[0m total $0.0465", flush=True)
    path = record.finish(tmp_path)

    commit, _ = results.git_state()
    assert path.name.endswith(f"-{commit[:7]}.md")
    assert path.name.startswith(f"{record.started:%Y-%m-%dT%H%M}")
    text = path.read_text()
    assert (tmp_path / "latest.md").read_text() == text
    assert f"`{commit}`" in text
    assert "| cores |" in text and "| cpu |" in text
    assert text.index("## First part") < text.index("| 1,000 | 64.7 |") < text.index("## Second part")
    assert "bold total $0.0465" in text  # colour codes stripped
    assert "\x1b" not in text


def test_make_bench_records_every_part(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import bench.__main__ as bench_main
    from bench import (
        aws_costs,
        cli_startup,
        cold_start,
        deadline_bench,
        deadline_families,
        pass_scale,
        plan_bench,
        spot_pools,
    )

    # Every part prints a line of its own instead of running (`make bench` takes many minutes).
    parts = {
        (cli_startup, "main"): "cli table",
        (spot_pools, "main"): "spot pools table",
        (plan_bench, "main"): "plan table",
        (bench_main, "_policy_bench"): "policy table",
        (bench_main, "_contention_bench"): "contention table",
        (pass_scale, "main"): "pass table",
        (cold_start, "main"): "cold table",
        (aws_costs, "main"): "cost table",
        (deadline_bench, "main"): "deadline table",
        (deadline_families, "main"): "deadline families table",
    }
    for (module, name), line in parts.items():
        monkeypatch.setattr(module, name, lambda *_, line=line: print(line, flush=True))
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)

    assert bench_main.main() == 0

    latest = (tmp_path / "latest.md").read_text()
    for line in parts.values():
        assert line in latest
    assert "(no output)" not in latest  # no part ran outside the fakes unrecorded
    assert len(list(tmp_path.glob("*.md"))) == 2


def test_raw_output_is_filed_with_its_provenance_and_leaves_latest_alone(tmp_path: Path) -> None:
    raw = tmp_path / "raw.txt"
    raw.write_text("speed: 112.7 s wall\n")
    (tmp_path / "latest.md").write_text("the newest run\n")
    argv = [
        "--from-raw",
        str(raw),
        "--commit",
        "5f3429e0deb78ff4f5f017d5c52396e17bd49a03",
        "--started",
        "2026-12-02T02:24Z",
        "--finished",
        "2026-12-02T02:33Z",
        "--machine",
        "cores=2 (shared)",
        "--note",
        "Compiled simulator.",
        "--out-dir",
        str(tmp_path),
    ]
    assert results.main(argv) == 0
    filed = (tmp_path / "2026-12-02T0224Z-5f3429e.md").read_text()
    assert "`5f3429e0deb78ff4f5f017d5c52396e17bd49a03`" in filed
    assert "| cores | 2 (shared) |" in filed
    assert "| ran | 2026-12-02 02:24-02:33 UTC (as recorded) |" in filed
    assert "Compiled simulator." in filed and "speed: 112.7 s wall" in filed
    assert (tmp_path / "latest.md").read_text() == "the newest run\n"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"--started": "2026-12-02T02:24"}, "time zone"),
        ({"--finished": "2026-12-02T01:00Z"}, "before --started"),
        ({"--machine": "cores"}, "KEY=VALUE"),
        ({"--from-raw": "/nonexistent/raw.txt"}, "--from-raw"),
    ],
)
def test_bad_raw_filing_arguments_are_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, str], message: str
) -> None:
    raw = tmp_path / "raw.txt"
    raw.write_text("x\n")
    args = {
        "--from-raw": str(raw),
        "--commit": "abc1234",
        "--started": "2026-12-02T02:24Z",
        "--finished": "2026-12-02T02:33Z",
        "--machine": "cores=2",
        "--out-dir": str(tmp_path),
    } | change
    with pytest.raises(SystemExit) as exit_:
        results.main([item for pair in args.items() for item in pair])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.glob("*.md"))


def test_the_file_name_sorts_by_start_time() -> None:
    run = results.Run(
        started=datetime(2026, 12, 2, 2, 24, tzinfo=UTC),
        finished=datetime(2026, 12, 2, 2, 33, tzinfo=UTC),
        commit="5f3429e0deb78ff4f5f017d5c52396e17bd49a03",
        dirty=True,
        machine={},
        command="make bench",
    )
    assert run.file_name == "2026-12-02T0224Z-5f3429e.md"
    assert "with uncommitted changes" in results.render(run)


def test_make_bench_simulates_the_evaluation_once_and_times_each_part(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import bench.__main__ as bench_main
    from bench import (
        aws_costs,
        cli_startup,
        cold_start,
        deadline_bench,
        deadline_families,
        pass_scale,
        plan_bench,
        spot_pools,
    )

    for module, name in ((plan_bench, "main"), (pass_scale, "main"), (cold_start, "main"),
                         (cli_startup, "main"), (aws_costs, "main"), (deadline_bench, "main"),
                         (deadline_families, "main"), (spot_pools, "main")):  # fmt: skip
        monkeypatch.setattr(module, name, lambda *_: None)

    def policy(*arguments: str) -> None:  # the policy part saves its evaluation where it is told
        assert arguments[0] == "--save-evaluation"
        Path(arguments[1]).write_text('{"sample": "its runs"}')

    def contention(*arguments: str) -> None:  # the contention part reads that very file
        assert arguments[0] == "--evaluation-runs"
        print("contention read", Path(arguments[1]).read_text(), flush=True)

    monkeypatch.setattr(bench_main, "_policy_bench", policy)
    monkeypatch.setattr(bench_main, "_contention_bench", contention)
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    assert bench_main.main() == 0
    latest = (tmp_path / "latest.md").read_text()
    assert 'contention read {"sample": "its runs"}' in latest
    assert "| part | wall time |" in latest
    for part in ("plan() at scale", "Policies on the evaluation set", "The policy under contention"):
        assert f"| {part} | " in latest
    assert "speed" not in latest.lower()  # the speed run is `make bench-speed`'s


def test_make_bench_speed_files_its_run_and_leaves_latest_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import bench.__main__ as bench_main

    asked: list[tuple[str, ...]] = []
    monkeypatch.setattr(bench_main, "_policy_bench", lambda *a: asked.append(a) or print("speed: 1 s"))
    monkeypatch.setattr(results, "RESULTS_DIR", tmp_path)
    (tmp_path / "latest.md").write_text("the newest make bench\n")
    assert bench_main.main(["--speed"]) == 0
    assert asked == [("--speed",)]
    [filed] = [p for p in tmp_path.glob("*.md") if p.name != "latest.md"]
    assert "make bench-speed" in filed.read_text() and "speed: 1 s" in filed.read_text()
    assert (tmp_path / "latest.md").read_text() == "the newest make bench\n"
    assert bench_main.main(["--fast"]) == 2
