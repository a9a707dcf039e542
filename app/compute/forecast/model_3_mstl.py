"""forecast-model-3: MSTL multiple-seasonal decomposition + a validated model of the adjusted series
(MSTLForecaster)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from app.compute.forecast.base import Fitted, _normalise, _step_scale, never_negative, usable_periods
from app.compute.forecast.candidates import (
    CANDIDATES,
    RECENT_FLOOR,
    chance_strength,
    multiplicative_fits,
    multiplicative_indices,
    seasonal_strength,
)
from app.compute.forecast.combination import STRENGTH_GATE
from app.compute.forecast.decompose import continue_cycle, seasonal_components
from app.compute.forecast.frequency import SHORT_YEARLY_WINDOWS
from app.compute.forecast.intervals import fit_errors, origins, seasonal_errors, spike_errors, window
from app.compute.forecast.robust import SPIKE_SIGMAS, clean_newest, newest_replaced
from app.compute.forecast.seasonal import position_theta
from app.compute.forecast.smoothing import damped_forecast, ses_forecast
from app.compute.forecast.template import Combination, ForecastModel, History, Pool, min_train

PERIOD_STRENGTH = 0.3  # seasonal strength a period needs to be decomposed
# ... and this many times what noise alone gives over the cycles measured (chance_strength: 0.25 on four cycles).
# Near chance a period's component is noise or a level shift, repeated into every later cycle: a short hourly
# history with one level step can pass PERIOD_STRENGTH on 24, and decomposed it forecasts beyond its own range.
CHANCE_MARGIN = 2.0
POSITION_CYCLES = 8  # cycles of the shortest period the seasonal-position variant needs
POSITION_MEDIAN = "position median"  # the seasonal-position variant's one candidate
ADJUSTED_DAMPED = "damped trend on the adjusted series"
ADJUSTED_SES = "SES on the adjusted series"


def within_reach(med: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The median kept inside the history's range unless the history trends.

    A series whose linear trend explains less than half of its range (a CPU percentage, a temperature,
    a queue length) has shown where it lives: a level, a season and a recent rise added together can
    forecast above anything it has ever done (a CPU series at ~120 against a maximum of 98.3). There
    the median is clipped to [min, max] of the history; the interval keeps its width, so values beyond
    the range stay inside the upper bound at the usual confidences. A trending series is not clipped.
    """
    n = len(y)
    if n < 3:
        return med
    span = float(np.ptp(y))
    slope = float(np.polyfit(np.arange(n, dtype=float), y, 1)[0])
    if span <= 0 or abs(slope) * (n - 1) >= 0.5 * span:
        return med
    return np.clip(med, float(np.min(y)), float(np.max(y)))


def strong_enough(y: np.ndarray, m: int) -> bool:
    """A period worth decomposing: seasonal strength at least PERIOD_STRENGTH and CHANCE_MARGIN times chance."""
    return seasonal_strength(y, m) >= max(PERIOD_STRENGTH, CHANCE_MARGIN * chance_strength(len(y), m))


@dataclass(frozen=True)
class DecomposedHistory(History):
    """History of the last cycles (``y`` raw, ``z`` = ``x`` with the newest point judged), with what the
    decomposition needs."""

    full: np.ndarray  # the capped, normalised, newest-point-judged history before the last cycles were cut from it
    offset: int  # y = full[offset:]
    strong_periods: tuple[int, ...]  # periods of ``full`` strong enough to decompose (strong_enough)
    position: bool  # the seasonal-position variant
    multiplicative: bool  # decomposed on the log scale
    stl_window: int


