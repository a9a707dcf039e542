"""The detectors behind DetectJob; runs in worker processes only (numpy).

anomaly-model-1 (default): for every row, several one-step predictors are scored on the rows before it
(last value, mean of the last few values, and, when the series is long enough, the value one season
ago, the season-ago change added to the last value, and the mean of the last three seasons); the one
with the smallest recent error gives ``expected``. The expected range is ``expected`` plus or minus
BAND_MARGIN times the ``confidence`` quantile of the recent absolute prediction errors, so it follows
the data's own (often heavy-tailed) noise instead of assuming a normal one. The season is found by
time (the row nearest to one period earlier), so missing rows and jitter do not shift it.

anomaly-model-2 (fallback): rolling median of the recent values, range from their median absolute
deviation. Fewer moving parts; it answers when the default detector fails.

Every feature of row i is computed from a fixed-width window of rows before i (never a running sum
from row 0), so judging rows [start, n) reproduces judging [0, n) exactly, at a cost bounded by a
look-back of LOOK_BACK rows plus the seasonal look-ups.
"""

from __future__ import annotations

import logging
import math
from statistics import NormalDist

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from app.detect.jobs import DEFAULT_DETECTOR, FALLBACK_DETECTOR, DetectionResult, DetectJob

log = logging.getLogger("app.detect")

# Rows 0..WARMUP-1 are warm-up: they only teach the detector. With the minimum of 12 points the last
# row is still judged (Azure's last-point check needs that).
WARMUP = 11
LOCAL_MEAN_ROWS = 8
CHOOSER_ROWS = 288  # recent errors that choose the predictor (a day of five-minute rows)
BAND_ROWS = 720  # recent errors that set the expected range
BAND_MARGIN = 1.5
SCORE_POWER = 2.0
MAX_PERIOD_ROWS = 2016
LOOK_BACK = BAND_ROWS + CHOOSER_ROWS + LOCAL_MEAN_ROWS + 2

DAY = 86_400.0
_PERIOD_CANDIDATES: dict[str, tuple[float, ...]] = {
    "Seconds": (DAY, 3_600.0, 60.0),
    "Minutes": (DAY, 3_600.0),
    "Hours": (DAY, 7 * DAY),
    "Daily": (7 * DAY,),
    "Weekly": (364 * DAY,),
    "Monthly": (365.2425 * DAY,),
    "Quarterly": (365.2425 * DAY,),
    "Yearly": (),
}

FALLBACK_MEDIAN_ROWS = 48
FALLBACK_MARGIN = 1.5


def detect(job: DetectJob) -> DetectionResult:
    times = np.asarray(job.epoch_seconds, dtype=np.float64)
    values = np.asarray(job.values, dtype=np.float64)
    detector = job.detector or DEFAULT_DETECTOR
    if detector not in (DEFAULT_DETECTOR, FALLBACK_DETECTOR):
        raise ValueError(f"unknown detector {detector!r}")
    if detector == DEFAULT_DETECTOR:
        try:
            result = adaptive_detector(times, values, job.data_frequency, job.confidence, job.start)
            _check(result)
            return result
        except Exception as exc:  # noqa: BLE001 - any failure of the default detector falls back
            log.warning("anomaly-model-1 failed (%s: %s); answering with anomaly-model-2", type(exc).__name__, exc)
            fallback = f"{DEFAULT_DETECTOR} failed ({type(exc).__name__}); answered by {FALLBACK_DETECTOR}"
            result = median_detector(times, values, job.confidence, job.start)
            _check(result)
            return DetectionResult(**{**result.__dict__, "fallback": fallback})
    result = median_detector(times, values, job.confidence, job.start)
    _check(result)
    return result


def _check(result: DetectionResult) -> None:
    for name in ("expected", "lower", "upper", "score"):
        if not all(math.isfinite(v) for v in getattr(result, name)):
            raise FloatingPointError(f"non-finite {name}")


def nominal_step(times: np.ndarray) -> float:
    """Median spacing of the first WARMUP rows: fixed once warm-up ends, so later rows cannot change it."""
    head = times[: min(len(times), WARMUP)]
    if len(head) < 2:
        return 0.0
    return float(np.median(np.diff(head)))


