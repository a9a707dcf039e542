"""What models 1, 2 and 4 do differently by the length of a history's shortest usable season: one table each.

The season classes stand for the data frequencies of the development sets: no usable period (yearly
data, or a history too short for two cycles), a shortest period of at most 4 points (quarterly), of 5 to
12 points (monthly) and longer (hourly, weekly: 24 or 52 points). The figures behind each choice were
measured on those sets' training rows (bench/accuracy.py --split valid) and holdouts. Model-1 reads every
column; model-2 ``keep``, ``three_cycle`` and ``trend_floor_up_to``; model-4 ``keep`` and ``trend_floor_up_to``.

A rule stays where it helps a development set it was not chosen on, and no set may lose more than 0.5% of
sMAPE or MASE, or move its 95% coverage away from 0.93-0.97, without it. The figures below, unless said
otherwise, are bench/rule_ablations.py's: every holdout series of the two sets a rule touches, the rule
removed -> kept (its class then does what the model's other classes do); sMAPE / MASE, or MSIS / 95%
coverage for interval rules.
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


# Trend floor (models 1, 2 and 4): a yearly or quarterly history of at most TREND_FLOOR_UP_TO points is mostly a
# trend whose errors grow faster than a random walk's (see intervals.fit_errors). Chosen on M1 Quarterly's 31-60
# point series (training rows); without it 95% coverage falls further below the band there and on M1 Yearly, and
# it helps Tourism Yearly (model-4) and Tourism Quarterly (model-2). Yearly data, model-1 / -2 / -4, MSIS /
# coverage: M1 Yearly 42.35 / 0.894 -> 38.38 / 0.924, 43.69 / 0.900 -> 40.66 / 0.931, 45.60 / 0.853 -> 37.89 /
# 0.920; Tourism Yearly 21.06 / 0.950 -> 21.09 / 0.959, 21.22 / 0.950 -> 21.25 / 0.957, 22.51 / 0.940 -> 22.44 /
# 0.957. Quarterly data: M1 Quarterly 17.86 / 0.896 -> 17.71 / 0.917, 17.87 / 0.906 -> 17.98 / 0.914, 18.34 /
# 0.874 -> 17.79 / 0.895; Tourism Quarterly 12.30 / 0.968 -> 12.35 / 0.972, 12.75 / 0.975 -> 12.68 / 0.975,
# 12.89 / 0.960 -> 12.90 / 0.966. A longer series with no usable period is not yearly but too short for its own
# season (weekly data under two years), and a longer quarterly one sees every step from its origins.
TREND_FLOOR_UP_TO = RECENT_FLOOR

# Model-1 (ValidatedCombination).
# keep: every member on monthly data, weighted by their errors; the best 3 elsewhere (hourly and weekly data lost
# from more: M4 OWA 0.427 -> 0.432 Hourly, 0.796 -> 0.839 Weekly, training rows). Best 3 -> all: M1 Monthly
# 14.253 / 1.057 -> 13.993 / 1.040, Tourism Monthly 18.229 / 1.429 -> 17.992 / 1.410.
# three_cycle: a season longer than monthly data's (hourly, weekly) can move within the 5-cycle window (a month
# of hourly data, two years of weekly): the trend members on the last 3 cycles as well. Chosen on both M4 sets'
# training rows (OWA 0.4539 -> 0.4482 Hourly, 0.7390 -> 0.7192 Weekly); holdouts M4 Weekly 6.391 / 2.124 ->
# 6.278 / 2.043, M4 Hourly 9.128 / 0.841 -> 9.129 / 0.843. For a season of at most 12 points both windows are
# RECENT_FLOOR points, and a duplicate member would count twice among the chosen.
# short_pool (see ValidatedCombination.candidate_pool): SHORT_POOL with no season or one of at most 4 points,
# chosen on M1 Yearly, Tourism Yearly and M1 Quarterly's training rows: M1 Yearly 18.303 / 3.821 -> 17.121 /
# 3.570, Tourism Yearly 20.722 / 2.729 -> 20.466 / 2.625, M1 Quarterly 15.482 / 1.591 -> 15.077 / 1.594, Tourism
# Quarterly 14.397 / 1.510 -> 14.310 / 1.508 (its 21 such series). SHORT_PERIODIC_POOL with a season of 5-12
# points: only M1 Monthly has such series (108), where it was chosen, so no other set can confirm it; it stays
# because M1 Monthly would lose more than 0.5% without it: 14.152 / 1.044 -> 13.993 / 1.040. No development
# series of a longer season is short enough for the short path, so that class has none.
# pair: model-2's weighted pair of Theta forecasts as one member; on a long strongly seasonal history it holds
# pair_share of the weight whatever its rank (ranking 17 members on a few 8-step windows chases noise).
# Quarterly (share 0.5), chosen on Tourism Quarterly: M1 Quarterly does not gain (15.083 / 1.591 -> 15.077 /
# 1.594), but Tourism Quarterly would lose 3% without it (14.747 / 1.563 -> 14.310 / 1.508). Monthly, on long
# strongly seasonal histories only (share 0.25; at 0.5 M1 Monthly's training rows lost), chosen on Tourism Monthly
# (18.027 / 1.423 -> 17.992 / 1.410); M1 Monthly gains a little on both splits (training rows 17.64 -> 17.63,
# holdouts 14.007 -> 13.993).
# mstl_share, quarterly: a short strongly seasonal quarterly history gives model-3's median a fixed share: its
# STL-adjusted damped trend or exponential smoothing lags these growing series less than the classically
# adjusted members. Chosen on M1 Quarterly (holdouts 15.398 / 1.618 -> 15.077 / 1.594); it helps Tourism
# Quarterly's training rows (18.548 / 1.869 -> 18.461 / 1.862, MSIS 14.34 -> 14.33, coverage 0.948 -> 0.952)
# and leaves its holdouts within 0.1% (14.295 / 1.505 -> 14.310 / 1.508). Model-3 runs at each of up to 12
# origins: a 40-point quarterly forecast took 0.64 s of CPU against 0.25-0.29 s (bench/model_latency.py).
MODEL_1_SEASONS: dict[Season, SeasonRules] = {
    Season.NONE: SeasonRules(keep=3, short_pool=SHORT_POOL, trend_floor_up_to=TREND_FLOOR_UP_TO),
    Season.QUARTERLY: SeasonRules(keep=3, short_pool=SHORT_POOL, pair="always", pair_share=0.5, mstl_share=0.3,
                                  trend_floor_up_to=TREND_FLOOR_UP_TO),
    Season.MONTHLY: SeasonRules(keep=None, short_pool=SHORT_PERIODIC_POOL, pair="long seasonal", pair_share=0.25),
    Season.LONG: SeasonRules(keep=3, three_cycle=True),
}

# Model-2 (ThetaCombination). keep: on quarterly and monthly data both members, weighted as in model-1, instead of
# the better one. Chosen on Tourism Quarterly's and both monthly sets' training rows (M1 Quarterly's lost there:
# 15.39 -> 15.45); holdouts, best 1 -> both: M1 Quarterly 15.890 / 1.680 -> 15.604 / 1.660, Tourism Quarterly
# 14.606 / 1.534 -> 14.267 / 1.490, M1 Monthly 16.376 / 1.084 -> 16.105 / 1.063, Tourism Monthly 19.361 / 1.483 ->
# 18.591 / 1.428. three_cycle (the optimised Theta method on 3 cycles), chosen on both M4 sets' training rows
# (OWA 0.797 -> 0.761 Weekly, 0.580 -> 0.572 Hourly): M4 Weekly 6.943 / 2.444 -> 6.759 / 2.224, M4 Hourly 12.260
# / 0.992 -> 12.374 / 0.977 (MSIS 7.32 -> 7.19).
MODEL_2_SEASONS: dict[Season, SeasonRules] = {
    Season.NONE: SeasonRules(keep=1, trend_floor_up_to=TREND_FLOOR_UP_TO),
    Season.QUARTERLY: SeasonRules(keep=None, trend_floor_up_to=TREND_FLOOR_UP_TO),
    Season.MONTHLY: SeasonRules(keep=None),
    Season.LONG: SeasonRules(keep=1, three_cycle=True),
}

# Model-4 (SpikeRobustCombination). keep: the best 2; on monthly data every member, weighted, as in model-1, chosen
# on both monthly sets' training rows: M1 Monthly 15.046 / 1.073 -> 14.846 / 1.052, Tourism Monthly 18.616 / 1.417
# -> 18.419 / 1.404. No 3-cycle members: training rows / holdouts, OWA, M4 Weekly 0.770 -> 0.753 and 0.781 ->
# 0.763, but M4 Hourly 0.494 -> 0.491 and 0.525 -> 0.527 (MSIS 7.28 -> 7.33), for twice the time.
MODEL_4_SEASONS: dict[Season, SeasonRules] = {
    Season.NONE: SeasonRules(keep=2, trend_floor_up_to=TREND_FLOOR_UP_TO),
    Season.QUARTERLY: SeasonRules(keep=2, trend_floor_up_to=TREND_FLOOR_UP_TO),
    Season.MONTHLY: SeasonRules(keep=None),
    Season.LONG: SeasonRules(keep=2),
}
