"""The validated, weighted combination behind models 1, 2 and 4 (each its own module and candidate pool).

Every member of a pool forecasts from each rolling origin on the history before it; the members are
ranked by their sMAPE over those windows, the best ``Pool.keep`` kept and weighted by
(1 / sMAPE) ** ``weight_power`` (combination_weights), with ``Pool.fixed`` members holding ``Pool.share``
of the weight whatever their rank (with_fixed_share). The interval comes from the combination's own
errors at the same origins. An error about a newest point robust.clean_newest replaced ranks no member but
widens the interval (History.spikes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from app.compute.forecast.base import Fitted, _normalise, _step_scale, never_negative, usable_periods
from app.compute.forecast.candidates import (
    CANDIDATES,
    Candidate,
    forecaster_on,
    multiplicative_indices,
    seasonal_strength,
)
from app.compute.forecast.intervals import fit_errors, origins, seasonal_errors, spike_errors, window
from app.compute.forecast.robust import SPIKE_SIGMAS, clean_newest, newest_replaced
from app.compute.forecast.seasons import Season, SeasonRules, season_of
from app.compute.forecast.template import Combination, ForecastModel, History, Pool, min_train

STRENGTH_GATE = 0.5  # seasonal strength above which seasonal-position methods are used (M4 training data)
# Inverse-error weights (1 / sMAPE) ** 4: at 2 trend-less members flatten a trending season (forecast-rules.md).
WEIGHT_POWER = 4.0


def combination_weights(scores: np.ndarray, power: float) -> np.ndarray:
    """Weights (summing to 1) of the chosen members from their errors at the rolling origins: proportional
    to (1 / error) ** power, equal at power 0. An error of 0 (a member that forecast every window exactly)
    is floored so its weight stays finite."""
    s = np.maximum(np.asarray(scores, dtype=float), 1e-9)
    w = (s.min() / s) ** power  # relative to the best member's, so no weight overflows
    return w / w.sum()


def with_fixed_share(chosen: np.ndarray, weights: np.ndarray, fixed: np.ndarray, share: float,
                     size: int) -> tuple[np.ndarray, np.ndarray]:
    """The members and weights of a combination in which the members ``fixed`` (indices into a pool of
    ``size``) hold ``share`` of the weight, split equally, and the ``chosen`` members the rest in proportion
    to ``weights``; a fixed member that was also chosen gets both parts."""
    if share <= 0 or not len(fixed):
        return chosen, weights
    w = np.zeros(size)
    w[chosen] = (1.0 - share) * weights
    w[fixed] += share / len(fixed)
    keep = np.flatnonzero(w > 0)
    return keep, w[keep]


def prepare_history(values: Sequence[float], horizon: int, periods: tuple[int, ...], *, max_history: int,
                    n_origins: int, min_step: int, gate: float,
                    evaluation_horizon: Callable[[tuple[int, ...], int], int], threshold: float,
                    clean: Callable[[np.ndarray, tuple[int, ...]], np.ndarray] | None = None) -> History:
    """The capped, normalised history, with ``n_origins`` rolling origins one evaluation horizon apart (at
    least ``min_step``), or up to intervals.SHORT_ORIGINS spread over a short history (windows cut at its end).
    The newest point is judged first (robust.clean_newest, ``threshold`` robust sigmas), so one spike there
    moves no median; ``clean`` then gives the series the candidates are fitted on. Their errors are against
    the raw history, so that spike widens the interval."""
    y, scale = _normalise(values, max_history)
    n = len(y)
    per = usable_periods(periods, n)
    z = clean_newest(y, per, threshold)
    x = clean(z, per) if clean is not None else z
    mt = min_train(n, per)
    # ranking, weights and interval all rest on the frequency's evaluation horizon, not the requested one
    # (app.compute.forecast.frequency): the first k steps of any forecast are the horizon-k forecast
    he = evaluation_horizon(per, n)
    hv = max(1, min(he, n - mt))
    orgs, hv = origins(n, he, mt, n_origins, step=max(hv, min_step), short=True)
    seasonal = bool(per) and seasonal_strength(z, per[0]) >= gate
    spikes = spike_errors(newest_replaced(z, y), orgs, hv)
    return History(values, y, z, x, scale, horizon, per, orgs, hv, seasonal, spikes)


def whole_windows(history: History, n_origins: int) -> bool:
    """Every one of ``n_origins`` origins has a whole window inside the history."""
    n = len(history.y)
    return len(history.origins) >= n_origins and all(o + history.window <= n for o in history.origins)


def forecast_each(names: Sequence[str], member: Callable[[str], Candidate], y: np.ndarray, h: int,
                  periods: tuple[int, ...]) -> list[np.ndarray]:
    """Each named member's forecast from the history y, every forecaster run once (candidates.forecaster_on)."""
    done: dict[Candidate, np.ndarray] = {}
    out = []
    for name in names:
        forecaster = forecaster_on(member(name), len(y), periods)
        if forecaster not in done:
            done[forecaster] = forecaster(y, h, periods)
        out.append(done[forecaster])
    return out


