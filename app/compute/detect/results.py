"""The detectors' ids and what detection work returns to the web process (plain lists, picklable)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_DETECTOR = "anomaly-model-1"
# The simpler detector answers when the default one fails; it can also be asked for by name.
FALLBACK_DETECTOR = "anomaly-model-2"
DETECTOR_IDS: tuple[str, ...] = (DEFAULT_DETECTOR, FALLBACK_DETECTOR)
SENSITIVITY_RANGE = (0, 99)


@dataclass(frozen=True)
class DetectionResult:
    """Plain Python lists, one entry per judged row (rows start..n-1)."""

    expected: list[float]
    lower: list[float]
    upper: list[float]
    score: list[float]  # in [0, 1]; is_anomaly == (score >= threshold)
    is_anomaly: list[bool]
    direction: list[str | None]  # "up" | "down" | None (None for a row that is not an anomaly)
    warmup_points: int  # how many of ALL n rows (from row 0) are warm-up
    period: int | None  # seasonality used, in rows, or None
    threshold: float = 0.5  # the least score of an anomaly
    fallback: str | None = None  # why the fallback detector answered instead of the requested one
    # An incident is open after the row (the default detector's incidents; None: each anomaly is its own).
    incident: list[bool] | None = None
    # Which signal flagged each row and its size (app.compute.detect.state's codes; None: the detector keeps none).
    signal: list[int] | None = None
    size: list[float] | None = None


@dataclass(frozen=True)
class ChangePointResult:
    is_change_point: list[bool]
    confidence: list[float]  # in [0, 1], one per row
    period: int | None
