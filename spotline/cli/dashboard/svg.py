"""The dashboard's charts, drawn on the server as SVG (no script, no vendored library): a job's
timeline and a team's GPU-hours over the month. Every mark has a <title>, so a hover names it
and the browser tests can find it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from markupsafe import Markup, escape

W, H, LEFT, RIGHT, TOP, BOTTOM = 760, 210, 120, 16, 14, 26

# The timeline's lanes, top to bottom, and the states drawn in each.
LANES = (
    ("queued", ("PENDING",)),
    ("starting", ("ADMITTED",)),
    ("running", ("RUNNING",)),
    ("checkpointing", ("CHECKPOINTING",)),
    ("stopped", ("PREEMPTED", "INTERRUPTED")),
    ("finished", ("SUCCEEDED", "FAILED", "CANCELLED")),
)
LANE_OF = {state: i for i, (_, states) in enumerate(LANES) for state in states}
COLOURS = {
    "PENDING": "#9aa5b1",
    "ADMITTED": "#7fb3d5",
    "RUNNING": "#2e86c1",
    "CHECKPOINTING": "#f5b041",
    "PREEMPTED": "#cb4335",
    "INTERRUPTED": "#e67e22",
    "SUCCEEDED": "#27ae60",
    "FAILED": "#922b21",
    "CANCELLED": "#566573",
}


# The kinds of timeline entries drawn as markers; any other kind is a plain change of state.
MARKED_KINDS = frozenset({"preemption", "move", "spot-warning", "host-loss", "requeue", "checkpoint"})


def kind_of(event: Mapping[str, Any]) -> str:
    """What a timeline entry records, as the control plane stamped it on the entry (its `kind`):
    one of `MARKED_KINDS`, or "state"."""
    kind = str(event.get("kind") or "")
    return kind if kind in MARKED_KINDS else "state"


def _hhmm(t: float, span: float) -> str:
    fmt = "%H:%M:%S" if span < 3 * 3600 else ("%H:%M" if span < 2 * 86400 else "%d %b")
    return datetime.fromtimestamp(t, UTC).strftime(fmt)


def _x(t: float, t0: float, t1: float) -> float:
    return LEFT + (W - LEFT - RIGHT) * (t - t0) / max(t1 - t0, 1e-9)


def _axis(t0: float, t1: float, bottom: float) -> list[str]:
    out = []
    for i in range(5):
        t = t0 + (t1 - t0) * i / 4
        x = _x(t, t0, t1)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP}" y2="{bottom}" class="grid"/>')
        anchor = "start" if i == 0 else ("end" if i == 4 else "middle")
        out.append(
            f'<text x="{x:.1f}" y="{bottom + 16}" text-anchor="{anchor}" class="tick">'
            f"{_hhmm(t, t1 - t0)}</text>"
        )
    return out


def timeline(
    events: Sequence[Mapping[str, Any]],
    now: float,
    *,
    deadline: float | None = None,
    checkpoints: Sequence[tuple[float, int | None]] = (),
) -> Markup:
    """The job's states as bars in lanes, each preemption, Spot warning, requeue and checkpoint as
    a marker, and its deadline as a line (when it has one)."""
    if not events:
        return Markup('<p class="muted">No timeline yet.</p>')
    t0 = float(events[0]["t"])
    last = events[-1]
    t1 = (
        float(last["t"]) if last.get("to") in LANE_OF and LANES[LANE_OF[last["to"]]][0] == "finished" else now
    )
    if deadline is not None and deadline > t1:
        t1 = deadline
    t1 = max(t1, t0 + 1.0)
    lane_h = (H - TOP - BOTTOM) / len(LANES)
    out = [
        f'<svg class="chart timeline" viewBox="0 0 {W} {H}" role="img" aria-label="job timeline"'
        ' xmlns="http://www.w3.org/2000/svg">'
    ]
    for i, (name, _) in enumerate(LANES):
        y = TOP + i * lane_h + lane_h / 2
        out.append(f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end" class="lane">{name}</text>')
    out += _axis(t0, t1, H - BOTTOM)
    for i, event in enumerate(events):
        state = str(event.get("to"))
        start = float(event["t"])
        end = (
            float(events[i + 1]["t"]) if i + 1 < len(events) else (start if LANE_OF.get(state) == 5 else now)
        )
        lane = LANE_OF.get(state, 0)
        x0, x1 = _x(start, t0, t1), _x(max(end, start), t0, t1)
        y = TOP + lane * lane_h + 3
        label = escape(f"{event.get('at', '')} {state}: {event.get('reason', '')}")
        out.append(
            f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(x1 - x0, 3):.1f}" height="{lane_h - 6:.1f}"'
            f' fill="{COLOURS.get(state, "#888")}" class="bar" data-state="{escape(state)}">'
            f"<title>{label}</title></rect>"
        )
        kind = kind_of(event)
        if kind != "state":
            out.append(_marker(x0, kind, label))
    for at, step in checkpoints:
        if t0 <= at <= t1:
            x = _x(at, t0, t1)
            out.append(
                f'<path d="M{x:.1f} {H - BOTTOM - 2} l-4 -7 h8 z" class="marker checkpoint"'
                f' data-kind="checkpoint"><title>checkpoint at step {step}</title></path>'
            )
    if deadline is not None:
        x = _x(deadline, t0, t1)
        out.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP - 6}" y2="{H - BOTTOM}" class="deadline"'
            f' data-kind="deadline"><title>deadline {_hhmm(deadline, 0)} UTC</title></line>'
        )
    out.append("</svg>")
    return Markup("".join(out))


def _marker(x: float, kind: str, label: str) -> str:
    shape = {"preemption": "M{x} 4 l6 8 h-12 z", "spot-warning": "M{x} 2 l6 6 l-6 6 l-6 -6 z"}.get(
        kind, "M{x} 4 m-5 0 a5 5 0 1 0 10 0 a5 5 0 1 0 -10 0"
    )
    return (
        f'<path d="{shape.format(x=f"{x:.1f}")}" class="marker {kind}" data-kind="{kind}">'
        f"<title>{kind}: {label}</title></path>"
    )


def usage_chart(
    series: Sequence[tuple[float, float]],
    start: float,
    end: float,
    *,
    quota_gpu_hours: float | None = None,
    budget_usd: float | None = None,
    dollars_per_gpu_hour: float | None = None,
    projected_gpu_hours: float | None = None,
) -> Markup:
    """Cumulative GPU-hours from `start` to `end` (the month), as a line up to its last point
    (now), then dashed to `projected_gpu_hours` at `end` when given (the pace so far), against
    the team's quota (GPU-hours) and its budget (in GPU-hours at the month's average price),
    when known."""
    top = max([v for _, v in series] + [projected_gpu_hours or 0.0, 1e-6])
    budget_gh = budget_usd / dollars_per_gpu_hour if budget_usd and dollars_per_gpu_hour else None
    for limit in (quota_gpu_hours, budget_gh):
        if limit:
            top = max(top, limit)
    top *= 1.1
    bottom = H - BOTTOM

    def y(v: float) -> float:
        return bottom - (bottom - TOP) * v / top

    out = [
        f'<svg class="chart usage" viewBox="0 0 {W} {H}" role="img" aria-label="GPU-hours this month"'
        ' xmlns="http://www.w3.org/2000/svg">'
    ]
    out += _axis(start, end, bottom)
    for frac in (0.0, 0.5, 1.0):
        v = top / 1.1 * frac
        out.append(f'<text x="{LEFT - 8}" y="{y(v) + 4:.1f}" text-anchor="end" class="tick">{v:.3g}</text>')
    points = " ".join(f"{_x(t, start, end):.1f},{y(v):.1f}" for t, v in series)
    out.append(f'<polyline points="{points}" class="line"><title>GPU-hours used</title></polyline>')
    if series and series[-1][0] < end:
        now_t, now_v = series[-1]
        x_now = _x(now_t, start, end)
        out.append(
            f'<line x1="{x_now:.1f}" x2="{x_now:.1f}" y1="{TOP}" y2="{bottom}" class="now">'
            f"<title>now: {_hhmm(now_t, 0)} UTC</title></line>"
        )
        if projected_gpu_hours is not None:
            out.append(
                f'<line x1="{x_now:.1f}" y1="{y(now_v):.1f}" x2="{_x(end, start, end):.1f}"'
                f' y2="{y(projected_gpu_hours):.1f}" class="line projected">'
                f"<title>at this pace: {projected_gpu_hours:.3g} GPU-hours by month end</title></line>"
            )
    for limit, name in ((quota_gpu_hours, "quota"), (budget_gh, "budget")):
        if limit:
            out.append(
                f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y(limit):.1f}" y2="{y(limit):.1f}"'
                f' class="limit {name}"><title>{name}: {limit:.3g} GPU-hours</title></line>'
            )
    out.append(f'<text x="{LEFT - 8}" y="{TOP + 4}" text-anchor="end" class="lane">GPU-h</text>')
    out.append("</svg>")
    return Markup("".join(out))
