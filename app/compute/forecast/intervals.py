"""Prediction intervals from rolling-origin errors measured inside the history.

A model is re-run at forecast origins inside the history; the errors E[j, k] (origin j, step k) are
divided by a horizon profile k**b (b fitted on the errors, clipped to [0, 1]) and pooled. The interval
half-width at confidence c is the empirical (split-conformal) quantile of those standardised errors,
rank ceil((n + 1) c) of the n pooled errors, times a small-sample factor: the Student-t predictive
quantile, t_{c, nu} * sqrt(1 + 1 / n_eff), over the Gaussian one, where n_eff is the number of
*independent* errors the origins hold (errors of one origin share its forecast path, so they count as
fewer: one-way intra-class correlation of the standardised errors) and nu = n_eff - 1.

With many independent errors the factor is 1 and the measured quantile rules (no distributional
assumption); with few (short histories allow few origins) it widens the interval by the uncertainty of
a scale estimated from n_eff errors, instead of trusting a handful of errors or a blanket factor.
Beyond the largest observed rank a Student-t quantile at the errors' RMS (a parametric tail) takes
over, never below the largest observed error, so a higher confidence is never narrower.

Short histories put floors under b (random-walk growth when most windows were cut, a trend's growth for
short yearly and quarterly series; see fit_errors). A floor only widens: the model under the fitted b
is kept beside it and every step takes the wider of the two.

A short history's windows are cut where it ends, so the far steps are seen from fewer origins than the
near ones (and steps beyond the evaluated window from none): the profile k**b carries the pooled scale
out to them, but what is known of the errors there rests on fewer independent errors. Step k's
quantile is therefore widened by the t/Gaussian ratio for n_eff * share_k independent errors relative
to the pooled n_eff, share_k being the origins that reached step k over those that reached the most
observed step (see ErrorModel.step_factor). Where every window is whole, share_k = 1 and nothing changes.

A positive series with a multiplicative season has larger errors in its high season: those errors are
divided by the seasonal index of the time point they are about (to the power LEVEL_POWER, as for the
level) before pooling, and each future step's width is multiplied by its own (see seasonal_errors).

The figures behind these choices: bench/results/forecast-rules.md, "intervals.py".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.stats import norm
from scipy.stats import t as student_t

_Z80 = float(norm.ppf(0.9))  # two-sided 80% Gaussian quantile, reference point of the tail factor
MIN_SAMPLES = 30  # enough pooled errors for the empirical quantiles at the usual confidences
MIN_ERRORS = 5  # below this many observed errors the spread comes from a random-walk (naive) model
T_LIMIT = 60.0  # n_eff at which the t quantile is no longer taken (it is then within 1% of Gaussian)
LEVEL_POWER = 0.5  # errors grow as level ** LEVEL_POWER (see level_adjusted)
SHORT_ORIGINS = 12  # origins a short history gets (evenly spread, windows cut at the end of the history)
CUT_MIN_POWER = 0.5  # horizon exponent floor when most windows were cut (random-walk growth, see fit_errors)
# the floor for trend extrapolations of short low-frequency histories (yearly, quarterly; see fit_errors)
TREND_CUT_POWER = 0.75
# fewest independent errors a scale rests on (t with 3 df), per step and pooled: with 2, t's 99% is 3.9x Gaussian
STEP_MIN_ERRORS = 4.0


def origins(n: int, h: int, min_train: int, count: int, step: int | None = None,
            short: bool = False) -> tuple[list[int], int]:
    """Forecast origins (newest first) and the evaluated window length hv.

    The window is ``h`` when the history allows, else shorter (at least 1). Origins are ``step`` apart
    with whole windows inside the history. With ``short`` and a history too short for ``count`` such
    origins, up to SHORT_ORIGINS origins are spread evenly from the newest point back to ``min_train``,
    and windows are cut where the history ends (callers mark those steps NaN): a short series then
    still yields errors at many origins, the near steps most often.
    """
    hv = max(1, min(h, n - min_train))
    step = max(1, step if step is not None else hv)
    out = []
    o = n - hv
    while o >= min_train and len(out) < count:
        out.append(o)
        o -= step
    if short and len(out) < count and n - 1 >= min_train:
        k = min(n - min_train, max(count, SHORT_ORIGINS))
        out = [int(v) for v in np.unique(np.linspace(n - 1, min_train, k).round())[::-1]]
    return out, hv


def window(y: np.ndarray, o: int, hv: int) -> np.ndarray:
    """Actuals y[o:o+hv], NaN-padded past the end of the history."""
    out = np.full(hv, np.nan)
    seg = y[o:o + hv]
    out[: len(seg)] = seg
    return out


def level_adjusted(errors: np.ndarray, y: np.ndarray, orgs: list[int], span: int) -> np.ndarray:
    """Errors rescaled towards the current level for a positive history: row j times
    (level(n) / level(o_j)) ** LEVEL_POWER.

    A positive series that grows (or shrinks) has errors that grow with its level, so errors measured
    at early origins understate the errors at today's level. Power 1 (errors proportional to the level)
    over-corrects series whose noise does not grow with them; 0.5, between the two, was chosen on the development
    sets (bench/results/forecast-rules.md).
    The level is the mean of the last ``span`` points before an origin; a history that is not
    positive, or whose levels are not all positive, keeps absolute errors.
    """
    if not len(orgs) or np.min(y) <= 0:
        return errors
    span = max(1, span)
    now = float(np.mean(y[-span:]))
    lev = np.array([float(np.mean(y[max(0, o - span):o])) for o in orgs])
    if now <= 0 or np.any(lev <= 0):
        return errors
    return errors * ((now / lev) ** LEVEL_POWER)[:, None]


def _row_correlation(z: np.ndarray) -> float:
    """One-way intra-class correlation of the rows of z (NaN = not observed), ANOVA estimator on the rows
    with at least two values; 1 when fewer than two such rows exist."""
    rows = z[np.isfinite(z).sum(axis=1) >= 2]
    if len(rows) < 2:
        return 1.0
    k = np.isfinite(rows).sum(axis=1).astype(float)
    means = np.nansum(rows, axis=1) / k
    grand = float(np.nansum(rows) / k.sum())
    ssw = float(np.nansum((rows - means[:, None]) ** 2))
    ssb = float(np.sum(k * (means - grand) ** 2))
    dfw, dfb = k.sum() - len(rows), len(rows) - 1
    msw = ssw / dfw if dfw > 0 else 0.0
    msb = ssb / dfb
    k0 = (k.sum() - float(np.sum(k * k)) / k.sum()) / dfb
    den = msb + (k0 - 1.0) * msw
    return min(max((msb - msw) / den, 0.0), 1.0) if den > 0 else 1.0


def by_time_point(z: np.ndarray, orgs: list[int]) -> np.ndarray:
    """The (origins x steps) matrix rearranged as (time points x origins): row t holds the errors that
    every origin made about the same actual value."""
    r, hv = z.shape
    first = min(orgs)
    out = np.full((max(orgs) + hv - first, r), np.nan)
    for j, o in enumerate(orgs):
        out[o - first: o - first + hv, j] = z[j]
    return out


def effective_count(z: np.ndarray, orgs: list[int] | None = None) -> float:
    """Independent errors in an (origins x steps) matrix of standardised errors (NaN = not observed).

    Errors of one origin are correlated (a level or trend error persists over its window); with the
    one-way intra-class correlation rho of the rows, a row of m errors counts as m / (1 + (m - 1) rho).

    With the origins given, errors about the same time point are also allowed to share its shock: short
    histories get overlapping windows (origins 1-2 points apart), where one surprising value enters the
    errors of every origin that saw it. Both correlations are estimated the same way (rows = origins,
    rows = time points), and the errors count as the N whose mean has the variance of a crossed design
    of R origins and T time points: N_eff = 1 / (rho_o / R + rho_t / T + (1 - rho_o - rho_t) / N). The
    smaller of the two counts is taken, never below STEP_MIN_ERRORS on account of the time points.
    """
    cnt = np.isfinite(z).sum(axis=1)
    rho = _row_correlation(z)
    seen = cnt[cnt > 0].astype(float)
    by_origin = float(np.sum(seen / (1.0 + (seen - 1.0) * rho)))
    if orgs is None or len(orgs) != len(z) or not len(orgs) or z.shape[1] == 0:
        return by_origin
    points = by_time_point(z, orgs)
    rho_t = _row_correlation(points)
    if rho + rho_t > 1.0:
        rho, rho_t = rho / (rho + rho_t), rho_t / (rho + rho_t)
    n = float(seen.sum())
    n_points = float((np.isfinite(points).sum(axis=1) > 0).sum())
    crossed = 1.0 / (rho / len(seen) + rho_t / n_points + (1.0 - rho - rho_t) / n)
    if crossed >= by_origin:
        return by_origin
    return max(crossed, min(by_origin, STEP_MIN_ERRORS))


@dataclass(frozen=True)
class ErrorModel:
    """Horizon profile exponent b and pooled standardised errors z (sorted)."""

    b: float
    z: np.ndarray          # signed, sorted
    absz: np.ndarray       # sorted
    spread: float          # RMS of z
    n_eff: float = math.inf  # independent errors behind z (see effective_count)
    extra_scale: float = 1.0
    tail: float = 0.0      # > 0: quantiles widened more at high confidence (heavier tails than measured)
    # per evaluated step: origins that reached it / origins that reached the most observed step (empty:
    # no per-step widening, e.g. when the errors were padded with a random-walk scale)
    step_share: np.ndarray = field(default_factory=lambda: np.ones(0))
    # seasonal error scale of the future steps, cyclic, entry 0 = step 1 (empty: one scale for every step)
    season: np.ndarray = field(default_factory=lambda: np.ones(0))
    # the same errors under the growth fitted on them, kept when a floor raised b (see fit_errors): the
    # interval is the wider of the two at every step, so a floor widens the far steps without narrowing
    # the near ones
    unfloored: ErrorModel | None = None

    def _factor(self, c: float) -> float:
        return self.extra_scale * float((norm.ppf(0.5 + c / 2.0) / _Z80) ** self.tail)

    def _profile(self, h: int, confidence: float) -> np.ndarray:
        prof = (np.arange(1, h + 1, dtype=float) ** self.b * self._factor(confidence)
                * self.step_factor(h, 0.5 + confidence / 2.0))
        if len(self.season):
            prof = prof * self.season[np.arange(h) % len(self.season)]
        return prof

    def half_widths(self, h: int, confidence: float) -> tuple[np.ndarray, np.ndarray]:
        """(down, up) distances from the median at steps 1..h, both >= 0, nondecreasing in confidence."""
        w = self._abs_quantile(confidence) * self._profile(h, confidence)
        if self.unfloored is not None:
            w = np.maximum(w, self.unfloored.half_widths(h, confidence)[0])
        return w, w

    def step_factor(self, h: int, p: float) -> np.ndarray:
        """Per-step widening (>= 1) at quantile p for steps seen from fewer origins than the pooled errors.

        Step k's scale rests on n_k = n_eff * share_k independent errors (at least STEP_MIN_ERRORS, at
        most n_eff); its quantile is the pooled one times t_ratio(n_k) / t_ratio(n_eff), t_ratio(n) being
        the predictive t quantile for n errors over the Gaussian one. Steps beyond the evaluated window
        take the last evaluated step's share. The ratio of a heavier t to a lighter one grows with p, so
        the factor is nondecreasing in confidence, and it is 1 wherever every origin reached the step.
        """
        out = np.ones(h)
        if not len(self.step_share):
            return out
        share = np.empty(h)
        m = min(h, len(self.step_share))
        share[:m] = self.step_share[:m]
        share[m:] = self.step_share[-1]
        base = self._t_ratio(p, self.n_eff)
        n_k = np.clip(self.n_eff * share, STEP_MIN_ERRORS, self.n_eff)
        for i in np.flatnonzero(n_k < self.n_eff):
            out[i] = max(self._t_ratio(p, float(n_k[i])) / base, 1.0)
        return out

    @staticmethod
    def _t_ratio(p: float, n: float) -> float:
        """Predictive quantile p for n independent errors of unit scale (Student-t with n - 1 degrees of
        freedom times sqrt(1 + 1/n)), over the Gaussian quantile; 1 once n reaches T_LIMIT."""
        if n >= T_LIMIT:
            return 1.0
        nu = max(n - 1.0, 1.0)
        return float(student_t.ppf(p, nu)) * math.sqrt(1.0 + 1.0 / max(n, 1.0)) / float(norm.ppf(p))

    def _param(self, p: float) -> float:
        """Quantile p of the predictive distribution of one new standardised error: Student-t with
        n_eff - 1 degrees of freedom, scaled by sqrt(1 + 1/n_eff); Gaussian once n_eff is large."""
        return self.spread * float(norm.ppf(p)) * self._t_ratio(p, self.n_eff)

    def _abs_quantile(self, c: float) -> float:
        n = len(self.absz)
        if n == 0:
            return 0.0
        r = math.ceil((n + 1) * c)
        p = 0.5 + c / 2.0
        if r <= n:
            # the empirical quantile widened by the t/Gaussian ratio for n_eff independent errors: the
            # measured shape (heavy tails, a narrow centre) is kept, its scale uncertainty added
            return float(self.absz[r - 1]) * self._small_sample(p)
        return max(float(self.absz[-1]) * self._small_sample(p), self._param(p))

    def _small_sample(self, p: float) -> float:
        return self._t_ratio(p, self.n_eff) if self.spread > 0 else 1.0

    def asymmetric(self, h: int, confidence: float) -> tuple[np.ndarray, np.ndarray]:
        """Signed quantiles: (down, up) distances, each >= 0 and nondecreasing in confidence."""
        n = len(self.z)
        prof = self._profile(h, confidence)
        if n < MIN_SAMPLES or self.n_eff < T_LIMIT:
            return self.half_widths(h, confidence)
        lo_p = (1.0 - confidence) / 2.0
        hi_p = (1.0 + confidence) / 2.0
        r_lo = math.floor((n + 1) * lo_p)
        r_hi = math.ceil((n + 1) * hi_p)
        tail = self._param(hi_p)
        down = -float(self.z[r_lo - 1]) if r_lo >= 1 else max(-float(self.z[0]), tail)
        up = float(self.z[r_hi - 1]) if r_hi <= n else max(float(self.z[-1]), tail)
        lo, hi = max(down, 0.0) * prof, max(up, 0.0) * prof
        if self.unfloored is not None:
            u_lo, u_hi = self.unfloored.asymmetric(h, confidence)
            lo, hi = np.maximum(lo, u_lo), np.maximum(hi, u_hi)
        return lo, hi


def seasonal_errors(errors: np.ndarray, orgs: list[int], n: int,
                    indices: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Errors divided by the seasonal scale of the time point each is about, and that scale for the
    future steps (cyclic, entry 0 = the step after point n - 1); without indices or origins, the errors
    unchanged and None.

    ``indices`` are multiplicative seasonal indices (mean 1) of the history, position o % m; the scale is
    index ** LEVEL_POWER, the power by which errors follow the level (level_adjusted). Pooled without it,
    the high season's errors set one width for every step: too narrow in the high season, too wide in the low.
    """
    if indices is None or not len(orgs):
        return errors, None
    m = len(indices)
    sc = np.asarray(indices, dtype=float) ** LEVEL_POWER
    pos = (np.asarray(orgs)[:, None] + np.arange(errors.shape[1])[None, :]) % m
    return errors / sc[pos], sc[(n + np.arange(m)) % m]


