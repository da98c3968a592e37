"""Real AWS Spot availability traces: load and validate them.

A trace is SkyPilot's format (skypilot-org/spot-traces, the data of "Can't Be Late", NSDI '24):
`{"metadata": {"gap_seconds": G}, "data": [n0, n1, ...]}`, where `n_i` is how many instances could
be obtained at tick i. The capacity is piecewise constant: `n_i` holds over
`[i * G, (i + 1) * G)` seconds from the trace start. The repository ships the traces it uses under
`spotline/sim/data/availability/` (see the README there for provenance).

SkyPilot's preemption traces also carry `"prices": [p0, p1, ...]`, the Spot price per hour at each
tick. It is accepted and validated (one finite price >= 0 per tick) and kept on the trace; the
benchmarks price Spot at 1 and On-Demand at a fixed ratio, so they do not use it (see
`AvailabilityTrace.prices`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TypeGuard


class AvailabilityError(ValueError):
    """An availability trace that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True, slots=True)
class AvailabilityTrace:
    """Spot capacity over time, in instances, one count per tick of `gap_seconds`."""

    name: str
    gap_seconds: int
    counts: tuple[int, ...]
    # The Spot price per hour at each tick, when the file has one (SkyPilot's preemption traces);
    # kept for the record: the benchmarks' cost model prices Spot at 1 and On-Demand at a ratio.
    prices: tuple[float, ...] | None = None

    @property
    def gap_hours(self) -> float:
        return self.gap_seconds / 3600.0

    @property
    def hours(self) -> float:
        """How long the trace covers."""
        return len(self.counts) * self.gap_hours

    def capacity_at(self, hour: float) -> int:
        """Instances obtainable at `hour` from the trace start (piecewise constant over each tick)."""
        if hour < 0 or hour >= self.hours:
            raise AvailabilityError(
                f"{self.name}: hour {hour:g} is outside the trace (0 to {self.hours:g} h)"
            )
        return self.counts[int(hour * 3600 // self.gap_seconds)]

    def available_share(self) -> float:
        """Share of ticks with at least one instance."""
        return sum(1 for n in self.counts if n > 0) / len(self.counts)


def parse_availability(text: str, name: str) -> AvailabilityTrace:
    """Validate a trace's JSON text; `name` labels the errors (usually the file's path)."""
    try:
        document = json.loads(text, parse_constant=_refuse_constant)
    except json.JSONDecodeError as error:
        raise AvailabilityError(f"{name}: not JSON ({error})") from None
    except _NonFinite as error:
        raise AvailabilityError(f"{name}: {error.args[0]} is not a number JSON allows") from None
    if not isinstance(document, dict):
        raise AvailabilityError(f"{name}: expected a JSON object with 'metadata' and 'data'")
    unknown = sorted(set(document) - {"metadata", "data", "prices"})
    if unknown:
        raise AvailabilityError(
            f"{name}: unknown key(s) {', '.join(unknown)} (expected 'metadata', 'data' and,"
            " optionally, 'prices')"
        )
    metadata = document.get("metadata")
    if not isinstance(metadata, dict):
        raise AvailabilityError(f"{name}: 'metadata' missing or not an object")
    gap = metadata.get("gap_seconds")
    if not _whole(gap) or gap <= 0:
        raise AvailabilityError(f"{name}: metadata.gap_seconds must be a positive whole number, got {gap!r}")
    data = document.get("data")
    if not isinstance(data, list) or not data:
        raise AvailabilityError(f"{name}: 'data' missing, not a list, or empty")
    counts: list[int] = []
    for index, value in enumerate(data):
        if not _whole(value) or value < 0:
            raise AvailabilityError(
                f"{name}: data[{index}] must be a whole number of instances >= 0, got {value!r}"
            )
        counts.append(int(value))
    prices = _prices(document["prices"], len(counts), name) if "prices" in document else None
    return AvailabilityTrace(name=name, gap_seconds=int(gap), counts=tuple(counts), prices=prices)


def _prices(raw: object, ticks: int, name: str) -> tuple[float, ...]:
    """A preemption trace's `prices`: one finite Spot price >= 0 per tick of `data`."""
    if not isinstance(raw, list) or len(raw) != ticks:
        got = f"{len(raw)} entries" if isinstance(raw, list) else type(raw).__name__
        raise AvailabilityError(
            f"{name}: 'prices' must be a list of one price per tick of 'data' ({ticks}), got {got}"
        )
    prices: list[float] = []
    for index, value in enumerate(raw):
        fault = f"{name}: prices[{index}] must be a finite price >= 0, got {value!r}"
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise AvailabilityError(fault)
        if not 0 <= value < math.inf:
            raise AvailabilityError(fault)
        prices.append(float(value))
    return tuple(prices)


class _NonFinite(ValueError):
    pass


def _refuse_constant(constant: str) -> object:
    # Python's json reads NaN, Infinity and -Infinity, which JSON itself does not allow.
    raise _NonFinite(constant)


def _whole(value: object) -> TypeGuard[int | float]:
    """A finite whole number (a JSON integer, or a float such as 600.0); never a bool."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return isinstance(value, int) or (math.isfinite(value) and value == int(value))


def load_availability(path: Path | str) -> AvailabilityTrace:
    """Read and validate a trace file (a clear AvailabilityError for a missing or bad file)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise AvailabilityError(f"{path}: no such availability trace") from None
    except (OSError, UnicodeDecodeError) as error:
        raise AvailabilityError(f"{path}: cannot read ({error})") from None
    return parse_availability(text, str(path))


def _shipped_root() -> Traversable:
    return resources.files("spotline.sim").joinpath("data", "availability")


def shipped_traces() -> list[str]:
    """The names of the traces the repository ships (file names without `.json`), sorted."""
    root = _shipped_root()
    return sorted(p.name[: -len(".json")] for p in root.iterdir() if p.name.endswith(".json"))


def load_shipped(name: str) -> AvailabilityTrace:
    """One of the shipped traces, by name (with or without `.json`)."""
    stem = name[: -len(".json")] if name.endswith(".json") else name
    known = shipped_traces()
    if stem not in known:
        raise AvailabilityError(f"no shipped availability trace {name!r} (one of {', '.join(known)})")
    text = _shipped_root().joinpath(f"{stem}.json").read_text(encoding="utf-8")
    return parse_availability(text, stem)
