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
look-back of BAND_ROWS + CHOOSER_ROWS rows plus the seasonal look-ups.
"""

from __future__ import annotations

import logging
import math
from statistics import NormalDist
from typing import TYPE_CHECKING

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from app.compute.detect.results import BAND_BLOCK, BAND_ROWS, CHOOSER_ROWS, WARMUP
from app.series.frequencies import nominal_step, period_seconds

if TYPE_CHECKING:
    from app.compute.detect.jobs import DetectJob
from app.compute.detect.results import DEFAULT_DETECTOR, FALLBACK_DETECTOR, DetectionResult

log = logging.getLogger("app.detect")

LOCAL_MEAN_ROWS = 8
BAND_MARGIN = 1.5
BAND_QUANTILE = 0.99
RECENT_ROWS = 12
# Errors are compared through a small power, so one huge miss does not disqualify an otherwise close predictor.
CHOOSER_POWER = 0.25
RECENT_FACTOR = 1.0
SCORE_POWER = 2.0

FALLBACK_MEDIAN_ROWS = 48
FALLBACK_MARGIN = 1.5


def detect(job: DetectJob) -> DetectionResult:
    times = np.asarray(job.epoch_seconds, dtype=np.float64)
    values = np.asarray(job.values, dtype=np.float64)
    detector = job.detector or DEFAULT_DETECTOR
    if detector not in (DEFAULT_DETECTOR, FALLBACK_DETECTOR):
        raise ValueError(f"unknown detector {detector!r}")
    if job.start >= len(values):  # nothing to judge (a monitor with no new rows)
        rows = None
        if detector == DEFAULT_DETECTOR:
            step = nominal_step(times)
            seconds = period_seconds(job.data_frequency, step) if job.period is None else job.period * step
            rows = round(seconds / step) if seconds and step > 0 else None
        return DetectionResult([], [], [], [], [], [], min(WARMUP, len(values)), rows if rows and rows >= 2 else None)
    if detector == DEFAULT_DETECTOR:
        try:
            result = adaptive_detector(times, values, job.data_frequency, job.confidence, job.start, job.period)
            return result
        except Exception as exc:  # noqa: BLE001 - any failure of the default detector falls back
            log.warning("anomaly-model-1 failed (%s: %s); answering with anomaly-model-2", type(exc).__name__, exc)
            fallback = f"{DEFAULT_DETECTOR} failed ({type(exc).__name__}); answered by {FALLBACK_DETECTOR}"
            result = median_detector(times, values, job.confidence, job.start)
            return DetectionResult(**{**result.__dict__, "fallback": fallback})
    result = median_detector(times, values, job.confidence, job.start)
    return result


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
    times: np.ndarray,
    values: np.ndarray,
    data_frequency: str,
    confidence: float,
    start: int,
    period_rows: int | None = None,
) -> DetectionResult:
    n = len(values)
    start = max(0, min(start, n))
    step = nominal_step(times)
    if period_rows is None:
        period = period_seconds(data_frequency, step)
    else:
        period = period_rows * step if period_rows >= 2 and step > 0 else None
    # What judging rows [start, n) needs, walking back: the band of row i reads the errors of the
    # BAND_ROWS rows before its block start; each of those rows was predicted by the predictor with the
    # smallest error over the CHOOSER_ROWS rows before it.
    band_from = max(0, (start // BAND_BLOCK) * BAND_BLOCK - BAND_ROWS)
    lo = max(0, band_from - CHOOSER_ROWS)
    rows = np.arange(lo, n)
    y = values[lo:n]
    m = len(rows)

    predictions = _candidates(times, values, rows, period, step)
    errors = np.abs(predictions - y) ** CHOOSER_POWER  # NaN where a predictor has no value
    # Mean error of each predictor over the CHOOSER_ROWS rows before i, for rows band_from..n-1; inf (never
    # chosen) when any of those rows lacked the predictor. The first rows of a series use what they have.
    first = band_from - lo
    recent = np.full((len(predictions), m - first), np.inf)
    full_from = max(first, CHOOSER_ROWS + 1 - lo) if lo == 0 else first
    if full_from < m:
        windows = sliding_window_view(errors[:, full_from - CHOOSER_ROWS : m - 1], CHOOSER_ROWS, axis=1)
        means = windows.mean(axis=2)
        recent[:, full_from - first :] = np.where(np.isnan(means), np.inf, means)
    for j in range(max(first, 2), min(full_from, m)):
        with np.errstate(invalid="ignore"):
            means = errors[:, 1:j].mean(axis=1)
        recent[:, j - first] = np.where(np.isnan(means), np.inf, means)
    choice = np.argmin(recent, axis=0)
    # With nothing scored yet (the first rows), the last value is the prediction.
    choice[~np.isfinite(recent.min(axis=0))] = len(predictions) - 2
    expected = predictions[choice, np.arange(first, m)]
    observed = y[first:]
    expected = np.where(np.isnan(expected), observed, expected)
    magnitude = np.abs(observed - expected)  # rows band_from..n-1

    # The band is recomputed at every BAND_BLOCK-th row (rows before the block start only), which keeps
    # a whole-series request cheap; the recent-surprise term below reacts row by row.
    # The range is read off a moderate quantile of the recent errors and stretched to the confidence asked
    # for as a normal distribution would be: a few past anomalies cannot inflate it, as they would the
    # 99th percentile of a short history.
    stretch = BAND_MARGIN * _two_sided_z(confidence) / _two_sided_z(BAND_QUANTILE)
    judged = np.arange(start, n)
    block_ends = (judged // BAND_BLOCK) * BAND_BLOCK
    ends, where = np.unique(block_ends, return_inverse=True)
    per_block = np.zeros(len(ends))
    full = ends - BAND_ROWS >= max(1, band_from)
    if full.any():
        # All full windows at once: one partition of a (blocks x BAND_ROWS) array.
        windows = sliding_window_view(magnitude, BAND_ROWS)[ends[full] - BAND_ROWS - band_from]
        rank = _higher_rank(BAND_ROWS)
        per_block[full] = np.partition(windows, rank, axis=1)[:, rank]
    for index in np.flatnonzero(~full):
        window = magnitude[max(1, ends[index] - BAND_ROWS) - band_from : ends[index] - band_from]
        if len(window):
            rank = _higher_rank(len(window))
            per_block[index] = np.partition(window, rank)[rank]
    band = stretch * per_block[where]
    halfwidth = band
    if RECENT_ROWS > 0:
        # A surprise no larger than one just seen is not news: after a spike or a step the range widens
        # to the recent errors, so one incident is one anomaly, not a run of them.
        padded = np.concatenate([np.zeros(max(0, RECENT_ROWS - (start - band_from))), magnitude])
        offset = len(padded) - len(magnitude)
        recent_max = sliding_window_view(padded[:-1], RECENT_ROWS).max(axis=1)
        halfwidth = np.maximum(halfwidth, RECENT_FACTOR * recent_max[judged - band_from + offset - RECENT_ROWS])
    halfwidth = np.maximum(halfwidth, _floor(values, start, n))
    return _result(values[start:n], expected[start - band_from :], halfwidth, 0, start, period, step)


def _candidates(
    times: np.ndarray, values: np.ndarray, rows: np.ndarray, period: float | None, step: float
) -> np.ndarray:
    """One-step predictions of every predictor for `rows` (one row per predictor, NaN where it has none).

    Seasonal predictors come first: on a tie (a flat night before a daily step) the season wins.
    """
    lo, n = int(rows[0]), int(rows[-1]) + 1
    m = len(rows)
    last = np.full(m, np.nan)
    last[rows >= 1] = values[rows[rows >= 1] - 1]
    mean_local = np.full(m, np.nan)
    # Mean of the LOCAL_MEAN_ROWS rows before i, each window taken whole from the full array.
    first_full = max(lo, LOCAL_MEAN_ROWS)
    if first_full < n:
        base = first_full - LOCAL_MEAN_ROWS
        windows = sliding_window_view(values[base : n - 1], LOCAL_MEAN_ROWS)
        mean_local[first_full - lo :] = windows.mean(axis=1)
    for i in range(max(lo, 1), min(first_full, n)):
        mean_local[i - lo] = values[:i].mean()
    local = [last, mean_local]
    if period is None:
        return np.vstack(local)

    tolerance = 0.5 * step
    season1 = _seasonal_rows(times, rows, period, tolerance)
    season1_prev = _seasonal_rows(times, np.maximum(rows - 1, 0), period, tolerance)
    season2 = _seasonal_rows(times, rows, 2 * period, tolerance)
    season3 = _seasonal_rows(times, rows, 3 * period, tolerance)
    naive = np.where(season1 >= 0, values[np.maximum(season1, 0)], np.nan)
    prev_naive = np.where(season1_prev >= 0, values[np.maximum(season1_prev, 0)], np.nan)
    level = np.where((rows >= 1) & (season1_prev >= 0), last + naive - prev_naive, np.nan)
    ok3 = (season1 >= 0) & (season2 >= 0) & (season3 >= 0)
    lags = np.vstack([values[np.maximum(season, 0)] for season in (season1, season2, season3)])
    # The median of three seasons ignores one odd day, so an anomaly is not echoed a period later.
    median3 = np.where(ok3, np.median(lags, axis=0), np.nan)
    return np.vstack([naive, level, median3, *local])


def _higher_rank(size: int) -> int:
    """Index of the BAND_QUANTILE quantile in a sorted window (numpy's method="higher")."""
    return min(size - 1, math.ceil(BAND_QUANTILE * (size - 1)))


def _two_sided_z(probability: float) -> float:
    return NormalDist().inv_cdf(0.5 + probability / 2)


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
        lifted = np.power(ratio, SCORE_POWER)
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