def spike_errors(replaced: np.ndarray, orgs: list[int], hv: int) -> np.ndarray | None:
    """(origins x steps) mask of the errors about time points the spike cleaning replaced (``replaced``, one
    flag per point of the history), or None when it replaced none of them."""
    if not len(orgs) or not np.any(replaced):
        return None
    idx = np.asarray(orgs)[:, None] + np.arange(hv)[None, :]
    inside = idx < len(replaced)
    return inside & replaced[np.minimum(idx, len(replaced) - 1)]


def fit_errors(errors: np.ndarray, fallback_step_scale: float, extra_scale: float = 1.0,
               tail: float = 0.0, orgs: list[int] | None = None, season: np.ndarray | None = None,
               trend: bool = False, spikes: np.ndarray | None = None) -> ErrorModel:
    """Build the error model from an (origins x steps) matrix (NaN = not observed).

    ``orgs`` (the origins of the rows, any common offset) lets the independent-error count discount
    errors about the same time point seen from overlapping windows (see effective_count). ``season``
    is the future steps' seasonal scale when the errors were divided by theirs (seasonal_errors).
    ``trend`` marks a short low-frequency history forecast by trend extrapolation: its horizon exponent
    is floored at TREND_CUT_POWER as soon as a window was cut at the end of the history.

    A floor on the exponent is a floor on how fast the errors grow, not on how large they are at the
    first steps: pooled under a steeper profile than their own, the near steps' errors are divided by
    more than their growth warrants and step 1's width shrank. When a floor raised b, the model
    under the fitted exponent is kept beside it (``unfloored``) and each step takes the wider of the two.

    ``fallback_step_scale`` is a one-step error scale (e.g. of naive differences) used to pad the sample
    when there are fewer than MIN_SAMPLES observed errors (random-walk profile).

    ``spikes`` (spike_errors) marks errors about points the spike cleaning replaced: they enter the pooled
    quantiles, so a spike widens the interval, but not the growth b or the independent-error count. One
    spike is one surprising value, not a trend in the errors: at the last step of a window it steepened
    b and narrowed the first steps, at the first step of a cut window it flattened b and narrowed the
    far ones, and either way its row looked independent of the others and raised n_eff.
    """
    e = np.asarray(errors, dtype=float)
    if e.ndim != 2:
        e = e.reshape(1, -1)
    ef = e if spikes is None or spikes.shape != e.shape else np.where(spikes, np.nan, e)
    hv = e.shape[1]
    k = np.arange(1, hv + 1, dtype=float)
    b = fitted = 0.5
    if e.size and hv >= 3 and np.isfinite(ef).any():
        cnt = np.isfinite(ef).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            rms = np.sqrt(np.where(cnt > 0, np.nansum(ef * ef, axis=0) / np.maximum(cnt, 1), np.nan))
        ok = np.isfinite(rms) & (rms > 0)
        if ok.sum() >= 3:
            fitted = float(np.polyfit(np.log(k[ok]), np.log(rms[ok]), 1)[0])
            b = fitted = min(max(fitted, 0.0), 1.0)
        reached = int(np.isfinite(e[:, -1]).sum())
        if 2 * reached < len(e):
            # most windows cut: the growth fitted on them came out flat; an error grows at least like a random walk's
            b = max(b, CUT_MIN_POWER)
        if trend and reached < len(e):
            # a trend extrapolation also carries its slope's error, which grows like k (origins understate it)
            b = max(b, TREND_CUT_POWER)
    model = _pooled(e, b, fallback_step_scale, extra_scale, tail, orgs, season, ef)
    if b > fitted and np.isfinite(e).sum() >= MIN_ERRORS:
        # the floor widens the far steps only: the near steps keep the width their own growth gives
        unfloored = _pooled(e, fitted, fallback_step_scale, extra_scale, tail, orgs, season, ef)
        model = replace(model, unfloored=unfloored)
    return model


