"""The alarm budget: how many false alarms a stream without anomalies may raise per week, as the share of its
rows that may be flagged. Plain Python: the web side reads it to check requests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The request fields that set the threshold: at most one of them is given.
THRESHOLD_FIELDS = ("false_alarms_per_week", "confidence", "sensitivity")
# false_alarms_per_week: from one in a thousand weeks to a thousand a week (more is capped at one row in 100).
FALSE_ALARMS_RANGE = (0.001, 1000.0)
WEEK_SECONDS = 7 * 86400.0
DEFAULT_FALSE_ALARMS_PER_WEEK = 1.0
MAX_ROW_PROBABILITY = 0.01  # however coarse the data, a normal row is flagged at most once in 100


def threshold_fields_given(fields: Mapping[str, Any]) -> list[str]:
    """The threshold fields given a value (null counts as absent), in THRESHOLD_FIELDS' order."""
    return [name for name in THRESHOLD_FIELDS if fields.get(name) is not None]


def budget_for_sensitivity(sensitivity: int) -> float:
    """Azure's 0-99 sensitivity as false alarms per stream per week: 49.5 is the default (one a week), every
    24.75 points higher allows ten times more (0: one in a hundred weeks; 99: a hundred a week)."""
    return 10.0 ** (-2.0 + 4.0 * sensitivity / 99.0)


def row_probability(false_alarms_per_week: float, step_seconds: float) -> float:
    """The share of a normal stream's rows that may be flagged: the weekly budget over a week of rows (a
    stream whose step is unknown is taken as one row a minute), never more than one row in 100."""
    rows_per_week = WEEK_SECONDS / (step_seconds if step_seconds > 0 else 60.0)
    return min(MAX_ROW_PROBABILITY, false_alarms_per_week / rows_per_week)
