"""forecast-model-4: spikes replaced, then a small validated combination judged on the raw history
(SpikeRobustCombination)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

import numpy as np

from app.compute.forecast.base import Fitted
from app.compute.forecast.combination import (
    STRENGTH_GATE,
    WEIGHT_POWER,
    SeasonTableCombination,
)
from app.compute.forecast.frequency import SHORT_YEARLY_WINDOWS
from app.compute.forecast.robust import SPIKE_SIGMAS, clean_spikes
from app.compute.forecast.seasons import MODEL_4_SEASONS, Season, SeasonRules
from app.compute.forecast.template import Combination, History

# The optimised Theta method in place of standard Theta, as in model-1: better on 7 of the 8 sets (forecast-rules.md).
LEVEL_POOL = ("otm_sa5", "damped_sa5", "ses_sa5")
SEASONAL_POOL = ("ptheta_s", "pses_s", "wprof_l", "plevel")


class SpikeRobustCombination(SeasonTableCombination):
    """forecast-model-4: spike-robust forecaster with empirical rolling-origin intervals.

    Spikes are replaced before fitting (robust.clean_spikes: the newest point judged against a projection of
    the points before it, as for every model, then a Hampel rule: points more than ``threshold`` robust sigmas
    from a robust baseline of median seasonal profiles + running median). On the cleaned
    series, a small pool (``level_pool``: optimised Theta, damped trend, SES on the seasonally adjusted recent
    history; for strongly seasonal series also ``seasonal_pool``: seasonal-position Theta / SES, the weekly
    profile and the additive profiles) is ranked by sMAPE against the *raw* history at rolling origins (4-step
    windows on yearly data, ``evaluation_horizons``; app.compute.forecast.frequency otherwise), and the
    season's ``keep`` best (``seasons``: 2, every member on monthly data) are averaged with model-1's weights.
    Intervals are empirical quantiles of those raw errors, so spikes in the history widen them, as model-1's
    otherwise. Symmetric quantiles of |error| by default: signed (asymmetric) quantiles were measured less well
    calibrated on M4 training data (``asymmetric=True`` keeps the option). Median and bounds are clipped at
    zero when the history never goes below zero. History cap: 3000 points.
    """

    id = "forecast-model-4"
    description = ("High-variance ops metrics: spike-robust forecast, empirical rolling-origin intervals, "
                   "never negative for non-negative data.")

    def __init__(self, max_history: int = 3000, n_origins: int = 8, min_step: int = 8,
                 calibration: tuple[float, float] = (1.05, 0.1), level_pool: Sequence[str] = LEVEL_POOL,
                 seasonal_pool: Sequence[str] = SEASONAL_POOL, seasons: dict[Season, SeasonRules] = MODEL_4_SEASONS,
                 weight_power: float = WEIGHT_POWER, gate: float = STRENGTH_GATE, threshold: float = SPIKE_SIGMAS,
                 asymmetric: bool = False,
                 evaluation_horizons: Mapping[str, int] | None = SHORT_YEARLY_WINDOWS) -> None:
        super().__init__(max_history=max_history, n_origins=n_origins, calibration=calibration, min_step=min_step,
                         level_pool=level_pool, seasonal_pool=seasonal_pool, seasons=seasons,
                         weight_power=weight_power, gate=gate, spike_sigmas=threshold,
                         evaluation_horizons=evaluation_horizons)
        self.asymmetric = asymmetric

    def cleaner(self) -> Callable[[np.ndarray, tuple[int, ...]], np.ndarray]:
        return self._clean

    def _clean(self, y: np.ndarray, periods: tuple[int, ...]) -> np.ndarray:
        return clean_spikes(y, periods, self.spike_sigmas)

    def interval(self, history: History, combination: Combination, errors: np.ndarray) -> Fitted:
        return replace(super().interval(history, combination, errors), asymmetric=self.asymmetric)
