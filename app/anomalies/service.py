"""The one front door to anomaly detection: a checked series and its settings in, verdicts out.

POST /anomalies, the Azure- and Nixtla-compatible routes, each series of an anomaly batch and a monitor judged
by a detector other than its streaming state come through here, so a verdict is the same whichever door asked
for it. The caller says how the computation runs (``run``): the web process hands it to the worker pool, a batch
worker computes it in its own process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from app.anomalies.schemas import CheckedSeries
from app.compute.detect.reasons import reason
from app.compute.detect.results import DEFAULT_DETECTOR, ChangePointResult, DetectionResult
from app.compute.detect.state import POINT
from app.compute.detect.work import ChangePointWork, DetectionWork
from app.series.numbers import has_float32_noise, interval_without_float32_noise

# Every door that answers detection over HTTP says with this header when the fallback detector answered.
FALLBACK_HEADER = "X-Anomaly-Fallback"

Runner = Callable[[Any], Any]


def detect(
    epoch_seconds: Any,
    values: Any,
    *,
    data_frequency: str,
    run: Runner,
    confidence: float | None = None,
    false_alarms_per_week: float | None = None,
    detector: str | None = DEFAULT_DETECTOR,
    start: int = 0,
    period: int | None = None,
) -> DetectionResult:
    """Verdicts for rows ``start`` onwards of a checked series (UTC seconds and values, float64 or lists), each
    row judged from every row before it; ``period`` (rows) overrides the season the data frequency suggests.
    The threshold comes from ``false_alarms_per_week`` (default one) or, instead, ``confidence``."""
    import numpy as np

    work = DetectionWork(
        epoch_seconds=np.asarray(epoch_seconds, dtype=np.float64),
        values=np.asarray(values, dtype=np.float64),
        data_frequency=data_frequency,
        confidence=confidence,
        false_alarms_per_week=false_alarms_per_week,
        detector=detector,
        start=start,
        period=period,
    )
    result: DetectionResult = run(work)
    return result


def change_points(values: Any, *, window: int, threshold: float, period: int | None, run: Runner) -> ChangePointResult:
    result: ChangePointResult = run(ChangePointWork(values, window, threshold, period))
    return result


def verdicts(timestamps: list[Any], series: CheckedSeries, result: DetectionResult) -> dict[str, Any]:
    """Every row's verdict in this service's own shape (POST /anomalies, and each series of an anomaly batch)."""
    expected, lower, upper = _numbers(series, result)
    return {
        "timestamps": timestamps,
        "expected": expected,
        "lower_bound": lower,
        "upper_bound": upper,
        "anomaly_score": result.score,
        "is_anomaly": result.is_anomaly,
        "threshold": result.threshold,
        "direction": result.direction,
        "reason": reasons(series, result, lower, upper, 0),
        "warmup_points": result.warmup_points,
        "period": result.period,
        "out_of_order": series.out_of_order,
        **missing_count(series.missing_values),
    }


def reasons(series: CheckedSeries, result: DetectionResult, lower: list[float], upper: list[float],
            start: int) -> list[str | None]:
    """Each judged row's reason: None for a row that is not an anomaly, else which signal flagged it and its
    numbers (a detector that keeps no signals flags a row for its own value alone). ``start``: the row of the
    series the result's first verdict is for."""
    values = series.values
    out: list[str | None] = []
    for row, flagged in enumerate(result.is_anomaly):
        if not flagged:
            out.append(None)
            continue
        value = float(values[start + row])
        if result.signal is not None and result.size is not None:
            signal, size = result.signal[row], result.size[row]
        else:
            signal, size = POINT, value - result.expected[row]
        out.append(reason(signal, size, value, lower[row], upper[row]))
    return out


def missing_count(missing_values: int) -> dict[str, int]:
    """The answer's word on values sent as null (their rows were left out), when there were any."""
    return {"missing_values": missing_values} if missing_values else {}


def _numbers(series: CheckedSeries, result: DetectionResult) -> tuple[list[float], list[float], list[float]]:
    """expected and the range as written: float32 input (echoed by a prediction) without its float64 digits."""
    if not has_float32_noise(series.values):
        return result.expected, result.lower, result.upper
    lower, expected, upper = interval_without_float32_noise(result.lower, result.expected, result.upper)
    return expected, lower, upper


def last_verdict(timestamp: Any, series: CheckedSeries, result: DetectionResult) -> dict[str, Any]:
    """The verdict on a series' last row (``result`` computed with start at that row)."""
    expected, lower, upper = _numbers(series, result)
    return {
        "timestamp": timestamp,
        "expected": expected[0],
        "lower_bound": lower[0],
        "upper_bound": upper[0],
        "anomaly_score": result.score[0],
        "is_anomaly": result.is_anomaly[0],
        "threshold": result.threshold,
        "direction": result.direction[0],
        "reason": reasons(series, result, lower, upper, len(series.values) - 1)[0],
        "warmup_points": result.warmup_points,
        "period": result.period,
        "out_of_order": series.out_of_order,
        **missing_count(series.missing_values),
    }
