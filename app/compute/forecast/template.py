"""The one contract every forecast model follows (the models: app.compute.forecast.models).

A model is a small class configured only in its constructor. Its ``fit(values, horizon, periods)``
always runs the same five steps, in this order, each a method the model defines:

1. ``prepare``: the last ``max_history`` points divided by their mean absolute value (base._normalise),
   the usable periods, the history with a spike at its newest point replaced (robust.clean_newest), the
   series the candidates are fitted on (that one, or cleaned further), and the rolling origins inside the
   history at which every candidate is judged, their windows spanning the frequency's evaluation horizon
   (app.compute.forecast.frequency), not the requested one (``History``).
2. ``candidate_pool``: the candidate forecasters this history gets (``Pool``).
3. ``combine``: every candidate forecasts from every origin and from the end of the history; the
   forecasts are chosen and weighted on the origins' errors (``Combination``).
4. ``origin_errors``: the combination's errors at the origins, rescaled to today's level (shared by
   every model, below).
5. ``interval``: the error model of app.compute.forecast.intervals built from those errors, in a
   ``Fitted`` whose ``predict(confidence)`` gives (median, lower, upper) on the data's scale.

``Fitted`` is immutable, so one fit serves any number of confidences.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from app.compute.forecast.base import Fitted, level_span
from app.compute.forecast.frequency import evaluation_horizon
from app.compute.forecast.intervals import level_adjusted, window

MIN_TRAIN = 8  # fewest points before a rolling origin when the history has a usable period (see min_train)


def min_train(n: int, periods: tuple[int, ...]) -> int:
    """Fewest points of history before the first rolling origin: two cycles of the longest period (at
    least MIN_TRAIN, at most half the history)."""
    if not periods:
        # short non-seasonal histories (yearly data: 9-40 points) keep origins from 4 points on
        return max(4, min(MIN_TRAIN, n // 2))
    return max(MIN_TRAIN, min(2 * max(periods), n // 2))


@dataclass(frozen=True)
class History:
    """A request's history as every step after ``prepare`` sees it."""

    values: Sequence[float]  # as requested (never_negative reads every point, not only the capped ones)
    y: np.ndarray  # the capped, normalised history: what forecasts are judged against
    # y with a spike at its newest point replaced (robust.clean_newest): what the seasonal tests read
    z: np.ndarray
    x: np.ndarray  # what the candidates are fitted on: z, or z with its other spikes replaced
    scale: float  # y * scale is the data
    horizon: int
    periods: tuple[int, ...]  # usable periods of y, ascending
    origins: list[int]  # rolling origins: each candidate forecasts from x[:o]
    # steps judged at each origin (at most the evaluation horizon; NaN past the end of the history)
    window: int
    seasonal: bool  # strongly seasonal: seasonal strength of the shortest period at least the model's gate
    # (origins, window) mask of the errors about a newest point z replaced (intervals.spike_errors), or None:
    # left out of the ranking, kept in the interval
    spikes: np.ndarray | None


@dataclass(frozen=True)
class Pool:
    """The candidates of one history: each member is the equal-weight mean of the named forecasters."""

    members: list[tuple[str, ...]]
    keep: int | None = None  # members kept by their rank at the origins (None: every one)
    fixed: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))  # members with a fixed share
    share: float = 0.0  # the share of the combination those members hold, whatever their rank


@dataclass(frozen=True)
class Combination:
    """The point forecast and what the same combination forecast at each rolling origin."""

    median: np.ndarray  # horizon values, normalised
    at_origins: np.ndarray  # (origins, window)


H = TypeVar("H", bound=History)


class ForecastModel(ABC, Generic[H]):
    """A forecast model: ``fit`` runs prepare -> candidate_pool -> combine -> origin_errors -> interval.

    Constructor arguments every model has: ``max_history`` (points read, newest last), ``n_origins``
    (rolling origins for the errors) and ``calibration`` = (scale, tail): the measured error quantile at
    confidence c is multiplied by scale * (z_c / z_0.8) ** tail, z_c the Gaussian two-sided quantile;
    tail > 0 fattens the tails. Both are chosen per model on M4 training data. ``evaluation_horizons``: a
    model's own evaluation horizon for some rows of app.compute.forecast.frequency's table, by row name.
    """

    id = ""
    description = ""

    def __init__(self, max_history: int, n_origins: int, calibration: tuple[float, float],
                 evaluation_horizons: Mapping[str, int] | None = None) -> None:
        self.max_history = max_history
        self.n_origins = n_origins
        self.calibration = calibration
        self.evaluation_horizons = dict(evaluation_horizons or {})

    def fit(self, values: Sequence[float], horizon: int, periods: tuple[int, ...]) -> Fitted:
        history = self.prepare(values, horizon, periods)
        pool = self.candidate_pool(history)
        combination = self.combine(history, pool)
        errors = self.origin_errors(history, combination)
        return self.interval(history, combination, errors)

    def evaluation_horizon(self, periods: tuple[int, ...], n: int) -> int:
        """Steps every rolling-origin window spans for a history of n points with these usable periods: the
        frequency table's, never the requested horizon, so the first k steps of a forecast are the horizon-k
        forecast (app.compute.forecast.frequency)."""
        return evaluation_horizon(periods, n, self.evaluation_horizons)

    @abstractmethod
    def prepare(self, values: Sequence[float], horizon: int, periods: tuple[int, ...]) -> H:
        """Normalise and cap the history, find its usable periods and its rolling origins."""

    @abstractmethod
    def candidate_pool(self, history: H) -> Pool:
        """The candidates this history gets."""

    @abstractmethod
    def combine(self, history: H, pool: Pool) -> Combination:
        """Run the candidates at the origins and at the end of the history; choose and weight them."""

    def origin_errors(self, history: H, combination: Combination) -> np.ndarray:
        """(origins, window) errors of the combination, each origin's rescaled towards today's level
        (intervals.level_adjusted); NaN where a window runs past the end of the history."""
        if not history.origins:
            return np.empty((0, history.window))
        actual = np.stack([window(history.y, o, history.window) for o in history.origins])
        return level_adjusted(actual - combination.at_origins, history.y, history.origins,
                              level_span(history.periods))

    @abstractmethod
    def interval(self, history: H, combination: Combination, errors: np.ndarray) -> Fitted:
        """The error model of the origins' errors, with the median, as a Fitted forecast."""
