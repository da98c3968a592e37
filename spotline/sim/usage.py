"""Decayed GPU usage per team: the fair-share input (Slurm's PriorityDecayHalfLife).

Usage accrues at the GPUs a team holds and decays exponentially with the half-life; each team is
advanced lazily (only when it changes or is read), exactly: u(t) = u0 e^(-k dt) + r (1 - e^(-k dt)) / k.
"""

from __future__ import annotations

import math


class DecayedUsage:
    def __init__(self, half_life_s: float) -> None:
        self._k = math.log(2.0) / half_life_s
        self._value: dict[str, float] = {}
        self._rate: dict[str, float] = {}
        self._at: dict[str, float] = {}

    def _advance(self, team: str, now: float) -> float:
        value = self._value.get(team, 0.0)
        dt = now - self._at.get(team, now)
        if dt > 0.0:
            decay = math.exp(-self._k * dt)
            value = value * decay + self._rate.get(team, 0.0) * (1.0 - decay) / self._k
        self._value[team] = value
        self._at[team] = now
        return value

    def change(self, team: str, gpus: float, now: float) -> None:
        """`team` holds `gpus` more (or fewer, when negative) GPUs from `now` on."""
        self._advance(team, now)
        self._rate[team] = self._rate.get(team, 0.0) + gpus

    def gpu_hours(self, now: float) -> dict[str, float]:
        """Every team's decayed usage at `now`, in GPU-hours."""
        return {team: self._advance(team, now) / 3600.0 for team in list(self._value)}
