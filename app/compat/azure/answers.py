"""Our verdicts in Azure AI Anomaly Detector's v1.1 response shapes: translation only, no HTTP."""

from __future__ import annotations

import math
from typing import Any

from app.compat.azure.schemas import AzureSeries
from app.compute.detect.results import ChangePointResult, DetectionResult


def entire(result: DetectionResult, values: list[float], *, max_anomaly_ratio: float) -> dict[str, Any]:
    """/timeseries/entire/detect's body. Azure reports at most ``max_anomaly_ratio`` of the points; the least
    surprising ones are dropped first."""
    flags = _at_most(result, values, int(max_anomaly_ratio * len(result.is_anomaly)))
    return {
        "period": result.period or 0,
        "expectedValues": result.expected,
        "upperMargins": [high - mid for high, mid in zip(result.upper, result.expected, strict=True)],
        "lowerMargins": [mid - low for low, mid in zip(result.lower, result.expected, strict=True)],
        "isAnomaly": flags,
        "isNegativeAnomaly": [f and v < e for f, v, e in zip(flags, values, result.expected, strict=True)],
        "isPositiveAnomaly": [f and v > e for f, v, e in zip(flags, values, result.expected, strict=True)],
        "severity": [s if f else 0.0 for f, s in zip(flags, result.score, strict=True)],
    }


def _at_most(result: DetectionResult, values: list[float], allowed: int) -> list[bool]:
    """The flags, the least surprising dropped until ``allowed`` remain. Scores of very rare rows round to 1.0, so
    among equal scores the row further beyond its range (in units of the range) is the more surprising."""
    flags = list(result.is_anomaly)
    if sum(flags) <= allowed:
        return flags

    def surprise(i: int) -> tuple[float, float]:
        # The range's side the row is on: a count's range is wider above than below.
        above = values[i] >= result.expected[i]
        width = result.upper[i] - result.expected[i] if above else result.expected[i] - result.lower[i]
        distance = abs(values[i] - result.expected[i])
        return result.score[i], distance / width if width > 0 else math.inf

    ranked = sorted((i for i, flag in enumerate(flags) if flag), key=surprise, reverse=True)
    keep = set(ranked[:allowed])
    return [i in keep for i in range(len(flags))]


def last(result: DetectionResult, value: float, *, suggested_window: int) -> dict[str, Any]:
    """/timeseries/last/detect's body, for a result computed from the last row on."""
    flag, expected = result.is_anomaly[0], result.expected[0]
    return {
        "period": result.period or 0,
        "suggestedWindow": suggested_window,
        "expectedValue": expected,
        "upperMargin": result.upper[0] - expected,
        "lowerMargin": expected - result.lower[0],
        "isAnomaly": flag,
        "isNegativeAnomaly": flag and value < expected,
        "isPositiveAnomaly": flag and value > expected,
        "severity": result.score[0] if flag else 0.0,
    }


def season_rows(series: AzureSeries) -> int | None:
    """The season, in rows, that the series' granularity suggests at its own spacing (None without a granularity):
    what a change-point request without ``period`` is read with."""
    if series.data_frequency is None:
        return None
    import numpy as np

    from app.series.frequencies import nominal_step, period_seconds

    step = nominal_step(np.asarray(series.epoch_seconds, dtype=np.float64))
    seconds = period_seconds(series.data_frequency, step)
    return round(seconds / step) if seconds else 0


def change_points(result: ChangePointResult) -> dict[str, Any]:
    """/timeseries/changepoint/detect's body."""
    return {"period": result.period or 0, "isChangePoint": result.is_change_point,
            "confidenceScores": result.confidence}
