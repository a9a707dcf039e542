"""The detectors behind DetectJob, by id; they run in worker processes.

Contract (``Detector``): a class configured only in its constructor, with one method, ``detect(job)``, that
judges rows ``job.start`` .. n-1 of the job's series, each from the rows before it, and returns a
``DetectionResult`` whose ``is_anomaly`` is exactly ``score >= threshold`` on every row, the threshold coming
from the job's false-alarm budget (app.compute.detect.streaming.threshold_for).

anomaly-model-1 (default): app.compute.detect.streaming, calibrated score, incidents.
anomaly-model-2 (fallback): rolling median of the recent values; the score is a normal distribution's tail
probability of the distance in robust standard deviations (their median absolute deviation). Fewer moving
parts (numpy, vectorised); it answers when the default detector fails.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from app.compute.detect.results import DEFAULT_DETECTOR, FALLBACK_DETECTOR, DetectionResult
from app.compute.detect.streaming import WARMUP, StreamingDetector, budget_for_confidence, threshold_for
from app.series.frequencies import nominal_step

if TYPE_CHECKING:
    from app.compute.detect.jobs import DetectJob

log = logging.getLogger("app.compute.detect")

MEDIAN_ROWS = 48  # the fallback's history: long enough for a stable median, short enough to follow a level
MAD_TO_SIGMA = 1.4826  # a normal distribution's standard deviation over its median absolute deviation


class Detector(ABC):
    """Configured in the constructor; ``detect`` judges a job's rows."""

    @abstractmethod
    def detect(self, job: DetectJob) -> DetectionResult: ...


class StreamingModel(Detector):
    """anomaly-model-1: every row from row 0 (the state needs them), answered from ``job.start`` on."""

    def detect(self, job: DetectJob) -> DetectionResult:
        detector = StreamingDetector(data_frequency=job.data_frequency, confidence=job.confidence, period=job.period)
        state = detector.initial_state()
        times = np.asarray(job.epoch_seconds, dtype=np.float64).tolist()
        values = np.asarray(job.values, dtype=np.float64).tolist()
        verdicts = detector.update(state, times, values)
        start = max(0, min(job.start, len(values)))
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
            threshold=verdicts.threshold,
            incident=verdicts.incident[start:],
        )


class RollingMedian(Detector):
    """anomaly-model-2: the median of the last MEDIAN_ROWS values, and their median absolute deviation."""

    def detect(self, job: DetectJob) -> DetectionResult:
        times = np.asarray(job.epoch_seconds, dtype=np.float64)
        values = np.asarray(job.values, dtype=np.float64)
        n = len(values)
        start = max(0, min(job.start, n))
        lo = max(0, start - MEDIAN_ROWS)
        y = values[lo:n]
        m = len(y)
        expected = y.copy()
        spread = np.zeros(m)
        first_full = max(lo, MEDIAN_ROWS)
        if first_full < n:
            base = first_full - MEDIAN_ROWS
            history = sliding_window_view(values[base : n - 1], MEDIAN_ROWS)  # window k: rows before first_full+k
            medians = np.median(history, axis=1)
            expected[first_full - lo :] = medians
            spread[first_full - lo :] = MAD_TO_SIGMA * np.median(np.abs(history - medians[:, None]), axis=1)
        for i in range(max(lo, WARMUP), min(first_full, n)):
            history = values[:i]
            median = float(np.median(history))
            expected[i - lo] = median
            spread[i - lo] = MAD_TO_SIGMA * float(np.median(np.abs(history - median)))
        # A least spread, so a perfectly flat stretch does not flag rounding noise.
        spread = np.maximum(spread, 1e-9 + 1e-6 * np.abs(y))
        threshold = threshold_for(budget_for_confidence(job.confidence), nominal_step(times))
        z = NormalDist().inv_cdf(1.0 - (1.0 - threshold) / 2.0)
        residual = y - expected
        distance = np.abs(residual) / spread
        score = np.array([1.0 - math.erfc(d / math.sqrt(2.0)) for d in distance.tolist()])
        warm = np.arange(lo, lo + m) < WARMUP
        score = np.where(warm, 0.0, score)
        expected = np.where(warm, y, expected)
        halfwidth = np.where(warm, 0.0, z * spread)
        judged = slice(start - lo, m)
        lower, upper = expected - halfwidth, expected + halfwidth
        for name, numbers in (("expected", expected), ("lower", lower), ("upper", upper), ("score", score)):
            if not np.isfinite(numbers[judged]).all():
                raise FloatingPointError(f"non-finite {name}")
        anomaly = score >= threshold
        direction = [("up" if r > 0 else "down") if a else None
                     for r, a in zip(residual[judged].tolist(), anomaly[judged].tolist(), strict=True)]
        return DetectionResult(
            expected=expected[judged].tolist(),
            lower=lower[judged].tolist(),
            upper=upper[judged].tolist(),
            score=score[judged].tolist(),
            is_anomaly=anomaly[judged].tolist(),
            direction=direction,
            warmup_points=min(WARMUP, n),
            period=None,
            threshold=threshold,
        )


REGISTRY: dict[str, Detector] = {DEFAULT_DETECTOR: StreamingModel(), FALLBACK_DETECTOR: RollingMedian()}


def detect(job: DetectJob) -> DetectionResult:
    name = job.detector or DEFAULT_DETECTOR
    detector = REGISTRY.get(name)
    if detector is None:
        raise ValueError(f"unknown detector {name!r}")
    if name == FALLBACK_DETECTOR:
        return detector.detect(job)
    try:
        return detector.detect(job)
    except Exception as exc:  # noqa: BLE001 - any failure of the default detector falls back
        log.warning("%s failed (%s: %s); answering with %s", name, type(exc).__name__, exc, FALLBACK_DETECTOR)
        result = REGISTRY[FALLBACK_DETECTOR].detect(job)
        return DetectionResult(**{**result.__dict__,
                                  "fallback": f"{name} failed ({type(exc).__name__}); answered by {FALLBACK_DETECTOR}"})
