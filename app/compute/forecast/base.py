"""What every forecast model's fit returns (``Fitted``) and the history helpers they share.

The steps of a fit are the contract of app.compute.forecast.template. ``Fitted.predict(confidence)`` gives
(median, lower, upper) on the data's scale; ``Fitted`` is immutable, so one fit serves any number of
confidences.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.compute.forecast.intervals import ErrorModel


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
