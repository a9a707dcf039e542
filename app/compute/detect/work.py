"""The detection work the web process hands to the worker pool, and what comes back.

Shared by POST /anomalies, the Azure-compatible routes and monitors. Nothing numeric is imported at
module level: the web process imports this module, and the detectors load numpy inside ``run()``.

Guarantees callers rely on:
- Causal and deterministic: row i's verdict depends only on rows 0..i (values and times), so judging
  rows [start, n) gives exactly the same numbers for those rows as judging [0, n).
- The cost of judging [start, n) is proportional to (n - start) plus a bounded look-back window.
- Every number is finite and lower <= expected <= upper.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.compute.detect.results import DEFAULT_DETECTOR, ChangePointResult, DetectionResult


@dataclass(frozen=True)
class DetectionWork:
    epoch_seconds: Any  # int64 numpy array (or list[int]): every row's time, UTC seconds
    values: Any  # float64 numpy array (or list[float]), same length
    data_frequency: str  # "Seconds" ... "Yearly": the nominal spacing, which sets the seasonality tried
    # The threshold: a share of normal rows to keep below it (0.5 .. 0.9999), or else false alarms a normal
    # stream may raise per week (default one).
    confidence: float | None = None
    detector: str | None = None  # None = the default detector
    start: int = 0  # judge rows start..n-1 only; the rows before are history
    # Seasonality in rows to use instead of the one data_frequency suggests; 0 = no seasonality.
    period: int | None = None
    false_alarms_per_week: float | None = None

    @property
    def label(self) -> str:
        return self.detector or DEFAULT_DETECTOR

    def run(self) -> DetectionResult:
        from app.compute.detect.detectors import detect

        return detect(self)


@dataclass(frozen=True)
class ChangePointWork:
    """Where the level of a series shifts, judged on the whole series (rows before and after each row)."""

    values: Any  # float64 numpy array or list of floats
    stable_trend_window: int  # rows on each side that must stay level around a change
    threshold: float  # 0 < threshold < 1: the least confidence that makes a change point
    period: int | None = None  # seasonality in rows, removed before looking for level shifts

    @property
    def label(self) -> str:
        return "change-point"

    def run(self) -> ChangePointResult:
        from app.compute.detect.changepoint import detect_change_points

        return detect_change_points(self)
