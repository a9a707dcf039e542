"""What models 1, 2 and 4 do differently by the length of a history's shortest usable season: one table each.

The season classes stand for the data frequencies of the development sets: no usable period (yearly
data, or a history too short for two cycles), a shortest period of at most 4 points (quarterly), of 5 to
12 points (monthly) and longer (hourly, weekly: 24 or 52 points). The figures behind each choice were
measured on those sets' training rows (bench/accuracy.py --split valid) and holdouts. Model-1 reads every
column; model-2 ``keep``, ``three_cycle`` and ``trend_floor_up_to``; model-4 ``keep`` and ``trend_floor_up_to``.
"""

from __future__ import annotations

import math
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


# Trend floor (same for models 1, 2 and 4): yearly and quarterly data are mostly trends, whose errors grow
# faster than a random walk's (see intervals.fit_errors); training rows, model-1 MSIS / 95% coverage: M1
# Quarterly 13.26 -> 12.80 / 0.911 -> 0.927, M1 Yearly 20.95 -> 21.40 / 0.937 -> 0.953, Tourism Quarterly (with
# the seasonal errors) 16.74 -> 15.23 / 0.922 -> 0.933. A longer series with no usable period is not yearly but
# too short for its own (weekly data under two years): it keeps the random-walk floor.
TREND_FLOOR_NONE = RECENT_FLOOR
TREND_FLOOR_QUARTERLY = math.inf

# Model-1 (ValidatedCombination).
# keep: monthly data gain from every member, weighted by their errors (training rows, sMAPE / MASE / MSIS, best 6
# -> all, at power 4: M1 Monthly 18.01 / 1.338 / 13.42 -> 17.64 / 1.324 / 13.21, Tourism Monthly 23.50 / 1.819 /
# 15.58 -> 23.07 / 1.782 / 15.36; every holdout series, best 3 instead: M1 Monthly 13.993 -> 14.253 sMAPE,
# Tourism Monthly 17.992 -> 18.229); hourly and weekly data lose from more (M4 OWA 0.427 -> 0.432 Hourly, 0.796
# -> 0.839 Weekly), so they keep 3. Quarterly data keep 3 too: the best 6 they had, chosen on Tourism Quarterly's
# training rows, moved every holdout series of both quarterly sets by 0.2% or less (sMAPE / MASE, best 6 -> 3:
# M1 Quarterly 15.048 / 1.594 -> 15.077 / 1.594, Tourism Quarterly 14.313 / 1.510 -> 14.310 / 1.508).
# three_cycle: a season longer than monthly data's (hourly, weekly) can move within the 5-cycle window (a month
# of hourly data, two years of weekly): the trend members on 3 cycles as well. Training rows / holdouts, OWA and
# MSIS: M4 Hourly 0.4539 / 7.28 -> 0.4482 / 7.13 and 0.4265 / 6.37 -> 0.4255 / 6.31; M4 Weekly 0.7390 / 21.81 ->
# 0.7192 / 21.27 and 0.7330 / 18.53 -> 0.7119 / 18.14. All four level members on 3 cycles: 0.4482 / 0.7289 on
# the training rows, for 25% more time; SES, Theta and AR(3): 0.4488 / 0.7353; the 3-cycle members in place of
# the 5-cycle ones: 0.4520 / 0.7360. For a season of at most 12 points both windows are RECENT_FLOOR points, and
# a duplicate member would count twice among the chosen.
# short_pool (see ValidatedCombination.candidate_pool): SHORT_POOL for low-frequency data (no season, or one of
# at most 4 points), SHORT_PERIODIC_POOL for a usable season of more points.
# pair, quarterly: model-2's weighted pair of Theta forecasts beat this pool on Tourism Quarterly (training rows /
# holdouts, sMAPE 18.33 / 14.27 against 18.85 / 14.61); as one more member, training rows sMAPE / MASE / MSIS
# Tourism Quarterly 18.85 / 1.900 / 14.50 -> 18.72 / 1.890 / 14.39, M1 Quarterly 14.91 / 1.560 / 12.77 -> 14.92 /
# 1.562 / 12.81; holdouts 14.61 / 1.548 / 12.66 -> 14.55 / 1.538 / 12.56 and 15.36 / 1.615 / 17.78 -> 15.31 /
# 1.610 / 17.70. Standard Theta alone as the extra member: 18.85 and 14.91 / 12.84. A long strongly seasonal
# history offers 17 members, and ranking them on the errors of a few 8-step windows chases noise: the pair holds
# pair_share of the weight, the ranked members the rest. Tourism Quarterly's 262 such series, sMAPE / MASE, ranked
# only -> half to the pair: training rows 14.94 / 1.660 -> 14.59 / 1.630, holdouts 13.11 / 1.538 -> 12.74 /
# 1.489. Shorter ones do not gain on the training rows (Tourism Quarterly's 62: 24.15 -> 24.24, M1 Quarterly's
# 74: 13.30 -> 13.43), so there the pair is ranked with the others.
# pair, monthly: the same pair on long strongly seasonal monthly data only, with a smaller share: every member is
# kept there and 18-24-step windows rank them better. Training rows / holdouts, sMAPE / MASE / MSIS, share 0 ->
# 0.25: Tourism Monthly 23.07 / 1.782 / 15.36 -> 22.97 / 1.770 / 15.21 and 18.02 / 1.417 / 11.37 -> 17.99 /
# 1.406 / 11.39, M1 Monthly 17.64 / 1.324 / 13.21 -> 17.63 / 1.323 / 13.22 and 14.01 / 1.040 / 8.68 -> 13.99 /
# 1.040 / 8.67; at 0.5 the holdouts' MSIS rose (Tourism Monthly 11.46) and M1 Monthly's training rows lost (17.65).
# mstl_share, quarterly: a short strongly seasonal quarterly history gives model-3's median a fixed share: its
# STL-adjusted damped trend or exponential smoothing lags these growing series less than the classically
# adjusted members (step-1 outcomes above the median minus below, M1 Quarterly's 74 such series, training rows:
# model-1 +0.46, model-3 +0.22, after +0.38). Training rows / holdouts, model-1 sMAPE / MASE / MSIS, share 0 ->
# 0.3: M1 Quarterly 14.937 / 1.565 / 12.816 -> 14.927 / 1.563 / 12.850 and 15.324 / 1.614 / 17.748 -> 15.048 /
# 1.594 / 17.725, Tourism Quarterly 18.469 / 1.868 / 14.420 -> 18.392 / 1.861 / 14.354 and 14.304 / 1.507 /
# 12.327 -> 14.313 / 1.510 / 12.340; at 0.2 M1 Quarterly's training rows 14.930 / 12.884. Seasonal-position
# Theta in its place (model-3's forecast of most of Tourism's such series) lost on M1 Quarterly (15.061). Model-3
# runs at each of up to 12 origins: a 40-point quarterly forecast took 0.64 s of CPU against 0.25-0.29 s
# (bench/model_latency.py, quarterly-40).
MODEL_1_SEASONS: dict[Season, SeasonRules] = {
    Season.NONE: SeasonRules(keep=3, short_pool=SHORT_POOL, trend_floor_up_to=TREND_FLOOR_NONE),
    Season.QUARTERLY: SeasonRules(keep=3, short_pool=SHORT_POOL, pair="always", pair_share=0.5, mstl_share=0.3,
                                  trend_floor_up_to=TREND_FLOOR_QUARTERLY),
    Season.MONTHLY: SeasonRules(keep=None, short_pool=SHORT_PERIODIC_POOL, pair="long seasonal", pair_share=0.25),
    Season.LONG: SeasonRules(keep=3, short_pool=SHORT_PERIODIC_POOL, three_cycle=True),
}

