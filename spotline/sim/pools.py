"""The simulated cluster: one Spot and one On-Demand pool of one GPU instance type.

Prices and interruption rates come from the AWS Spot Instance Advisor (shared/spot/README.md):
a Spot GPU-hour costs `1 - savings` On-Demand GPU-hours, and an advisor band's midpoint p (the
share of instances reclaimed in a month) gives lambda = -ln(1 - p) / 720 reclaims per
instance-hour. The open band (>20%) is taken at 25%.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from spotline.domain.models import Pool, Purchase

DEFAULT_INSTANCE = "p4d.24xlarge"
DEFAULT_REGION = "us-east-1"
DEFAULT_GPU_TYPE = "a100"
GPUS_PER_NODE = 8
HOURS_PER_MONTH = 720.0

# Advisor bands `<5%, 5-10%, 10-15%, 15-20%, >20%` (index `r` of the feed) and the monthly
# reclaim share each stands for: its midpoint.
BANDS: tuple[tuple[str, float], ...] = (
    ("<5%", 0.025),
    ("5-10%", 0.075),
    ("10-15%", 0.125),
    ("15-20%", 0.175),
    (">20%", 0.25),
)

# The advisor's figures for the default instance, so the simulator runs without the data file
# (shared/spot/gpu-spot-advisor.json, snapshot 2025-06-28: us-east-1 p4d.24xlarge s=67, r=2).
_BUILTIN: dict[tuple[str, str], tuple[float, int]] = {(DEFAULT_REGION, DEFAULT_INSTANCE): (0.67, 2)}

# The repository's copy of shared/spot/gpu-spot-advisor.json (data/README.md: its provenance).
DEFAULT_ADVISOR_FILE = Path(__file__).resolve().parent / "data" / "gpu-spot-advisor.json"


@dataclass(frozen=True)
class SpotAdvice:
    """What the Spot Instance Advisor says about one instance type in one region."""

    region: str
    instance_type: str
    savings: float
    band: str
    monthly_interruption: float

    @property
    def interruptions_per_instance_hour(self) -> float:
        return -math.log(1.0 - self.monthly_interruption) / HOURS_PER_MONTH

    @property
    def spot_price(self) -> float:
        """A Spot GPU-hour in On-Demand GPU-hours."""
        return 1.0 - self.savings


def spot_advice(
    region: str = DEFAULT_REGION, instance_type: str = DEFAULT_INSTANCE, advisor_file: Path | None = None
) -> SpotAdvice:
    """The advice for `instance_type` in `region`, from the advisor file (the default file when
    it exists) or the built-in figures for the default instance."""
    path = advisor_file if advisor_file is not None else DEFAULT_ADVISOR_FILE
    if path.exists():
        data = json.loads(path.read_text())
        try:
            entry = data["spot_advisor"][region][instance_type]
        except KeyError:
            raise ValueError(f"the Spot advisor file {path} has no {instance_type} in {region}") from None
        savings, band = float(entry["s"]) / 100.0, int(entry["r"])
    elif advisor_file is None and (region, instance_type) in _BUILTIN:
        savings, band = _BUILTIN[(region, instance_type)]
    else:
        raise ValueError(f"no Spot advisor data for {instance_type} in {region} (pass --spot-data)")
    label, share = BANDS[band]
    return SpotAdvice(region, instance_type, savings, label, share)


def build_pools(
    total_gpus: int,
    spot_fraction: float,
    advice: SpotAdvice,
    gpus_per_node: int = GPUS_PER_NODE,
    gpu_type: str = DEFAULT_GPU_TYPE,
) -> list[Pool]:
    """A Spot pool with `spot_fraction` of the GPUs (rounded to whole instances) and an
    On-Demand pool with the rest; a pool with no GPUs is left out."""
    check_cluster(total_gpus, spot_fraction)
    spot_gpus = min(total_gpus, round(total_gpus * spot_fraction / gpus_per_node) * gpus_per_node)
    pools = [
        Pool(
            name=f"{advice.instance_type}-spot",
            gpu_type=gpu_type,
            purchase=Purchase.SPOT,
            capacity_gpus=spot_gpus,
            gpus_per_node=gpus_per_node,
            price=advice.spot_price,
            interruption_rate_per_hour=advice.interruptions_per_instance_hour,
        ),
        on_demand_pool(advice, total_gpus - spot_gpus, gpus_per_node, gpu_type),
    ]
    return [p for p in pools if p.capacity_gpus > 0]


def check_cluster(total_gpus: int, spot_fraction: float) -> None:
    """Refuse a cluster without GPUs or a Spot share outside [0, 1]."""
    if total_gpus <= 0:
        raise ValueError("the cluster needs at least one GPU")
    if not 0.0 <= spot_fraction <= 1.0:
        raise ValueError(f"spot fraction must be in [0, 1], got {spot_fraction}")


def on_demand_pool(advice: SpotAdvice, capacity_gpus: int, gpus_per_node: int, gpu_type: str) -> Pool:
    """The cluster's On-Demand pool of `advice`'s instance type (at the On-Demand price, 1)."""
    return Pool(
        name=f"{advice.instance_type}-on-demand",
        gpu_type=gpu_type,
        purchase=Purchase.ON_DEMAND,
        capacity_gpus=capacity_gpus,
        gpus_per_node=gpus_per_node,
    )
