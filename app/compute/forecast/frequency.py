"""The rolling-origin evaluation horizon of every forecast model, per frequency, in one table (their other
choices by season: app.compute.forecast.seasons).

A model sees a history and its usable seasonal periods (app.compute.forecast.base.usable_periods), not a
frequency name, so the row is read off the shortest usable period: at most 4 points (quarterly), at most 12
(monthly; daily data's week of 7), at most 24 (hourly), longer (weekly data's 52, minute data's 60). A history
with no usable period is yearly data up to RECENT_FLOOR points; a longer one is data too short for two cycles
of its own long season (weekly data under two years, 53-103 points), not 60+ years, and takes the last row.
That split is the one the trend floor already makes (app.compute.forecast.seasons, TREND_FLOOR_UP_TO); the
rows are five, not the season table's four, because hourly and weekly data are judged on different windows.

``evaluation_horizon`` is the window every rolling-origin evaluation uses: candidate ranking, combination
weights, interval calibration. It is the forecasting competitions' horizon for that frequency (M4: yearly 6,
quarterly 8, monthly 18, hourly 48, weekly 13), not the requested horizon, so a forecast's first k steps
are the horizon-k forecast (median and interval): the requested horizon only says how far the point
forecast and the interval's horizon profile are carried. The figures behind both choices below:
bench/results/forecast-rules.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from app.compute.forecast.candidates import RECENT_FLOOR


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


def frequency_row(periods: tuple[int, ...], n: int) -> FrequencyRow:
    """The table's row for a history of n points whose usable periods (ascending) are ``periods``."""
    if not periods and n > RECENT_FLOOR:
        # weekly data under two years, not yearly: the yearly row's short windows widened their intervals
        return FREQUENCY_TABLE[-1]
    shortest = periods[0] if periods else 0
    return next(row for row in FREQUENCY_TABLE if shortest <= row.max_period)


def evaluation_horizon(periods: tuple[int, ...], n: int, overrides: Mapping[str, int] | None = None) -> int:
    """The row's evaluation horizon, or a model's own for that row (``overrides``, by row name)."""
    row = frequency_row(periods, n)
    return (overrides or {}).get(row.name, row.evaluation_horizon)


# Models 3 and 4 judge yearly data on 4-step windows: both gain on both yearly sets, model-1 would lose on both.
SHORT_YEARLY_WINDOWS: Mapping[str, int] = {"yearly": 4}
