"""The fallback of models 2 and 4: seasonal naive with its own rolling-origin interval (SeasonalNaive)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from app.compute.forecast.base import Fitted, _normalise, _step_scale, never_negative, usable_periods
from app.compute.forecast.candidates import CANDIDATES
from app.compute.forecast.intervals import MIN_SAMPLES, fit_errors, origins
from app.compute.forecast.template import Combination, ForecastModel, History, Pool, min_train


class SeasonalNaive(ForecastModel[History]):
    """The last cycle of the shortest usable period repeated (the last value without one), with the
    rolling-origin interval of its own errors over the frequency's evaluation horizon (no newest-point
    cleaning: a fallback takes the history as it is): enough origins for ~60 errors on short horizons (at least
    ``n_origins``), no seasonal scaling and no trend floor."""

    id = "fallback"
    description = "Seasonal naive fallback."

    member = "snaive_s"

    def __init__(self, max_history: int = 3000, n_origins: int = 12,
                 calibration: tuple[float, float] = (1.0, 0.0)) -> None:
        super().__init__(max_history=max_history, n_origins=n_origins, calibration=calibration)

    def prepare(self, values: Sequence[float], horizon: int, periods: tuple[int, ...]) -> History:
        y, scale = _normalise(values, self.max_history)
        n = len(y)
        per = usable_periods(periods, n)
        mt = min_train(n, per)
        # the errors are measured over the frequency's evaluation horizon, whatever the requested one
        # (app.compute.forecast.frequency), so a longer request only extends the same forecast
        he = self.evaluation_horizon(per, n)
        hv = max(1, min(he, n - mt))
        # enough origins for ~60 errors on short horizons, at most 6 (each one is a full refit)
        count = max(self.n_origins, min(6, math.ceil(2 * MIN_SAMPLES / hv)))
        orgs, hv = origins(n, he, mt, count, short=True)
        return History(values, y, y, y, scale, horizon, per, orgs, hv, seasonal=False, spikes=None)

    def candidate_pool(self, history: History) -> Pool:
        return Pool([(self.member,)])

    def combine(self, history: History, pool: Pool) -> Combination:
        """One forecaster: nothing to choose or weight."""
        (name,), = pool.members
        y, per, hv = history.x, history.periods, history.window
        median = np.asarray(self.point(name, y, history.horizon, per), dtype=float)
        at_origins = np.full((len(history.origins), hv), np.nan)
        for j, o in enumerate(history.origins):
            at_origins[j] = self.point(name, y[:o], hv, usable_periods(per, o))
        return Combination(median, at_origins)

    def point(self, name: str, y: np.ndarray, h: int, periods: tuple[int, ...]) -> np.ndarray:
        return CANDIDATES[name](y, h, periods)

    def interval(self, history: History, combination: Combination, errors: np.ndarray) -> Fitted:
        em = fit_errors(errors, _step_scale(history.y), *self.calibration, orgs=history.origins)
        return Fitted(combination.median, em, history.scale, nonnegative=never_negative(history.values))
