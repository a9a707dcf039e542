"""The plain, picklable data forecast work carries to the worker processes (the covariates) and returns to the web
process (the forecast). No numeric imports: the web process imports this module."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ForecastResult:
    median: list[float]
    lower: list[float]
    upper: list[float]
    fallback: str | None = None
    covariates_used: bool | None = None  # None: no covariates were given; False: given but not used
    covariates_note: str | None = None  # why they were not used (a holdout of the history showed no gain, ...)


@dataclass(frozen=True)
class CovariateMatrix:
    """The covariates as the models take them: numeric design columns over the history and the horizon."""

    names: tuple[str, ...]  # one per design column (after one-hot expansion), e.g. "price", "weather=rain"
    history: Any  # float64 array, shape (n, k), row i aligned with values[i]; finite
    future: Any  # float64 array, shape (horizon, k); rows of a past-only column are NaN
    past_only: tuple[bool, ...]  # True: known only over the history (the model uses it lagged by the horizon)
