"""forecast-model-2: a validated combination of Theta-family forecasts only (ThetaCombination)."""

from __future__ import annotations

from collections.abc import Sequence

from app.compute.forecast.combination import (
    STRENGTH_GATE,
    WEIGHT_POWER,
    SeasonTableCombination,
)
from app.compute.forecast.seasons import MODEL_2_SEASONS, Season, SeasonRules


class ThetaCombination(SeasonTableCombination):
    """forecast-model-2: Theta-family forecasts, pure numpy/scipy (no statsmodels).

    Pool: the Theta method (SES + half the linear-trend slope as drift) on the last 5 cycles (>= 60 points),
    seasonally adjusted by classical decomposition when the 90% ACF test says seasonal (``level_pool``); with
    a season longer than 12 points (hourly, weekly data) the optimised Theta method on the last 3 cycles
    (``three_cycle_pool``); for strongly seasonal series (seasonal strength of the shortest period >= ``gate``
    over its last 10 cycles) seasonal-position Theta (``seasonal_pool``: every position of the cycle smoothed
    across cycles by SES with one shared alpha, plus the Theta drift of the cycle means). The one member with
    the lowest sMAPE at the rolling origins answers, or on quarterly and monthly data every member, weighted
    by their errors as in model-1 (``seasons``). Intervals as model-1's. History cap: 2000.
    """

    id = "forecast-model-2"
    description = ("Lightweight, low-latency trend-aware model: Theta method (seasonal-position on strongly "
                   "seasonal data).")

    def __init__(self, max_history: int = 2000, n_origins: int = 6, min_step: int = 8,
                 calibration: tuple[float, float] = (1.0, 0.1), level_pool: Sequence[str] = ("theta_sa5",),
                 three_cycle_pool: Sequence[str] = ("otm_sa3",), seasonal_pool: Sequence[str] = ("ptheta_s",),
                 seasons: dict[Season, SeasonRules] = MODEL_2_SEASONS, weight_power: float = WEIGHT_POWER,
                 gate: float = STRENGTH_GATE) -> None:
        super().__init__(max_history=max_history, n_origins=n_origins, calibration=calibration, min_step=min_step,
                         level_pool=level_pool, three_cycle_pool=three_cycle_pool, seasonal_pool=seasonal_pool,
                         seasons=seasons, weight_power=weight_power, gate=gate)