def _pooled(e: np.ndarray, b: float, fallback_step_scale: float, extra_scale: float, tail: float,
            orgs: list[int] | None, season: np.ndarray | None, counted: np.ndarray | None = None) -> ErrorModel:
    """The error model of the (origins x steps) errors e pooled under the horizon profile k**b; the
    independent errors are counted on ``counted`` (e without its spikes, see fit_errors)."""
    k = np.arange(1, e.shape[1] + 1, dtype=float)
    zm = e / k**b
    z = zm[np.isfinite(zm)]
    n_eff = effective_count((e if counted is None else counted) / k**b, orgs) if e.size else 0.0
    n_eff = n_eff if math.isfinite(n_eff) else 1.0
    spread = float(np.sqrt(np.mean(z * z))) if len(z) else 0.0
    seen = np.isfinite(e).sum(axis=0).astype(float) if e.size else np.zeros(0)
    step_share = seen / seen.max() if len(seen) and seen.max() > 0 else np.ones(0)
    if len(z) < MIN_ERRORS:
        step_share = np.ones(0)
        season = None  # the padding is a random-walk scale, not seasonal errors
        # too few errors to say anything: the random-walk (first difference) scale, as few as observed
        spread = max(spread, fallback_step_scale)
        z = np.concatenate([z, norm.ppf((np.arange(MIN_ERRORS) + 0.5) / MIN_ERRORS) * spread])
        n_eff = max(float(len(z) - MIN_ERRORS), 1.0)
    z = np.sort(z)
    # the pooled scale too rests on at least STEP_MIN_ERRORS: a 3-5 point history counted 1, 9x Gaussian at 95%
    return ErrorModel(b=b, z=z, absz=np.sort(np.abs(z)), spread=spread, n_eff=max(n_eff, STEP_MIN_ERRORS),
                      extra_scale=extra_scale, tail=tail, step_share=step_share,
                      season=np.ones(0) if season is None else np.asarray(season, dtype=float))