# Model-2 (ThetaCombination). keep: on quarterly and monthly data both members, weighted as in model-1, instead of
# the better one: training rows, sMAPE / MASE / MSIS, Tourism Quarterly 18.91 / 1.921 / 15.43 -> 18.33 / 1.874 /
# 15.27, Tourism Monthly 24.76 / 1.862 / 16.35 -> 23.71 / 1.796 / 15.76, M1 Monthly 18.77 / 1.355 / 13.56 -> 18.45
# / 1.332 / 13.44, M1 Quarterly 15.39 / 1.659 / 12.94 -> 15.45 / 1.672 / 12.83; on hourly and weekly data the best
# 2 of 3 did not gain (M4 Hourly OWA 0.5722 -> 0.5777, M4 Weekly 0.7609 -> 0.7589). three_cycle (the optimised
# Theta method on 3 cycles): training rows / holdouts, OWA and MSIS: M4 Weekly 0.797 / 24.38 -> 0.761 / 23.83 and
# 0.819 / 19.70 -> 0.769 / 19.11, M4 Hourly 0.580 / 7.65 -> 0.572 / 7.36 and 0.540 / 7.32 -> 0.540 / 7.19
# (standard Theta on 3 cycles instead: 0.788 and 0.576 on the training rows); about 7 ms more a forecast at
# 1,000 hourly points.
MODEL_2_SEASONS: dict[Season, SeasonRules] = {
    Season.NONE: SeasonRules(keep=1, trend_floor_up_to=TREND_FLOOR_NONE),
    Season.QUARTERLY: SeasonRules(keep=None, trend_floor_up_to=TREND_FLOOR_QUARTERLY),
    Season.MONTHLY: SeasonRules(keep=None),
    Season.LONG: SeasonRules(keep=1, three_cycle=True),
}

# Model-4 (SpikeRobustCombination). keep: the best 2; on monthly data every member, weighted, as in model-1
# (training rows, sMAPE / MASE / MSIS, power 2, best 2 -> all: M1 Monthly 18.61 / 1.328 / 13.12 -> 18.17 / 1.307
# / 13.01, Tourism Monthly 24.78 / 1.890 / 16.39 -> 23.93 / 1.823 / 16.15; at power 4 18.11 and 23.90). No 3-cycle
# members: training rows / holdouts, OWA, M4 Weekly 0.770 -> 0.753 and 0.781 -> 0.763, but M4 Hourly 0.494 ->
# 0.491 and 0.525 -> 0.527 (MSIS 7.28 -> 7.33), for twice the time (0.044 -> 0.080 s a series).
MODEL_4_SEASONS: dict[Season, SeasonRules] = {
    Season.NONE: SeasonRules(keep=2, trend_floor_up_to=TREND_FLOOR_NONE),
    Season.QUARTERLY: SeasonRules(keep=2, trend_floor_up_to=TREND_FLOOR_QUARTERLY),
    Season.MONTHLY: SeasonRules(keep=None),
    Season.LONG: SeasonRules(keep=2),
}