def validated_combination(history: History, pool: Pool, member: Callable[[str], Candidate],
                          weight_power: float) -> Combination:
    """Rank the pool's members by sMAPE at the origins, keep and weight them, and forecast with those kept.
    ``member(name)`` is the point forecaster behind a name; only the kept members run on the whole history."""
    x, y, per, orgs, hv = history.x, history.y, history.periods, history.origins, history.window
    names = sorted({m for combo in pool.members for m in combo})
    col = {m: i for i, m in enumerate(names)}
    r = len(orgs)
    forecasts = np.empty((len(names), r, hv))
    for j, o in enumerate(orgs):
        po = usable_periods(per, o)
        forecasts[:, j] = forecast_each(names, member, x[:o], hv, po)
    fc = np.stack([forecasts[[col[m] for m in combo]].mean(axis=0) for combo in pool.members])
    if r:
        act = np.stack([window(y, o, hv) for o in orgs])
        # a replaced newest point says nothing about which member forecasts better: left out of the ranking and
        # weights (its error still widens the interval, see intervals.fit_errors)
        counted = np.isfinite(act) if history.spikes is None else np.isfinite(act) & ~history.spikes
        seen = counted[None] & np.ones_like(fc, dtype=bool)
        # symmetric relative error (sMAPE): it ranked better than MAE on M4 training data (forecast-rules.md)
        num = 2.0 * np.abs(fc - act[None])
        den = np.abs(fc) + np.abs(act[None])
        ok = seen & (den > 0)
        rel = np.where(ok, num / np.where(ok, den, 1.0), 0.0)
        score = rel.sum(axis=(1, 2)) / np.maximum(seen.sum(axis=(1, 2)), 1)
        chosen = np.argsort(score, kind="stable")[:pool.keep]
        weights = combination_weights(score[chosen], weight_power)
    else:
        chosen = np.arange(len(pool.members) if pool.keep is None else min(pool.keep, len(pool.members)))
        weights = np.full(len(chosen), 1.0 / len(chosen))
    chosen, weights = with_fixed_share(chosen, weights, pool.fixed, pool.share, len(pool.members))
    at_origins = np.tensordot(weights, fc[chosen], axes=1) if r else np.empty((0, hv))
    kept = sorted({m for c in chosen for m in pool.members[c]})
    final = dict(zip(kept, forecast_each(kept, member, x, history.horizon, per), strict=True))
    median = np.tensordot(weights, [np.mean([final[m] for m in pool.members[c]], axis=0) for c in chosen], axes=1)
    return Combination(median, at_origins)


def combination_interval(history: History, combination: Combination, errors: np.ndarray,
                         calibration: tuple[float, float], trend_floor: bool) -> Fitted:
    """The rolling-origin error model (app.compute.forecast.intervals), with the high season's errors
    widening the high season only under a strong multiplicative season, and with ``trend_floor`` the
    faster-than-random-walk growth of a trend extrapolation where windows were cut."""
    y, per, n = history.y, history.periods, len(history.y)
    indices = multiplicative_indices(history.z, per[0]) if history.seasonal else None
    errors, season = seasonal_errors(errors, history.origins, n, indices)
    em = fit_errors(errors, _step_scale(y), *calibration, orgs=history.origins, season=season, trend=trend_floor,
                    spikes=history.spikes)
    return Fitted(combination.median, em, history.scale, nonnegative=never_negative(history.values))


class SeasonTableCombination(ForecastModel[History]):
    """Models 1, 2 and 4: members ranked at rolling origins and weighted by their errors, with the choices a
    season class makes read from a table (app.compute.forecast.seasons). They prepare a history, offer their
    members, combine them and build the interval alike; each is configured by its pools and its table, and
    model-1 offers more (candidate_pool)."""

    def __init__(self, *, max_history: int, n_origins: int, calibration: tuple[float, float], min_step: int,
                 level_pool: Sequence[str], seasonal_pool: Sequence[str], seasons: dict[Season, SeasonRules],
                 weight_power: float, gate: float, three_cycle_pool: Sequence[str] = (),
                 spike_sigmas: float = SPIKE_SIGMAS, evaluation_horizons: Mapping[str, int] | None = None) -> None:
        super().__init__(max_history=max_history, n_origins=n_origins, calibration=calibration,
                         evaluation_horizons=evaluation_horizons)
        self.min_step = min_step
        self.level_pool = tuple(level_pool)
        self.three_cycle_pool = tuple(three_cycle_pool)
        self.seasonal_pool = tuple(seasonal_pool)
        self.seasons = dict(seasons)
        self.weight_power = weight_power
        self.gate = gate
        self.spike_sigmas = spike_sigmas

    def prepare(self, values: Sequence[float], horizon: int, periods: tuple[int, ...]) -> History:
        return prepare_history(values, horizon, periods, max_history=self.max_history, n_origins=self.n_origins,
                               min_step=self.min_step, gate=self.gate, evaluation_horizon=self.evaluation_horizon,
                               threshold=self.spike_sigmas, clean=self.cleaner())

    def cleaner(self) -> Callable[[np.ndarray, tuple[int, ...]], np.ndarray] | None:
        """What the members are fitted on instead of the history (None: the history, its newest point judged)."""
        return None

    def ranked_members(self, history: History, rules: SeasonRules) -> list[tuple[str, ...]]:
        """The level pool, the 3-cycle pool where the season class asks for it, and the seasonal pool on a
        strongly seasonal history."""
        members = [(c,) for c in self.level_pool]
        if rules.three_cycle:
            members += [(c,) for c in self.three_cycle_pool]
        if history.seasonal:
            members += [(c,) for c in self.seasonal_pool]
        return members

    def candidate_pool(self, history: History) -> Pool:
        rules = self.seasons[season_of(history.periods)]
        return Pool(self.ranked_members(history, rules), rules.keep)

    def member(self, name: str) -> Candidate:
        return CANDIDATES[name]

    def combine(self, history: History, pool: Pool) -> Combination:
        return validated_combination(history, pool, self.member, self.weight_power)

    def interval(self, history: History, combination: Combination, errors: np.ndarray) -> Fitted:
        trend_floor = len(history.y) <= self.seasons[season_of(history.periods)].trend_floor_up_to
        return combination_interval(history, combination, errors, self.calibration, trend_floor)
