"""Change points: rows where the level of a series shifts and then stays (worker processes only).

For every row i the `stable_trend_window` rows from i on are compared with the straight line through as
many rows before i, carried forward (and the other way round), in units of the series' own noise
(estimated robustly from second differences, after the seasonal profile is removed when at least three
periods are known). The gap, as a two-sided normal probability with the
noise doubled for the many rows tested, is the row's confidence; a change point is a row whose confidence
reaches the threshold and is the highest within one window on either side, so one shift is one point.
Unlike anomaly detection this looks at rows after the one judged: a shift is only a shift once it stayed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from app.compute.detect.results import ChangePointResult

if TYPE_CHECKING:
    from app.compute.detect.inputs import ChangePointInput

NOISE_INFLATION = 1.2


def detect_change_points(work: ChangePointInput) -> ChangePointResult:
    values = np.asarray(work.values, dtype=np.float64)
    n = len(values)
    window = max(3, int(work.stable_trend_window))
    period = work.period if work.period is not None and work.period >= 2 and n >= 3 * work.period else None
    level = values - _seasonal_profile(values, period) if period else values
    confidence = np.zeros(n)
    strength = np.zeros(n)  # the gap in noise units: confidence saturates at 1, this keeps ranking
    if n >= 2 * window:
        windows = sliding_window_view(level, window)  # windows[k] = rows k .. k+window-1
        rows = np.arange(window, n - window + 1)
        before, after = windows[rows - window], windows[rows]
        # Each side's straight line carried over to the other side: a trend that simply continues (a
        # rising morning) is not a change; a step shows from both sides, so the smaller gap is used.
        t = np.arange(window) - (window - 1) / 2
        sxx = float(t @ t)
        reach = window  # from one window's centre to the other's
        forward = after.mean(axis=1) - (before.mean(axis=1) + (before @ t) / sxx * reach)
        backward = before.mean(axis=1) - (after.mean(axis=1) - (after @ t) / sxx * reach)
        gap = np.minimum(np.abs(forward), np.abs(backward))
        spread = _noise(level) * math.sqrt(2.0 / window + reach * reach / sxx) * NOISE_INFLATION
        z = gap / spread
        strength[rows] = np.nan_to_num(z, nan=0.0, posinf=1e300)
        confidence[rows] = np.array([math.erf(value / math.sqrt(2.0)) for value in z.tolist()])
    confidence = np.nan_to_num(confidence, nan=0.0, posinf=1.0, neginf=0.0).clip(0.0, 1.0)
    is_change = np.zeros(n, dtype=bool)
    for i in np.flatnonzero(confidence >= work.threshold):
        neighbourhood = strength[max(0, i - window) : i + window + 1]
        # The strongest row within a window either side; on a tie the first, so one shift is one point.
        if strength[i] >= neighbourhood.max() and not is_change[max(0, i - window) : i].any():
            is_change[i] = True
    return ChangePointResult(is_change_point=is_change.tolist(), confidence=confidence.tolist(), period=period)


def _seasonal_profile(values: np.ndarray, period: int) -> np.ndarray:
    phases = np.arange(len(values)) % period
    profile = np.array([np.median(values[phases == phase]) for phase in range(period)])
    return profile[phases] - np.median(profile)


def _noise(level: np.ndarray) -> float:
    """Robust standard deviation of the noise, from second differences (blind to steps and slopes)."""
    differences = np.diff(level, 2)
    deviations = np.sort(np.abs(differences - np.median(differences)))
    # The mean absolute deviation of the smallest 95% (steps and spikes are the rest); a median would be
    # zero for data that repeats exactly, as rounded or synthetic data often does.
    kept = deviations[: max(1, int(0.95 * len(deviations)))]
    spread = 1.2533 * float(kept.mean()) / 0.95 / math.sqrt(6.0) if len(kept) else 0.0
    if spread > 0:
        return spread
    scale = float(np.max(np.abs(level))) if len(level) else 0.0
    return max(1e-12, 1e-9 * scale)