def period_seconds(data_frequency: str, step: float) -> float | None:
    if step <= 0:
        return None
    for candidate in _PERIOD_CANDIDATES.get(data_frequency, ()):
        rows = candidate / step
        if 4 <= rows <= MAX_PERIOD_ROWS:
            return candidate
    return None


def _seasonal_rows(times: np.ndarray, rows: np.ndarray, lag: float, tolerance: float) -> np.ndarray:
    """For each row, the row nearest to `lag` seconds earlier (-1 when none lies within `tolerance`)."""
    targets = times[rows] - lag
    right = np.searchsorted(times, targets)
    left = np.clip(right - 1, 0, len(times) - 1)
    right = np.clip(right, 0, len(times) - 1)
    pick = np.where(np.abs(times[left] - targets) <= np.abs(times[right] - targets), left, right)
    ok = (np.abs(times[pick] - targets) <= tolerance) & (pick < rows)
    return np.where(ok, pick, -1)


def _trailing(x: np.ndarray, width: int) -> np.ndarray:
    """Windows x[i-width:i] for i = width..len(x) (one row per i), as a view."""
    return sliding_window_view(x[:-1], width) if len(x) > width else np.empty((0, width))


def adaptive_detector(
    times: np.ndarray, values: np.ndarray, data_frequency: str, confidence: float, start: int
) -> DetectionResult:
    n = len(values)
    start = max(0, min(start, n))
    step = nominal_step(times)
    period = period_seconds(data_frequency, step)
    # Rows needed: the band of row i looks at residuals of BAND_ROWS rows, each chosen over CHOOSER_ROWS.
    lo = max(0, start - LOOK_BACK)
    rows = np.arange(lo, n)
    y = values[lo:n]
    m = len(rows)

    candidates: list[np.ndarray] = []
    last = np.full(m, np.nan)
    last[1:] = y[:-1]
    if lo > 0:
        last[0] = values[lo - 1]
    candidates.append(last)
    mean_local = np.full(m, np.nan)
    # Mean of the LOCAL_MEAN_ROWS rows before i; windows taken from the full array keep edges identical.
    base = max(0, lo - LOCAL_MEAN_ROWS)
    windows = sliding_window_view(values[base:n], LOCAL_MEAN_ROWS)  # window k covers base+k .. base+k+W-1
    first_full = max(lo, LOCAL_MEAN_ROWS)
    if first_full < n:
        idx = np.arange(first_full, n)
        mean_local[idx - lo] = windows[idx - LOCAL_MEAN_ROWS - base].mean(axis=1)
    for i in range(max(lo, 1), min(first_full, n)):
        mean_local[i - lo] = values[:i].mean()
    candidates.append(mean_local)

    if period is not None:
        tolerance = 0.5 * step
        season1 = _seasonal_rows(times, rows, period, tolerance)
        prev_rows = np.maximum(rows - 1, 0)
        season1_prev = _seasonal_rows(times, prev_rows, period, tolerance)
        season2 = _seasonal_rows(times, rows, 2 * period, tolerance)
        season3 = _seasonal_rows(times, rows, 3 * period, tolerance)
        naive = np.where(season1 >= 0, values[np.maximum(season1, 0)], np.nan)
        candidates.append(naive)
        prev_naive = np.where(season1_prev >= 0, values[np.maximum(season1_prev, 0)], np.nan)
        level = np.where((rows >= 1) & (season1_prev >= 0), last + naive - prev_naive, np.nan)
        candidates.append(level)
        ok3 = (season1 >= 0) & (season2 >= 0) & (season3 >= 0)
        three = (values[np.maximum(season1, 0)] + values[np.maximum(season2, 0)] + values[np.maximum(season3, 0)]) / 3
        candidates.append(np.where(ok3, three, np.nan))

    # Seasonal predictors first: on a tie (a flat night before a daily step) the season wins.
    predictions = np.vstack(candidates[2:] + candidates[:2])  # (k, m)
    errors = np.abs(predictions - y)  # NaN where a predictor has no value
    # Recent mean error of each predictor over the CHOOSER_ROWS rows before i; NaN (never chosen) when
    # any of those rows lacked the predictor. Rows with a shorter history use what they have.
    recent = np.full(predictions.shape, np.inf)
    if m > CHOOSER_ROWS:
        full = sliding_window_view(errors[:, :-1], CHOOSER_ROWS, axis=1).mean(axis=2)  # (k, m-CHOOSER_ROWS)
        recent[:, CHOOSER_ROWS:] = np.where(np.isnan(full), np.inf, full)
    if lo == 0:
        # The first rows have a shorter history; they are only ever computed from row 0, so this stays exact.
        for j in range(2, min(m, CHOOSER_ROWS + 1)):
            with np.errstate(invalid="ignore"):
                means = errors[:, 1:j].mean(axis=1)
            recent[:, j] = np.where(np.isnan(means), np.inf, means)
    choice = np.argmin(recent, axis=0)
    choice[~np.isfinite(recent.min(axis=0))] = 0
    expected = predictions[choice, np.arange(m)]
    expected = np.where(np.isnan(expected), y, expected)
    residual = y - expected
    magnitude = np.abs(residual)

    halfwidth = np.zeros(m)
    floor_scale = _floor(values, lo, n)
    if m > BAND_ROWS:
        window = sliding_window_view(magnitude[:-1], BAND_ROWS)
        halfwidth[BAND_ROWS:] = BAND_MARGIN * np.quantile(window, confidence, axis=1, method="higher")
    if lo == 0:
        for j in range(WARMUP, min(m, BAND_ROWS + 1)):
            halfwidth[j] = BAND_MARGIN * np.quantile(magnitude[1:j], confidence, method="higher")
    halfwidth = np.maximum(halfwidth, floor_scale)

    return _result(y, expected, halfwidth, start - lo, lo, period, step)


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
    score = 1.0 - np.power(0.5, np.power(ratio, SCORE_POWER))
    score = np.where(warm, 0.0, np.clip(score, 0.0, 1.0))
    expected = np.where(warm, y, expected)
    halfwidth = np.where(warm, 0.0, halfwidth)
    anomaly = score >= 0.5
    direction = [
        ("up" if r > 0 else "down") if a else None
        for r, a in zip(residual[judged].tolist(), anomaly[judged].tolist(), strict=True)
    ]
    return DetectionResult(
        expected=expected[judged].tolist(),
        lower=(expected - halfwidth)[judged].tolist(),
        upper=(expected + halfwidth)[judged].tolist(),
        score=score[judged].tolist(),
        is_anomaly=anomaly[judged].tolist(),
        direction=direction,
        warmup_points=min(WARMUP, lo + m),
        period=None if period is None or step <= 0 else int(round(period / step)),
    )


