"""The fit/predict contract shared by every forecast model (see app.compute.forecast.models).

A model is a class configured only in its constructor. ``fit(values, horizon, periods)`` normalises the
last ``max_history`` points by their mean absolute value, makes the point forecast and measures
rolling-origin errors, and returns a ``Fitted`` whose ``predict(confidence)`` gives (median, lower,
upper) on the data's scale. ``Fitted`` is immutable, so one fit serves any number of confidences.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.compute.forecast.intervals import MIN_SAMPLES, ErrorModel, fit_errors, level_adjusted, origins, window


def usable_periods(periods: Sequence[int], n: int) -> tuple[int, ...]:
    """Periods with at least two full cycles in a history of n points, ascending."""
    return tuple(sorted(int(p) for p in periods if p >= 2 and n >= 2 * p))


# --------------------------------------------------------------------------------------------------
# fitted forecast


@dataclass(frozen=True)
class Fitted:
    """A fitted forecast in normalised units; predict() maps back to the data scale."""

    median: np.ndarray
    errors: ErrorModel
    scale: float
    nonnegative: bool = False
    asymmetric: bool = False

    def predict(self, confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        h = len(self.median)
        if self.asymmetric:
            down, up = self.errors.asymmetric(h, confidence)
        else:
            down, up = self.errors.half_widths(h, confidence)
        med = self.median * self.scale
        lo = (self.median - down) * self.scale
        hi = (self.median + up) * self.scale
        if self.nonnegative:
            med, lo, hi = np.maximum(med, 0.0), np.maximum(lo, 0.0), np.maximum(hi, 0.0)
        return med, lo, hi


def _normalise(values: Sequence[float], cap: int) -> tuple[np.ndarray, float]:
    """Last ``cap`` points divided by their mean absolute value (1 for all zeros); overflow-safe."""
    y = np.asarray(values, dtype=float)[-cap:]
    top = float(np.max(np.abs(y))) if len(y) else 0.0
    scale = top * float(np.mean(np.abs(y) / top)) if top > 0 else 1.0
    if not np.isfinite(scale) or scale <= 0:
        scale = 1.0
    return y / scale, scale


def never_negative(values: Sequence[float]) -> bool:
    """A history that never went below zero (counts, bytes, percentages): forecasts are kept >= 0."""
    return bool(np.min(np.asarray(values, dtype=float)) >= 0)


def level_span(periods: tuple[int, ...]) -> int:
    """Points that define a series' level at an origin: one cycle of the shortest period, else 3."""
    return periods[0] if periods else 3


def _step_scale(y: np.ndarray) -> float:
    d = np.diff(y)
    return float(np.sqrt(np.mean(d * d))) if len(d) else 0.0


class ForecastModel:
    """Base class: point forecast + rolling-origin empirical intervals (app.compute.forecast.intervals).

    Subclasses implement ``point(y, h, periods)`` on a normalised array. Constructor arguments:
    ``max_history`` (points read, newest last), ``n_origins`` (rolling origins for the errors),
    ``calibration`` = (scale, tail): the measured error quantile at confidence c is multiplied by
    scale * (z_c / z_0.8) ** tail, z_c the Gaussian two-sided quantile; tail > 0 fattens the tails.
    Both are chosen per model on M4 training data (coverage within 4-5 points at 0.5..0.99).
    """

    id = ""
    description = ""

    def __init__(self, max_history: int = 3000, n_origins: int = 6, calibration: tuple[float, float] = (1.0, 0.0),
                 min_train: int = 8) -> None:
        self.max_history = max_history
        self.n_origins = n_origins
        self.calibration = calibration
        self.min_train = min_train

    def point(self, y: np.ndarray, h: int, periods: tuple[int, ...]) -> np.ndarray:
        raise NotImplementedError

    def _min_train(self, n: int, periods: tuple[int, ...]) -> int:
        if not periods:
            # short non-seasonal histories (yearly data: 9-40 points) keep origins from 4 points on
            return max(4, min(self.min_train, n // 2))
        return max(self.min_train, min(2 * max(periods), n // 2))

    def _origin_step(self, hv: int) -> int:
        return hv

    def fit(self, values: Sequence[float], horizon: int, periods: tuple[int, ...]) -> Fitted:
        y, scale = _normalise(values, self.max_history)
        n = len(y)
        per = usable_periods(periods, n)
        med = np.asarray(self.point(y, horizon, per), dtype=float)
        mt = self._min_train(n, per)
        hv = max(1, min(horizon, n - mt))
        # enough origins for ~60 errors on short horizons, at most 6 (each one is a full refit)
        count = max(self.n_origins, min(6, math.ceil(2 * MIN_SAMPLES / hv)))
        orgs, hv = origins(n, horizon, mt, count, short=True)
        errs = np.full((len(orgs), hv), np.nan)
        for j, o in enumerate(orgs):
            f = self.point(y[:o], hv, usable_periods(per, o))
            errs[j] = window(y, o, hv) - f
        errs = level_adjusted(errs, y, orgs, level_span(per))
        em = fit_errors(errs, _step_scale(y), *self.calibration, orgs=orgs)
        return Fitted(med, em, scale, nonnegative=never_negative(values))
