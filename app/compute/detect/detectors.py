"""The detectors behind DetectionWork; they run in worker processes.

anomaly-model-1 (default): app.compute.detect.streaming, every row judged from the rows before it.
anomaly-model-2 (fallback): rolling median of the recent values, range from their median absolute
deviation. Fewer moving parts (numpy, vectorised); it answers when the default detector fails.
"""

from __future__ import annotations

import logging
from statistics import NormalDist
from typing import TYPE_CHECKING, Protocol

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from app.compute.detect.budget import DEFAULT_FALSE_ALARMS_PER_WEEK, row_probability
from app.compute.detect.results import DEFAULT_DETECTOR, FALLBACK_DETECTOR, DetectionResult
from app.compute.detect.streaming import WARMUP, StreamingDetector
from app.series.frequencies import nominal_step

if TYPE_CHECKING:
    from app.compute.detect.inputs import DetectionInput

log = logging.getLogger("app.compute.detect")

# anomaly-model-2's defaults: two days of hourly rows (a day's shape seen twice), and the default detector's margin.
FALLBACK_MEDIAN_ROWS = 48
FALLBACK_MARGIN = 1.5


class Detector(Protocol):
    """The one contract every detector keeps: configuration in the constructor, one method."""

    def detect(self, work: DetectionInput) -> DetectionResult: ...


class RollingMedianDetector:
    """anomaly-model-2: the median of the last ``rows`` values, the range from their median absolute deviation."""

    def __init__(self, *, rows: int = FALLBACK_MEDIAN_ROWS, margin: float = FALLBACK_MARGIN) -> None:
        self.rows, self.margin = rows, margin

    def detect(self, work: DetectionInput) -> DetectionResult:
        times = np.asarray(work.epoch_seconds, dtype=np.float64)
        values = np.asarray(work.values, dtype=np.float64)
        confidence = work.confidence
        if confidence is None:
            budget = DEFAULT_FALSE_ALARMS_PER_WEEK if work.false_alarms_per_week is None else work.false_alarms_per_week
            confidence = 1.0 - row_probability(budget, nominal_step(times))
        return median_detector(times, values, confidence, work.start, rows=self.rows, margin=self.margin)


class StreamingDetectorWithFallback:
    """anomaly-model-1 (app.compute.detect.streaming); any failure of it is answered by ``fallback``, saying so."""

    def __init__(self, *, fallback: Detector, fallback_id: str) -> None:
        self.fallback, self.fallback_id = fallback, fallback_id

    def detect(self, work: DetectionInput) -> DetectionResult:
        try:
            return streaming_detector(work)
        except Exception as exc:  # noqa: BLE001 - any failure of the default detector falls back
            log.warning("%s failed (%s: %s); answering with %s", DEFAULT_DETECTOR, type(exc).__name__, exc,
                        self.fallback_id)
            result = self.fallback.detect(work)
            note = f"{DEFAULT_DETECTOR} failed ({type(exc).__name__}); answered by {self.fallback_id}"
            return DetectionResult(**{**result.__dict__, "fallback": note})


_FALLBACK = RollingMedianDetector()
# Every detector by its id (results.DETECTOR_IDS lists the same ids for the web side, which imports no numpy).
REGISTRY: dict[str, Detector] = {
    DEFAULT_DETECTOR: StreamingDetectorWithFallback(fallback=_FALLBACK, fallback_id=FALLBACK_DETECTOR),
    FALLBACK_DETECTOR: _FALLBACK,
}


def detect(work: DetectionInput) -> DetectionResult:
    detector = REGISTRY.get(work.detector or DEFAULT_DETECTOR)
    if detector is None:
        raise ValueError(f"unknown detector {work.detector!r}")
    return detector.detect(work)


