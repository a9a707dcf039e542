"""The detectors' ids and what a detection job returns to the web process (plain lists, picklable)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_DETECTOR = "anomaly-model-1"
# The simpler detector answers when the default one fails; it can also be asked for by name.
FALLBACK_DETECTOR = "anomaly-model-2"
DETECTOR_IDS: tuple[str, ...] = (DEFAULT_DETECTOR, FALLBACK_DETECTOR)
SENSITIVITY_RANGE = (0, 99)


DEFAULT_FALSE_ALARMS_PER_WEEK = 1.0  # one false page a week per metric: what an on-call person can live with
# What the schemas accept: the range the older confidence knob spans (0.9999 .. 0.5).
BUDGET_RANGE = (0.01, 50.0)


def budget_for_confidence(confidence: float) -> float:
    """The older ``confidence`` knob as a budget: 0.99 (its default) is the default budget, and every factor ten
    in the share of normal points outside the range is a factor ten in alarms (0.9999: 0.01 a week)."""
    return DEFAULT_FALSE_ALARMS_PER_WEEK * (1.0 - confidence) / 0.01


def confidence_for_budget(false_alarms_per_week: float) -> float:
    """The ``confidence`` a job carries for a budget (the inverse of budget_for_confidence)."""
    return 1.0 - 0.01 * false_alarms_per_week / DEFAULT_FALSE_ALARMS_PER_WEEK


def budget_for_sensitivity(sensitivity: int) -> float:
    """Azure's 0-99 sensitivity as a budget: 99 is the default budget and every 49.5 points lower is ten times
    fewer alarms (0: 0.01 a week, a hundred times fewer than 99). Higher means more anomalies."""
    return DEFAULT_FALSE_ALARMS_PER_WEEK * 10.0 ** (2.0 * (sensitivity - 99) / 99.0)


def confidence_for_sensitivity(sensitivity: int) -> float:
    """Azure's sensitivity as the ``confidence`` a job carries (its budget: budget_for_sensitivity)."""
    return confidence_for_budget(budget_for_sensitivity(sensitivity))


@dataclass(frozen=True)
class DetectionResult:
    """Plain Python lists, one entry per judged row (rows start..n-1)."""

    expected: list[float]
    lower: list[float]
    upper: list[float]
    score: list[float]  # in [0, 1]: 1 - the chance a normal row is as surprising; is_anomaly == (score >= threshold)
    is_anomaly: list[bool]
    direction: list[str | None]  # "up" | "down" | None (None for a row that is not an anomaly)
    warmup_points: int  # how many of ALL n rows (from row 0) are warm-up
    period: int | None  # seasonality used, in rows, or None
    fallback: str | None = None  # why the fallback detector answered instead of the requested one
    threshold: float = 0.5  # the score at which a row is an anomaly: 1 - budget per week / rows per week
    # Per judged row: "open" when it opened an incident, "closed"/"adopted"/"feedback" when one ended at it.
    incident: list[str | None] | None = None


@dataclass(frozen=True)
class ChangePointResult:
    is_change_point: list[bool]
    confidence: list[float]  # in [0, 1], one per row
    period: int | None
