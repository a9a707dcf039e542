"""What models 1, 2 and 4 do differently by the length of a history's shortest usable season: one table each.

The season classes stand for the data frequencies of the development sets: no usable period (yearly
data, or a history too short for two cycles), a shortest period of at most 4 points (quarterly), of 5 to
12 points (monthly) and longer (hourly, weekly: 24 or 52 points). Model-1 reads every column; model-2
``keep``, ``three_cycle`` and ``trend_floor_up_to``; model-4 ``keep`` and ``trend_floor_up_to``.

A rule stays where it helps a development set it was not chosen on, and no set may lose more than 0.5% of
sMAPE or MASE, or move its 95% coverage away from 0.93-0.97, without it. The figures behind every rule:
bench/results/forecast-rules.md and bench/results/rule-ablations.md.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum
from typing import Literal

from app.compute.forecast.candidates import RECENT_FLOOR, SHORT_PERIODIC_POOL, SHORT_POOL

QUARTERLY_PERIOD = 4  # longest shortest-period of the quarterly class
MONTHLY_PERIOD = 12  # longest shortest-period of the monthly class


class Season(Enum):
    NONE = "no usable period"
    QUARTERLY = "shortest period of at most 4 points"
    MONTHLY = "shortest period of 5 to 12 points"
    LONG = "shortest period of more than 12 points"


def season_of(periods: tuple[int, ...]) -> Season:
    """The class of a history's usable periods (ascending)."""
    if not periods:
        return Season.NONE
    if periods[0] <= QUARTERLY_PERIOD:
        return Season.QUARTERLY
    if periods[0] <= MONTHLY_PERIOD:
        return Season.MONTHLY
    return Season.LONG


@dataclass(frozen=True)
class SeasonRules:
    keep: int | None  # members kept by rank at the origins (None: every member)
    # trend members on the last 3 cycles as well as the last 5 (only where the two windows differ)
    three_cycle: bool = False
    # choices of a short history without a strong season (model-1 only; empty: no short path)
    short_pool: tuple[tuple[str, ...], ...] = ()
    # when model-2's Theta pair joins the pool: never, always, or on long strongly seasonal histories only
    pair: Literal["never", "always", "long seasonal"] = "never"
    pair_share: float = 0.0  # its fixed share on a long strongly seasonal history
    mstl_share: float = 0.0  # model-3's median's fixed share on a short strongly seasonal history
    trend_floor_up_to: float = 0  # histories of at most this many points get the trend floor (intervals)


def with_rules(table: dict[Season, SeasonRules], **changes: object) -> dict[Season, SeasonRules]:
    """The table with the same changes in every row (tests and design experiments)."""
    return {season: replace(rules, **changes) for season, rules in table.items()}  # type: ignore[arg-type]


# Trend floor: a short yearly or quarterly history is a trend whose errors outgrow a random walk's (fit_errors).
TREND_FLOOR_UP_TO = RECENT_FLOOR

# Model-1 (ValidatedCombination); the figures behind each column: bench/results/forecast-rules.md, "Model-1".
# keep: all members on monthly data, the best 3 elsewhere (hourly and weekly data lost from more).
# three_cycle: a season longer than monthly data's can move within the 5-cycle window, so 3 cycles are offered too.
# short_pool: a short history ranks few cut windows, so it picks one of two fixed combinations (candidate_pool).
# pair: model-2's Theta pair with a fixed share, since ranking 17 members on a few 8-step windows chases noise.
# mstl_share: model-3's STL-adjusted median lags short growing quarterly series less than classical adjustment.
MODEL_1_SEASONS: dict[Season, SeasonRules] = {
    Season.NONE: SeasonRules(keep=3, short_pool=SHORT_POOL, trend_floor_up_to=TREND_FLOOR_UP_TO),
    Season.QUARTERLY: SeasonRules(keep=3, short_pool=SHORT_POOL, pair="always", pair_share=0.5, mstl_share=0.3,
                                  trend_floor_up_to=TREND_FLOOR_UP_TO),
    Season.MONTHLY: SeasonRules(keep=None, short_pool=SHORT_PERIODIC_POOL, pair="long seasonal", pair_share=0.25),
    Season.LONG: SeasonRules(keep=3, three_cycle=True),
}

# Model-2 (ThetaCombination); the figures: bench/results/forecast-rules.md, "Model-2".
# keep: both members, weighted, on quarterly and monthly data, where the better one alone lost on all four sets.
# three_cycle: the optimised Theta method on the last 3 cycles follows a long season that moves within 5.
MODEL_2_SEASONS: dict[Season, SeasonRules] = {
    Season.NONE: SeasonRules(keep=1, trend_floor_up_to=TREND_FLOOR_UP_TO),
    Season.QUARTERLY: SeasonRules(keep=None, trend_floor_up_to=TREND_FLOOR_UP_TO),
    Season.MONTHLY: SeasonRules(keep=None),
    Season.LONG: SeasonRules(keep=1, three_cycle=True),
}

# Model-4 (SpikeRobustCombination); the figures: bench/results/forecast-rules.md, "Model-4".
# keep: the best 2, every member on monthly data as in model-1; no 3-cycle members: they double the fits, and what
# they bought on each development set is weighed in that file's "No 3-cycle members".
MODEL_4_SEASONS: dict[Season, SeasonRules] = {
    Season.NONE: SeasonRules(keep=2, trend_floor_up_to=TREND_FLOOR_UP_TO),
    Season.QUARTERLY: SeasonRules(keep=2, trend_floor_up_to=TREND_FLOOR_UP_TO),
    Season.MONTHLY: SeasonRules(keep=None),
    Season.LONG: SeasonRules(keep=2),
}
