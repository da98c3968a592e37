"""The simulator's hot modules compiled with mypyc, for the benchmarks: `python -m bench.native`.

The same source, type-checked by `mypy --strict` already, compiled to C extension modules by
mypyc (the compiler mypy and black ship with). The build is a copy of the `spotline` package
under `build/native/<key>/`, with the compiled modules beside their source; the repository's own
tree is never touched, so tests, the demo and Lambda run the interpreted code as always. `<key>`
is a digest of every source file of the package, mypy's version and the interpreter's, so an
edited source gets a new build and never runs stale.

A benchmark process runs on the build when `SPOTLINE_NATIVE_TREE` names it (`bench/__init__.py`
puts it first on `sys.path`, before anything imports `spotline`). `make bench` builds it, then
checks that the build decides exactly as the interpreted code (`bench.decisions_check` on a small
trace, every evaluated policy, a digest of every decision and every job's record) before it uses
it, and that runs in worker processes come back as the same runs made in one (`smoke`); on any
difference, or with no C compiler, it runs interpreted and says so.

    python -m bench.native            # build (or find) it, verify it, print its path
    python -m bench.native --smoke    # (in a build) the bench's runs in worker processes
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENV = "SPOTLINE_NATIVE_TREE"

# What the simulator's runs spend their time in (the pass, its indexes and victim search, the
# event loop, the policy adapters, the peers). `models.py` and `config.py` (pydantic models) stay
# interpreted: mypyc compiles only plain classes natively, and pydantic's mypy plugin makes it
# emit C that does not build. So does `sim/model.py`: a frozen dataclass that mypyc compiles does
# not unpickle (`FrozenInstanceError`), and its `SimSettings` goes to the bench's worker
# processes (compiled, it saved nothing measurable: a Philly fortnight took 22.2 CPU-s with it
# compiled, 21.2 without, 31.3 interpreted).
MODULES: tuple[str, ...] = (
    "spotline/domain/heads.py",
    "spotline/domain/placement.py",
    "spotline/domain/planner.py",
    "spotline/domain/preemption.py",
    "spotline/domain/priority.py",
    "spotline/domain/quota.py",
    "spotline/domain/running.py",
    "spotline/domain/usage.py",
    "spotline/sim/engine.py",
    "spotline/sim/peers.py",
    "spotline/sim/pools.py",
    "spotline/sim/queues.py",
    "spotline/sim/spotline_policy.py",
    "spotline/sim/usage.py",
)
# The trace the verification replays (`bench.decisions_check.SAMPLES`).
VERIFY_SAMPLE = "synth-600"


def _sources(root: Path) -> list[Path]:
    return sorted(p for p in (root / "spotline").rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def key(root: Path = ROOT) -> str:
    """A digest of what the build is made of."""
    digest = hashlib.sha256()
    digest.update(sys.version.encode())
    digest.update(metadata.version("mypy").encode())
    digest.update("\n".join(MODULES).encode())
    digest.update((root / "pyproject.toml").read_bytes())
    for path in _sources(root):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def compiler_missing() -> str | None:
    """Why nothing can be compiled here, or None."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(cc) is None:
        return f"no C compiler ({cc})"
    include = sysconfig.get_paths().get("include", "")
    if not (Path(include) / "Python.h").exists():
        return f"no Python headers ({include}/Python.h)"
    return None