class MSTLForecaster(ForecastModel[DecomposedHistory]):
    """forecast-model-3: MSTL multiple-seasonal decomposition + a validated model of the adjusted series.

    The last cycles of the history (see below) are decomposed by MSTL with all usable periods
    (app.compute.forecast.decompose), on the log scale when the data are positive and seasonal ratios fit
    (seasonal factors). Strongly seasonal series with at least ``POSITION_CYCLES`` cycles (strength
    >= ``gate``, and seasonal-position Theta not ``margin`` times as bad as adjusted Theta at rolling origins):
    the longer seasonal components (e.g. weekly in hourly data) are removed and continued from their last
    cycle, the rest is forecast by seasonal-position Theta on the shortest period (daily shape and
    level adapt), and the forecast is the median of that, plain seasonal-position Theta and the
    multiplicative multi-period profile forecast. Otherwise every component is removed and the
    adjusted series is forecast by damped-trend exponential smoothing or by simple exponential
    smoothing (no trend), whichever has the lower error at the rolling origins: a trend is projected
    only where projecting one has worked in this series' own history.
    Intervals: the rolling-origin error model of app.compute.forecast.intervals at up to ``whole_origins`` whole
    windows at the end of the history, or, where fewer than ``n_origins`` fit, ``n_origins`` or more origins
    spread over it (windows cut at its end). Each origin decomposes the history before it (one MSTL per
    origin), so its errors are those of forecasts made without the window they
    are judged on. Everything is fitted on the history with its newest point judged (robust.clean_newest);
    the errors are against the raw history. Windows span the frequency's evaluation horizon
    (app.compute.forecast.frequency), 4 steps on yearly data (``evaluation_horizons``).
    History cap: 6 (position variant) or 10 cycles of the longest period, between 300 and 3000 points
    (a period that then has fewer than two cycles is dropped).
    """

    id = "forecast-model-3"
    description = ("Complex seasonal / long horizon: MSTL multiple-seasonal decomposition with a "
                   "seasonal-position Theta or a validated exponential-smoothing model on the adjusted series.")

    # calibration for honest per-origin errors: the earlier (1.1, 0.3) made up for optimistic ones (forecast-rules.md)
    def __init__(self, max_history: int = 3000, n_origins: int = 4, whole_origins: int = 8,
                 calibration: tuple[float, float] = (1.05, 0.2), gate: float = STRENGTH_GATE,
                 margin: float = 2.0, evaluation_horizons: Mapping[str, int] | None = SHORT_YEARLY_WINDOWS) -> None:
        super().__init__(max_history=max_history, n_origins=n_origins, calibration=calibration,
                         evaluation_horizons=evaluation_horizons)
        self.whole_origins = max(whole_origins, n_origins)
        self.gate = gate
        self.margin = margin

    def prepare(self, values: Sequence[float], horizon: int, periods: tuple[int, ...]) -> DecomposedHistory:
        raw, scale = _normalise(values, self.max_history)
        he = self.evaluation_horizon(usable_periods(periods, len(raw)), len(raw))  # not the requested (frequency)
        # everything is fitted on the history with its newest point judged (app.compute.forecast.robust); the errors
        # are measured against the raw one
        y = clean_newest(raw, usable_periods(periods, len(raw)), SPIKE_SIGMAS)
        # a period no stronger than chance is not decomposed: its "component" is noise, repeated as jitter
        per = tuple(p for p in usable_periods(periods, len(y)) if strong_enough(y, p))
        # the position variant smooths each position across cycles: with fewer than POSITION_CYCLES no trend
        position = (bool(per) and len(y) >= POSITION_CYCLES * per[0]
                    and seasonal_strength(y, per[0]) >= self.gate and self._position_wins(y, he, per))
        # chosen on M4 training data: fewer cycles and a narrow window where each position is smoothed on its own,
        # more and a wider window (a smoother yearly shape) for the adjusted-series variant
        cycles, stl_window = (6, 11) if position else (10, 35)
        cap = min(self.max_history, max(300, cycles * max(per))) if per else 300
        off = max(0, len(y) - cap)
        yc, rc = y[off:], raw[off:]
        n = len(yc)
        pc = usable_periods(per, n)
        position = position and bool(pc)
        mult = bool(pc) and bool(np.min(yc) > 0) and multiplicative_fits(yc, pc[0])
        mt = min_train(n, pc)
        # up to whole_origins whole windows where at least n_origins fit (4 left too few independent errors on
        # a long history, so intervals too wide); a shorter history keeps n_origins (spread, windows cut at its end)
        orgs, hv = origins(n, he, mt, self.whole_origins)
        if len(orgs) < self.n_origins:
            orgs, hv = origins(n, he, mt, self.n_origins, short=True)
        seasonal = bool(pc) and seasonal_strength(yc, pc[0]) >= self.gate
        spikes = spike_errors(newest_replaced(yc, rc), orgs, hv)  # left out of the choice, kept in the interval
        return DecomposedHistory(values, rc, yc, yc, scale, horizon, pc, orgs, hv, seasonal, spikes, full=y,
                                 offset=off, strong_periods=per, position=position, multiplicative=mult,
                                 stl_window=stl_window)

    def candidate_pool(self, history: DecomposedHistory) -> Pool:
        if history.position:
            return Pool([(POSITION_MEDIAN,)], keep=1)
        return Pool([(ADJUSTED_DAMPED,), (ADJUSTED_SES,)], keep=1)

    def combine(self, history: DecomposedHistory, pool: Pool) -> Combination:
        """The candidate with the lower mean absolute error at the origins (the position variant has one),
        its median kept within the history's range (within_reach). An error about a replaced newest point
        chooses nothing."""
        yc, orgs, hv = history.x, history.origins, history.window
        cand_err = []
        cand_fc = []
        for o in orgs:
            act = window(history.y, o, hv)
            fcs = self._forecasts(history, pool, o, hv)
            cand_fc.append(fcs)
            cand_err.append([act - f for f in fcs])
        errs_all = np.array(cand_err).transpose(1, 0, 2) if orgs else np.empty((1, 0, hv))
        choice = 0
        if errs_all.shape[0] > 1 and orgs:
            judged = errs_all if history.spikes is None else np.where(history.spikes[None], np.nan, errs_all)
            choice = int(np.argmin([np.nanmean(np.abs(e)) for e in judged]))
        med = within_reach(self._forecasts(history, pool, len(yc), history.horizon)[choice], yc)
        at_origins = np.array([fcs[choice] for fcs in cand_fc]) if orgs else np.empty((0, hv))
        return Combination(med, at_origins)

    def interval(self, history: DecomposedHistory, combination: Combination, errors: np.ndarray) -> Fitted:
        # the high season's larger errors widen the high season only, as for model-1; only a short history with
        # no usable period takes model-1's trend floor: its trend's errors outgrow the 4-step windows (fit_errors).
        # Figures: bench/results/forecast-rules.md, "model_3_mstl.py".
        rc, pc, orgs = history.y, history.periods, history.origins
        n = len(rc)
        indices = multiplicative_indices(history.z, pc[0]) if history.seasonal else None
        errs, season = seasonal_errors(errors, orgs, n, indices)
        em = fit_errors(errs, _step_scale(rc), *self.calibration, orgs=orgs, season=season, spikes=history.spikes,
                        trend=not pc and n <= RECENT_FLOOR)
        return Fitted(combination.median, em, history.scale, nonnegative=never_negative(history.values))

    def _decomposed(self, history: DecomposedHistory, o: int) -> tuple[list[tuple[np.ndarray, int]], np.ndarray]:
        """The components removed from x[:o] (with their periods) and the adjusted x[:o]."""
        x = history.x[:o]
        mult = history.multiplicative
        po = usable_periods(history.periods, o)
        seas = seasonal_components(np.log(x) if mult else x, po, history.stl_window) if po and np.ptp(x) > 0 else []
        removed = list(zip(seas, po, strict=False))[1 if history.position else 0:]
        total = np.sum([c for c, _ in removed], axis=0) if removed else np.zeros(o)
        return removed, (x / np.exp(total) if mult else x - total)

    def _forecasts(self, history: DecomposedHistory, pool: Pool, o: int, h: int) -> list[np.ndarray]:
        """The pool members' forecasts from origin o (in x), in pool order."""
        # each origin decomposes only the history before it: STL smooths both ways, so a shared decomposition
        # would tell every origin about the window it is judged on, and its errors would be too small
        removed, adj = self._decomposed(history, o)
        fut = np.zeros(h)
        for c, p in removed:
            fut = fut + continue_cycle(c, p, h)
        mult = history.multiplicative

        def recomposed(f: np.ndarray) -> np.ndarray:
            return f * np.exp(fut) if mult else f + fut

        def position_median() -> np.ndarray:
            f = recomposed(position_theta(adj, h, history.periods[0]))
            end = history.offset + o
            po = usable_periods(history.strong_periods, end)
            others = [CANDIDATES[name](history.full[:end], h, po) for name in ("ptheta_s", "plevel_log")]
            # median with two other multiple-seasonal forecasts: more accurate than position Theta alone (M4 Hourly)
            return np.median(np.stack([f, *others]), axis=0)

        members = {POSITION_MEDIAN: position_median,
                   ADJUSTED_DAMPED: lambda: recomposed(damped_forecast(adj, h)),
                   ADJUSTED_SES: lambda: recomposed(ses_forecast(adj, h))}
        return [members[name]() for (name,) in pool.members]

    def _position_wins(self, y: np.ndarray, he: int, per: tuple[int, ...]) -> bool:
        """Cheap validated gate: is seasonal-position Theta not clearly worse (``margin`` x the error) than
        seasonally adjusted Theta at a few rolling origins? Much weekly data with a strong yearly shape
        fails this; hourly data passes. The margin was chosen on M4 training data (the final median
        combination is better than position Theta alone, so the gate leans towards it)."""
        orgs, hv = origins(len(y), he, min_train(len(y), per), 4, step=max(he, 8))
        err = np.zeros(2)
        for o in orgs:
            po = usable_periods(per, o)
            for i, name in enumerate(("ptheta_s", "theta_sa5")):
                err[i] += float(np.mean(np.abs(y[o:o + hv] - CANDIDATES[name](y[:o], hv, po))))
        return bool(err[0] < self.margin * err[1]) if orgs else True
