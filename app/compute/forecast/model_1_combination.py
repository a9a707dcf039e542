"""forecast-model-1: a per-series validated combination of statistical forecasters (ValidatedCombination)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.compute.forecast.candidates import (
    CANDIDATES,
    LEVEL_POOL,
    RECENT_FLOOR,
    SEASONAL_POOL,
    THETA_PAIR_POOL,
    THREE_CYCLE_POOL,
    Candidate,
)
from app.compute.forecast.combination import (
    STRENGTH_GATE,
    WEIGHT_POWER,
    SeasonTableCombination,
    whole_windows,
)
from app.compute.forecast.model_3_mstl import MSTLForecaster
from app.compute.forecast.seasons import MODEL_1_SEASONS, Season, SeasonRules, season_of
from app.compute.forecast.template import History, Pool

MSTL_MEMBER = "mstl"  # pool name of model-3's median (see pool_member())


def mstl_median(y: np.ndarray, h: int, periods: tuple[int, ...]) -> np.ndarray:
    """Model-3's median from the history ``y``, in y's units, as a member of model-1's pool (MSTL_MEMBER). Like
    every member it is run at each of model-1's origins on the history before it, so model-1's interval holds
    its errors. Model-3 there chooses between its adjusted-series models on 2 rolling origins, not on its own:
    as accurate for less time (bench/results/forecast-rules.md)."""
    fitted = MSTL_POOL_MODEL.fit(y, h, periods)
    return fitted.median * fitted.scale


MSTL_POOL_MODEL = MSTLForecaster(n_origins=2, whole_origins=2)


def pool_member(name: str) -> Candidate:
    """The point forecaster behind a name in model-1's pool: a named candidate, or model-3's median."""
    return mstl_median if name == MSTL_MEMBER else CANDIDATES[name]


class ValidatedCombination(SeasonTableCombination):
    """forecast-model-1: per-series validated combination of statistical forecasters.

    Pool (candidate_pool): exponential smoothing (SES, damped trend), the optimised Theta method and a ridge
    AR(3) on first differences on the seasonally adjusted series (classical decomposition), each on the full
    and on the recent history (``level_pool``: the last 5 cycles, at least 60 points); where the season table
    says so (``seasons``, app.compute.forecast.seasons), the trend members on the last 3 cycles
    (``three_cycle_pool``), model-2's pair of Theta forecasts averaged as one member (``pair_pool``) with or
    without a fixed share, and model-3's median (mstl_median) with a fixed share; for strongly seasonal
    series (strength >= ``gate``) the seasonal-position members (``seasonal_pool``). Short histories without
    a strong season choose between the two fixed combinations of their season's ``short_pool`` instead.
    Combination (combination.validated_combination): every member, fitted on the history with a spike at its
    newest point replaced (robust.clean_newest), at ``n_origins`` rolling origins (step = the frequency's
    evaluation horizon, app.compute.forecast.frequency, at least ``min_step``; up to 12 spread over a short
    history), the season's ``keep`` best by sMAPE, weighted by (1 / sMAPE) ** ``weight_power``; an error about
    a replaced newest point ranks no member but widens the interval.
    Interval: empirical quantiles of the combination's errors at the same origins (rescaled towards today's
    level for positive series, and by their time point's seasonal index under a strong multiplicative
    season), widened by a Student-t ratio when the origins hold few independent errors, with the trend floor
    where the season table gives it, times ``calibration``. Never-negative histories get forecasts and
    bounds floored at zero. History cap: 3000 points.
    """

    id = "forecast-model-1"
    description = ("General-purpose default: per-series validated combination of exponential smoothing, "
                   "Theta, autoregressive and seasonal models.")

    def __init__(self, max_history: int = 3000, n_origins: int = 8, min_step: int = 8,
                 calibration: tuple[float, float] = (1.05, 0.1), level_pool: Sequence[str] = LEVEL_POOL,
                 three_cycle_pool: Sequence[str] = THREE_CYCLE_POOL, seasonal_pool: Sequence[str] = SEASONAL_POOL,
                 pair_pool: Sequence[tuple[str, ...]] = THETA_PAIR_POOL,
                 seasons: dict[Season, SeasonRules] = MODEL_1_SEASONS, weight_power: float = WEIGHT_POWER,
                 gate: float = STRENGTH_GATE) -> None:
        super().__init__(max_history=max_history, n_origins=n_origins, calibration=calibration, min_step=min_step,
                         level_pool=level_pool, three_cycle_pool=three_cycle_pool, seasonal_pool=seasonal_pool,
                         seasons=seasons, weight_power=weight_power, gate=gate)
        self.pair_pool = tuple(tuple(c) for c in pair_pool)

    def candidate_pool(self, history: History) -> Pool:
        rules = self.seasons[season_of(history.periods)]
        n = len(history.y)
        if (rules.short_pool and not whole_windows(history, self.n_origins) and not history.seasonal
                and n <= RECENT_FLOOR):
            # too short for whole windows and no longer than the "recent" window: the members are the same four
            # forecasts twice, and ranking them on a few cut windows chases noise, so one of two fixed
            # combinations answers (the season's short_pool); a strongly seasonal one keeps its seasonal members.
            # Figures: bench/results/forecast-rules.md, "model_1_combination.py".
            return Pool(list(rules.short_pool), keep=1)
        members = self.ranked_members(history, rules)
        # a long strongly seasonal history (more than RECENT_FLOOR points, so its recent members differ from
        # the full ones) gives the Theta pair a fixed share of the combination, whatever the origins rank it
        long_seasonal = history.seasonal and n > RECENT_FLOOR
        fixed, share = np.zeros(0, dtype=int), 0.0
        if rules.pair == "always" or (rules.pair == "long seasonal" and long_seasonal and rules.pair_share > 0):
            if long_seasonal:
                fixed, share = np.arange(len(members), len(members) + len(self.pair_pool)), rules.pair_share
            members += list(self.pair_pool)
        if rules.mstl_share > 0 and history.seasonal and not long_seasonal:
            fixed, share = np.array([len(members)]), rules.mstl_share
            members.append((MSTL_MEMBER,))
        return Pool(members, rules.keep, fixed, share)

    def member(self, name: str) -> Candidate:
        return pool_member(name)