def streaming_detector(work: DetectionInput) -> DetectionResult:
    """Every row from row 0 (the state needs them), answered from ``work.start`` on."""
    detector = StreamingDetector(data_frequency=work.data_frequency, confidence=work.confidence,
                                 false_alarms_per_week=work.false_alarms_per_week, period=work.period)
    state = detector.initial_state()
    times = np.asarray(work.epoch_seconds, dtype=np.float64).tolist()
    values = np.asarray(work.values, dtype=np.float64).tolist()
    verdicts = detector.update(state, times, values)
    start = max(0, min(work.start, len(values)))
    for name in ("expected", "lower", "upper", "score"):
        if not all(np.isfinite(getattr(verdicts, name)[start:])):
            raise FloatingPointError(f"non-finite {name}")
    return DetectionResult(
        expected=verdicts.expected[start:],
        lower=verdicts.lower[start:],
        upper=verdicts.upper[start:],
        score=verdicts.score[start:],
        is_anomaly=verdicts.is_anomaly[start:],
        direction=verdicts.direction[start:],
        warmup_points=min(WARMUP, len(values)),
        period=state.period or None,
        threshold=detector.threshold(state),
        incident=verdicts.incident[start:],
        signal=verdicts.signal[start:],
        size=verdicts.size[start:],
    )


def _floor(values: np.ndarray, lo: int, n: int) -> np.ndarray:
    """A least half-width, so a perfectly flat stretch does not flag rounding noise."""
    scale = np.abs(values[lo:n])
    return 1e-9 + 1e-6 * scale


def _result(
    y: np.ndarray,
    expected: np.ndarray,
    halfwidth: np.ndarray,
    offset: int,
    lo: int,
    period: float | None,
    step: float,
) -> DetectionResult:
    m = len(y)
    judged = slice(offset, m)
    row_index = np.arange(lo, lo + m)
    warm = row_index < WARMUP
    residual = y - expected
    ratio = np.abs(residual) / halfwidth
    # r^p / (1 + r^p): 0.5 on the edge of the range, and still rising (not saturated at 1.0) for large
    # surprises, so scores keep ranking them.
    with np.errstate(over="ignore", invalid="ignore"):
        lifted = np.power(ratio, 2.0)
        score = np.where(np.isinf(lifted), 1.0, lifted / (1.0 + lifted))
    score = np.where(warm, 0.0, np.clip(score, 0.0, 1.0))
    expected = np.where(warm, y, expected)
    halfwidth = np.where(warm, 0.0, halfwidth)
    lower, upper = expected - halfwidth, expected + halfwidth
    for name, numbers in (("expected", expected), ("lower", lower), ("upper", upper), ("score", score)):
        if not np.isfinite(numbers[judged]).all():
            raise FloatingPointError(f"non-finite {name}")
    anomaly = score >= 0.5
    direction = [
        ("up" if r > 0 else "down") if a else None
        for r, a in zip(residual[judged].tolist(), anomaly[judged].tolist(), strict=True)
    ]
    return DetectionResult(
        expected=expected[judged].tolist(),
        lower=lower[judged].tolist(),
        upper=upper[judged].tolist(),
        score=score[judged].tolist(),
        is_anomaly=anomaly[judged].tolist(),
        direction=direction,
        warmup_points=min(WARMUP, lo + m),
        period=None if period is None or step <= 0 else int(round(period / step)),
    )


def median_detector(times: np.ndarray, values: np.ndarray, confidence: float, start: int, *,
                    rows: int = FALLBACK_MEDIAN_ROWS, margin: float = FALLBACK_MARGIN) -> DetectionResult:
    n = len(values)
    start = max(0, min(start, n))
    lo = max(0, start - rows)
    y = values[lo:n]
    m = len(y)
    expected = y.copy()
    halfwidth = np.zeros(m)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    first_full = max(lo, rows)
    if first_full < n:
        base = first_full - rows
        history = sliding_window_view(values[base : n - 1], rows)  # window k: rows before first_full+k
        medians = np.median(history, axis=1)
        spread = np.median(np.abs(history - medians[:, None]), axis=1)
        expected[first_full - lo :] = medians
        halfwidth[first_full - lo :] = margin * z * 1.4826 * spread
    for i in range(max(lo, WARMUP), min(first_full, n)):
        history = values[:i]
        median = float(np.median(history))
        expected[i - lo] = median
        halfwidth[i - lo] = margin * z * 1.4826 * float(np.median(np.abs(history - median)))
    halfwidth = np.maximum(halfwidth, _floor(values, lo, n))
    return _result(y, expected, halfwidth, start - lo, lo, None, nominal_step(times))
