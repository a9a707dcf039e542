"""Per-frequency choices of the forecast models, in one table.

A model sees a history and its usable seasonal periods (app.compute.forecast.base.usable_periods), not a
frequency name, so the row is read off the shortest usable period: none (yearly data, or a history too
short for two cycles of its season), at most 4 points (quarterly), at most 12 (monthly; daily data's week
of 7), at most 24 (hourly), longer (weekly data's 52, minute data's 60).

``evaluation_horizon`` is the window every rolling-origin evaluation uses: candidate ranking, combination
weights, interval calibration. It is the forecasting competitions' horizon for that frequency (M4: yearly 6,
quarterly 8, monthly 18, hourly 48, weekly 13), not the requested horizon, so a forecast's first k steps
are the horizon-k forecast (median and interval): the requested horizon only says how far the point
forecast and the interval's horizon profile are carried.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class FrequencyRow:
    name: str
    max_period: float  # the row covers a shortest usable period up to this many points (0: no period)
    evaluation_horizon: int


FREQUENCY_TABLE: tuple[FrequencyRow, ...] = (
    FrequencyRow("yearly", 0, 6),
    FrequencyRow("quarterly", 4, 8),
    FrequencyRow("monthly", 12, 18),
    FrequencyRow("hourly", 24, 48),
    FrequencyRow("weekly", math.inf, 13),
)


def frequency_row(periods: tuple[int, ...]) -> FrequencyRow:
    """The table's row for a history whose usable periods (ascending) are ``periods``."""
    shortest = periods[0] if periods else 0
    return next(row for row in FREQUENCY_TABLE if shortest <= row.max_period)


def evaluation_horizon(periods: tuple[int, ...], overrides: Mapping[str, int] | None = None) -> int:
    """The row's evaluation horizon, or a model's own for that row (``overrides``, by row name)."""
    row = frequency_row(periods)
    return (overrides or {}).get(row.name, row.evaluation_horizon)
