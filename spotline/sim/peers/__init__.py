"""The peers' policies, implemented from their documentation (sources and versions in each
class), one module per peer; what they share is `base.PeerPolicy` (its docstring says how every
peer stops victims and places jobs)."""

from spotline.sim.peers.base import CRITICAL_RANK, PeerPolicy
from spotline.sim.peers.batch_fair_share import BatchFairSharePolicy
from spotline.sim.peers.fifo import FifoPolicy
from spotline.sim.peers.kueue import KUEUE_DEFAULT, KUEUE_SETUPS, KueuePolicy, KueueSetup
from spotline.sim.peers.priority_random import PriorityRandomPolicy
from spotline.sim.peers.slurm import (
    ESTIMATE_MODELS,
    TIME_LIMIT_LADDER_H,
    EstimateModel,
    SlurmPolicy,
    estimate_model,
)
from spotline.sim.peers.spot_peers import (
    FALLBACK_AFTER_S,
    AllOnDemandPolicy,
    BatchSpotFirstPolicy,
    EarliestDeadlinePolicy,
    SkyPilotPolicy,
    UniformProgressPolicy,
)

__all__ = [
    "CRITICAL_RANK",
    "ESTIMATE_MODELS",
    "FALLBACK_AFTER_S",
    "KUEUE_DEFAULT",
    "KUEUE_SETUPS",
    "TIME_LIMIT_LADDER_H",
    "AllOnDemandPolicy",
    "BatchFairSharePolicy",
    "BatchSpotFirstPolicy",
    "EarliestDeadlinePolicy",
    "EstimateModel",
    "FifoPolicy",
    "KueuePolicy",
    "KueueSetup",
    "PeerPolicy",
    "PriorityRandomPolicy",
    "SkyPilotPolicy",
    "SlurmPolicy",
    "UniformProgressPolicy",
    "estimate_model",
]