def median_detector(times: np.ndarray, values: np.ndarray, confidence: float, start: int) -> DetectionResult:
    n = len(values)
    start = max(0, min(start, n))
    lo = max(0, start - FALLBACK_MEDIAN_ROWS)
    y = values[lo:n]
    m = len(y)
    expected = y.copy()
    halfwidth = np.zeros(m)
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    first_full = max(lo, FALLBACK_MEDIAN_ROWS)
    if first_full < n:
        base = first_full - FALLBACK_MEDIAN_ROWS
        history = sliding_window_view(values[base : n - 1], FALLBACK_MEDIAN_ROWS)  # window k: rows before first_full+k
        medians = np.median(history, axis=1)
        spread = np.median(np.abs(history - medians[:, None]), axis=1)
        expected[first_full - lo :] = medians
        halfwidth[first_full - lo :] = FALLBACK_MARGIN * z * 1.4826 * spread
    for i in range(max(lo, WARMUP), min(first_full, n)):
        history = values[:i]
        median = float(np.median(history))
        expected[i - lo] = median
        halfwidth[i - lo] = FALLBACK_MARGIN * z * 1.4826 * float(np.median(np.abs(history - median)))
    halfwidth = np.maximum(halfwidth, _floor(values, lo, n))
    return _result(y, expected, halfwidth, start - lo, lo, None, nominal_step(times))
