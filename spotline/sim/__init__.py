"""The trace simulator: a discrete-event replay of a trace through Spotline's production
scheduling core and four peer policies, on the same cluster, jobs and Spot reclaims."""

from spotline.sim.engine import PreemptionCycle, Simulation
from spotline.sim.model import SimSettings
from spotline.sim.runner import (
    DEFAULT_GPUS,
    DEFAULT_SPOT_FRACTION,
    POLICIES,
    PREEMPTING_PEERS,
    PolicyRun,
    SimulationReport,
    simulate,
)

__all__ = [
    "DEFAULT_GPUS",
    "DEFAULT_SPOT_FRACTION",
    "POLICIES",
    "PREEMPTING_PEERS",
    "PolicyRun",
    "PreemptionCycle",
    "SimSettings",
    "Simulation",
    "SimulationReport",
    "simulate",
]
