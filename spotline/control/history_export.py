"""`GET /admin/history`: the deployment's own history, for `spotline history export` (admins only).

One page of the jobs submitted in `[since, now]`, every team's, each with what the simulator's
canonical trace needs (arrival, size, declared and actual run time, priority, team, deadline,
checkpoint interval and measured write time) and what it went through (preemptions,
interruptions, lost work, its end); and, on every page, the cluster: the pools, the teams' quotas,
the scheduler settings in effect and what the control plane observed of each Spot pool.

Reads: each team's jobs through the `team` index (newest submission first), page by page, until a
job submitted before `since`: a query over a time-ordered index, off the scheduling path (an admin
read, paginated; nothing here runs in a pass). The Spot pools' observations are one BatchGetItem.

Names and commands leave only as SHA-256 digests unless `include_names`: a site's job names and
command lines can carry personal data; the digests still tell equal names apart.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from spotline.control.errors import InvalidPageToken, InvalidRequest, Unauthorized
from spotline.control.jobs import identity_candidates
from spotline.control.plane import ControlPlane
from spotline.control.records import JobRecord
from spotline.control.settings import principal_key

# Jobs of one page at most (each is one index item, read whole).
MAX_PAGE = 500


def parse_since(text: str) -> float:
    """`since` (ISO-8601 with a zone) as seconds since the epoch (InvalidRequest naming it)."""
    from datetime import datetime

    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise InvalidRequest(
            [
                {
                    "loc": ["query", "since"],
                    "msg": "expected an ISO-8601 time with a zone",
                    "type": "value_error",
                }
            ]
        )
    return moment.timestamp()


def require_admin(cp: ControlPlane, identity: Mapping[str, Any] | None) -> str:
    """The admin principal the caller is (Unauthorized when it is none of `admins`)."""
    admins = {principal_key(arn) for arn in cp.config.admins}
    for candidate in identity_candidates(identity or {}):
        if principal_key(candidate) in admins:
            return candidate
    raise Unauthorized("the deployment's history is for its admins (the `admins` setting)")


def digest(text: str) -> str:
    """What a name or command leaves as without `include_names`."""
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


def job_row(record: JobRecord, include_names: bool) -> dict[str, Any]:
    """One job as the export carries it (seconds since the epoch; None where unknown)."""
    job, spec = record.job, record.job.spec
    command = json.dumps(list(spec.command))
    ran = job.runtime_s
    if job.started_at is not None and record.finished_at is not None:
        ran += max(0.0, record.finished_at - job.started_at)
    return {
        "job_id": job.id,
        "name": spec.name if include_names else digest(spec.name),
        "command": list(spec.command) if include_names else digest(command),
        "team": job.team,
        "priority": spec.priority.value,
        "gpus": spec.gpus,
        "nodes": spec.nodes,
        "gpu_type": spec.gpu_type,
        "spot": spec.spot.value,
        "submitted_at": job.submitted_at,
        "deadline_at": spec.deadline_at,
        "expected_runtime_s": spec.expected_runtime_s,
        "checkpoint_interval_s": spec.checkpoint_interval_s,
        "checkpoint_write_s": job.checkpoint_write_s,
        "state": job.state.value,
        "pool": job.pool,
        "finished_at": record.finished_at,
        "run_s": ran,
        "preemptions": job.preemptions,
        "interruptions": job.interruptions,
        "lost_work_s": job.lost_work_s,
        "lost_gpu_s": record.lost_gpu_s,
    }


def cluster(cp: ControlPlane, now: float) -> dict[str, Any]:
    """The pools, the teams, the settings in effect and each Spot pool's observations."""
    config = cp.config
    pools = [
        {
            "name": p.name,
            "gpu_type": p.gpu_type,
            "purchase": p.purchase.value,
            "capacity_gpus": p.capacity_gpus,
            "gpus_per_node": p.gpus_per_node,
            "price": p.price,
            "interruption_rate_per_hour": p.interruption_rate_per_hour,
        }
        for p in config.pools
    ]
    spot = [p.name for p in config.pools if p.is_spot]
    signals = cp.spot_pools.signals(spot, now) if cp.spot_pools is not None and spot else {}
    return {
        "now": now,
        "pools": pools,
        "teams": [{"team": t.team, "nominal_gpus": t.nominal_gpus, "weight": t.weight} for t in config.teams],
        "scheduler": config.scheduler.model_dump(mode="json", exclude_defaults=True),
        # What a replay needs of the deployment besides the settings.
        "deployment": {
            "spot_notice_s": config.spot_notice_s,
            "grace_period_s": config.grace_period_s,
            "spot_missing_after_s": config.spot_missing_after_s,
        },
        "spot": {name: s.model_dump(mode="json") for name, s in signals.items()},
    }


def export_page(
    cp: ControlPlane,
    identity: Mapping[str, Any] | None,
    *,
    since: float,
    include_names: bool = False,
    limit: int = 200,
    next_token: str | None = None,
) -> dict[str, Any]:
    """One page of the history (module docstring), with the token of the next (None: the last)."""
    require_admin(cp, identity)
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidRequest(
            [{"loc": ["query", "limit"], "msg": f"must be 1 to {MAX_PAGE}", "type": "value_error"}]
        )
    now = cp.clock()
    if since >= now:
        raise InvalidRequest(
            [{"loc": ["query", "since"], "msg": "must be in the past", "type": "value_error"}]
        )
    binding = {"route": "admin-history", "since": since, "names": include_names, "limit": limit}
    try:
        opened = cp.pages.open(next_token, binding, now=now)
    except InvalidPageToken as error:
        raise InvalidRequest(
            [{"loc": ["query", "next_token"], "msg": str(error), "type": "value_error"}]
        ) from error
    teams = sorted({t.team for t in cp.config.teams} | set(cp.config.identities.values()))
    team_index, position = 0, None
    if opened is not None:
        state = json.loads(opened)
        team_index, position = int(state["t"]), state["p"]
    rows: list[dict[str, Any]] = []
    following: str | None = None
    while team_index < len(teams) and len(rows) < limit:
        records, after = cp.jobs.list_team(teams[team_index], limit=limit - len(rows), next_token=position)
        older = False
        for record in records:
            if record.job.submitted_at < since:
                older = True  # newest first: the rest of the team's jobs are older still
                break
            rows.append(job_row(record, include_names))
        if older or after is None:
            team_index, position = team_index + 1, None
        else:
            position = after
    if team_index < len(teams):
        following = json.dumps({"t": team_index, "p": position})
    return {
        "since": since,
        "until": now,
        "jobs": rows,
        "cluster": cluster(cp, now),
        "next_token": cp.pages.seal(following, binding, now=now),
    }