def build(root: Path = ROOT, quiet: bool = False) -> Path:
    """The build's tree (made unless it exists). Raises `RuntimeError`, naming why, when it fails."""
    digest = key(root)
    target = root / "build" / "native" / digest
    tree = target / "tree"
    if (target / "complete").exists():
        return tree
    missing = compiler_missing()
    if missing is not None:
        raise RuntimeError(missing)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Made beside it and renamed into place: a second bench meanwhile never reads half a build.
    work = Path(tempfile.mkdtemp(prefix=f"{target.name}.", dir=target.parent))
    try:
        staged = work / "tree"
        shutil.copytree(
            root / "spotline", staged / "spotline", ignore=shutil.ignore_patterns("__pycache__", "*.so")
        )
        # mypyc type-checks as `make lint` does (the same configuration).
        shutil.copy2(root / "pyproject.toml", staged / "pyproject.toml")
        mypyc = Path(sys.executable).with_name("mypyc")
        command = [str(mypyc)] if mypyc.exists() else [sys.executable, "-m", "mypyc"]
        if not quiet:
            print(f"native build: compiling {len(MODULES)} modules with mypyc (1-2 minutes)", flush=True)
        done = subprocess.run([*command, *MODULES], cwd=staged, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
            raise RuntimeError("mypyc failed:\n" + "\n".join(tail))
        shutil.rmtree(staged / "build", ignore_errors=True)
        (work / "complete").write_text(digest + "\n")
        try:
            work.rename(target)
        except OSError:
            if not (target / "complete").exists():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # Builds of older sources are never used again.
    for old in target.parent.iterdir():
        if old != target and (old / "complete").exists():
            shutil.rmtree(old, ignore_errors=True)
    return tree


def compiled(tree: Path) -> list[str]:
    """The modules of `tree` that import as compiled extensions."""
    return sorted(
        str(p.relative_to(tree)).split(".")[0].replace("/", ".") for p in (tree / "spotline").rglob("*.so")
    )


def _run(root: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=root, env=env, capture_output=True, text=True, check=False
    )


def verify(tree: Path, root: Path = ROOT) -> tuple[bool, str]:
    """Whether the build decides exactly as the interpreted code on `VERIFY_SAMPLE`, and the
    check's report."""
    interpreted_env = {k: v for k, v in os.environ.items() if k != ENV}
    native_env = {**interpreted_env, ENV: str(tree)}
    with tempfile.TemporaryDirectory() as scratch:
        reference = str(Path(scratch) / "interpreted.json")
        common = ("--samples", VERIFY_SAMPLE, "--policies", "evaluated")
        interpreted = _run(root, interpreted_env, "bench.decisions_check", "--record", reference, *common)
        if interpreted.returncode != 0:
            return False, "the interpreted run failed:\n" + interpreted.stderr[-2000:]
        native = _run(root, native_env, "bench.decisions_check", "--check", reference, *common)
    report = (native.stdout + native.stderr).strip()
    if native.returncode != 0:
        return False, report
    smoke = _run(root, native_env, "bench.native", "--smoke")
    if smoke.returncode != 0:
        tail = "\n".join((smoke.stdout + smoke.stderr).strip().splitlines()[-8:])
        return False, f"{report}\nruns in worker processes failed:\n{tail}"
    return True, report


def smoke() -> None:
    """The benchmarks' multi-process path, run in a build: settings, configurations and results
    cross processes (`policy_bench.run_many`), and come back as the same runs made in-process."""
    from bench import policy_bench as pb
    from spotline.domain import SchedulerConfig
    from spotline.sim import SimSettings
    from spotline.sim.model import SlurmKnobs, VictimStop

    sample = pb._synth(1, 1.1, 200, 32)
    hard = SimSettings(victim_stop=VictimStop.HARD_KILL, slurm=SlurmKnobs(bf_reservations=2))
    runs: list[pb._Run] = [
        (sample, "spotline", SimSettings(spotline_acts_on_notices=False), SchedulerConfig(), None),
        (sample, "slurm", hard, None, None),
        (sample, "kueue-bwc", hard, None, None),
    ]
    pb.WORKERS = 2
    apart = pb.run_many(runs)
    here = [pb._run_one(run) for run in runs]
    if apart != here:
        raise SystemExit("runs in worker processes differ from the same runs in this one")


def prepare(root: Path = ROOT) -> tuple[Path | None, str]:
    """The verified build's tree, or None, and a line saying which the benchmarks run."""
    try:
        tree = build(root)
    except RuntimeError as error:
        return None, f"simulator: interpreted (the native build failed: {error})"
    same, report = verify(tree, root)
    if not same:
        return None, f"simulator: interpreted (the native build decided differently:\n{report})"
    runs = sum(1 for line in report.splitlines() if line.endswith(": same"))
    return tree, (
        f"simulator: {len(compiled(tree))} modules compiled with mypyc ({tree.relative_to(root)}), the"
        f" same source; it decided exactly as the interpreted code in {runs} runs on {VERIFY_SAMPLE}"
        " (every decision and job record)"
    )


def environment() -> tuple[dict[str, str], str]:
    """The environment for a process whose work is simulations: this one's, naming the verified
    build (`ENV`) unless `SPOTLINE_BENCH_NATIVE=0` or no build is usable; and a line saying
    which code the simulations run."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if env.get("SPOTLINE_BENCH_NATIVE") == "0":
        return env, "simulator: interpreted (SPOTLINE_BENCH_NATIVE=0)"
    tree, line = prepare()
    if tree is not None:
        env[ENV] = str(tree)
    return env, line


def rerun_compiled(module: str) -> None:
    """Run `python -m module` again on the verified build (for a tool whose work is simulations:
    `bench.tune`), unless this process runs on one already or `SPOTLINE_BENCH_NATIVE=0`. Returns
    when no build is usable (the tool then runs interpreted)."""
    if os.environ.get(ENV):
        return
    env, line = environment()
    print(line, file=sys.stderr, flush=True)
    if ENV in env:
        os.execve(sys.executable, [sys.executable, "-m", module, *sys.argv[1:]], env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="(in a build) run the bench's runs in worker processes"
    )
    args = parser.parse_args(argv)
    if args.smoke:
        smoke()
        return 0
    tree, line = prepare()
    print(line)
    if tree is not None:
        print(tree)
    return 0 if tree is not None else 1


if __name__ == "__main__":
    sys.exit(main())
