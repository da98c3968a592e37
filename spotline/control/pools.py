"""`GET /pools`: each pool's capacity, its free GPUs, its nodes, its Spot state and, for a
reserved pool, its reservation window.

Free GPUs are the scheduler's own figure: the pool's capacity less what the jobs holding GPUs
hold (`build_snapshot`, as a pass and `explain` compute it), beside the ledger's counter. Nodes
come from the deployment's `NodeSource` (the local fleet; on AWS the ECS container instances
behind each pool's compute environments). A caller sees
every pool's totals, and the ids of its own team's jobs only.
"""

from __future__ import annotations

import logging
from collections import Counter as Tally
from typing import Any

from spotline.control.lifecycle import iso
from spotline.control.plane import ControlPlane
from spotline.control.ports import NODE_STATES, NodeView
from spotline.control.records import pool_key
from spotline.control.scheduling import build_snapshot
from spotline.domain.models import ReservedWindow, SpotPoolSignal

logger = logging.getLogger(__name__)


def spot_state(signal: SpotPoolSignal | None) -> dict[str, Any]:
    """A Spot pool's state in words: `there`, `at risk` or `missing`, with its history."""
    if signal is None:
        return {"state": "there", "note": "no Spot signal seen yet", "missing_for_s": 0.0}
    state = "missing" if not signal.available else "at risk" if signal.at_risk else "there"
    observed = signal.observed_s
    return {
        "state": state,
        "missing_for_s": round(signal.outage_s, 1),
        "availability": round(signal.available_s / observed, 4) if observed > 0 else None,
        "observed_s": round(observed, 1),
        "outages": len(signal.outages_s),
    }


def reservation_state(window: ReservedWindow | None, now: float) -> dict[str, Any] | None:
    """A reserved pool's window (an EC2 Capacity Block or an ODCR): when, and where now is in it."""
    if window is None:
        return None
    state = "before" if now < window.start else "active" if now < window.end else "ended"
    return {**reservation_json(window), "state": state, "ends_in_s": round(max(0.0, window.end - now), 1)}


def node_json(node: NodeView) -> dict[str, Any]:
    return {
        "instance_id": node.instance_id,
        "state": node.state,
        "gpus": node.gpus,
        "used_gpus": node.used_gpus,
        "since": None if node.since is None else iso(node.since),
        "until": None if node.until is None else iso(node.until),
    }


def reservation_json(window: ReservedWindow) -> dict[str, Any]:
    return {
        "reservation_id": window.reservation_id,
        "start": iso(window.start),
        "end": iso(window.end),
        "start_at": window.start,
        "end_at": window.end,
    }


def pools_view(cp: ControlPlane, team: str) -> dict[str, Any]:
    """Every configured pool: capacity, GPUs used and free, the ledger's count, its nodes by
    state, its Spot state, and the caller's jobs in it."""
    now = cp.clock()
    active = cp.jobs.active()
    snapshot = build_snapshot(cp, active, now)
    names = [p.name for p in cp.config.pools]
    counters = cp.ledger.counters(names, ())
    nodes, nodes_error = None, None
    if cp.nodes is not None:
        try:
            nodes = cp.nodes.nodes(now)
        except Exception as error:  # the pools' totals still answer; the nodes say why they do not
            logger.warning("pool nodes not read", extra={"why": str(error)})
            nodes_error = f"the nodes could not be read: {type(error).__name__}"
    pools = []
    for pool in cp.config.pools:
        mine = sorted(r.id for r in active if r.team == team and r.job.pool == pool.name and r.gpus_held > 0)
        counter = counters.get(pool_key(pool.name))
        entry: dict[str, Any] = {
            "name": pool.name,
            "gpu_type": pool.gpu_type,
            "purchase": pool.purchase.value,
            "capacity_gpus": pool.capacity_gpus,
            "gpus_per_node": pool.gpus_per_node,
            "used_gpus": snapshot.used_gpus(pool.name),
            "free_gpus": snapshot.free_gpus(pool.name),
            "ledger_used_gpus": None if counter is None else counter.used,
            "price": pool.price,
            "spot": spot_state(snapshot.spot.get(pool.name)) if pool.is_spot else None,
            "team_jobs": mine,
            "instance_types": list(pool.instance_types),
            # A reserved pool's window (a Capacity Block or an ODCR group), None for the others.
            "reservation": reservation_state(pool.reservation, now),
        }
        if nodes is None:
            entry["nodes"] = None
            entry["node_counts"] = None
        else:
            own = [n for n in nodes if n.pool == pool.name]
            tally = Tally(n.state for n in own)
            entry["nodes"] = [node_json(n) for n in own]
            entry["node_counts"] = {state: tally.get(state, 0) for state in NODE_STATES}
        pools.append(entry)
    found = {"at": iso(now), "t": now, "nodes_reported": nodes is not None, "pools": pools}
    if nodes_error is not None:
        found["nodes_error"] = nodes_error
    return found
