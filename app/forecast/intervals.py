"""Prediction intervals from rolling-origin (conformal) errors measured inside the history.

A model is re-run at a few forecast origins inside the history; the errors E[j, k] (origin j, step k)
are divided by a horizon profile k**b (b fitted on the errors, clipped to [0, 1]), pooled, and their
empirical quantiles (finite-sample conformal rank) give the interval half-widths. Beyond the largest
observed rank the quantile is extrapolated with a Gaussian tail of the same spread, never below the
largest observed error, so a higher confidence is never narrower.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

_Z80 = float(norm.ppf(0.9))  # two-sided 80% Gaussian quantile, reference point of the tail factor
MIN_SAMPLES = 30  # below this many pooled errors, blend in a random-walk error model


def origins(n: int, h: int, min_train: int, count: int, step: int | None = None) -> tuple[list[int], int]:
    """Forecast origins (newest first) and the evaluated window length.

    The window is ``h`` when the history allows, else shorter (at least 1), so short series still
    get some measured errors.
    """
    hv = max(1, min(h, n - min_train))
    step = max(1, step if step is not None else hv)
    out = []
    o = n - hv
    while o >= min_train and len(out) < count:
        out.append(o)
        o -= step
    return out, hv


@dataclass(frozen=True)
class ErrorModel:
    """Horizon profile exponent b and pooled standardised errors z (sorted)."""

    b: float
    z: np.ndarray          # signed, sorted
    absz: np.ndarray       # sorted
    spread: float          # RMS of z
    extra_scale: float = 1.0
    tail: float = 0.0      # > 0: quantiles widened more at high confidence (heavier tails than measured)

    def _factor(self, c: float) -> float:
        return self.extra_scale * float((norm.ppf(0.5 + c / 2.0) / _Z80) ** self.tail)

    def half_widths(self, h: int, confidence: float) -> tuple[np.ndarray, np.ndarray]:
        """(down, up) distances from the median at steps 1..h, both >= 0, nondecreasing in confidence."""
        prof = np.arange(1, h + 1, dtype=float) ** self.b * self._factor(confidence)
        q = self._abs_quantile(confidence)
        return q * prof, q * prof

    def _abs_quantile(self, c: float) -> float:
        n = len(self.absz)
        if n == 0:
            return 0.0
        r = math.ceil((n + 1) * c)
        gauss = self.spread * float(norm.ppf(0.5 + c / 2.0))
        if r <= n:
            emp = float(self.absz[r - 1])
            if n < MIN_SAMPLES:
                return max(emp, gauss)
            return emp
        return max(float(self.absz[-1]), gauss)

    def asymmetric(self, h: int, confidence: float) -> tuple[np.ndarray, np.ndarray]:
        """Signed quantiles: (down, up) distances, each >= 0 and nondecreasing in confidence."""
        n = len(self.z)
        prof = np.arange(1, h + 1, dtype=float) ** self.b * self._factor(confidence)
        if n < MIN_SAMPLES:
            return self.half_widths(h, confidence)
        lo_p = (1.0 - confidence) / 2.0
        hi_p = (1.0 + confidence) / 2.0
        r_lo = math.floor((n + 1) * lo_p)
        r_hi = math.ceil((n + 1) * hi_p)
        tail = self.spread * float(norm.ppf(hi_p))
        down = -float(self.z[r_lo - 1]) if r_lo >= 1 else max(-float(self.z[0]), tail)
        up = float(self.z[r_hi - 1]) if r_hi <= n else max(float(self.z[-1]), tail)
        return max(down, 0.0) * prof, max(up, 0.0) * prof


def fit_errors(errors: np.ndarray, fallback_step_scale: float, extra_scale: float = 1.0,
               tail: float = 0.0) -> ErrorModel:
    """Build the error model from an (origins x steps) matrix (NaN = not observed).

    ``fallback_step_scale`` is a one-step error scale (e.g. of naive differences) used to pad the sample
    when there are fewer than MIN_SAMPLES observed errors (random-walk profile).
    """
    e = np.asarray(errors, dtype=float)
    if e.ndim != 2:
        e = e.reshape(1, -1)
    hv = e.shape[1]
    k = np.arange(1, hv + 1, dtype=float)
    b = 0.5
    if e.size and hv >= 3 and np.isfinite(e).any():
        cnt = np.isfinite(e).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            rms = np.sqrt(np.where(cnt > 0, np.nansum(e * e, axis=0) / np.maximum(cnt, 1), np.nan))
        ok = np.isfinite(rms) & (rms > 0)
        if ok.sum() >= 3:
            b = float(np.polyfit(np.log(k[ok]), np.log(rms[ok]), 1)[0])
            b = min(max(b, 0.0), 1.0)
    z = (e / k**b)[np.isfinite(e)]
    if len(z) < MIN_SAMPLES:
        # pad with deterministic Gaussian quantile points: of the observed errors' spread when there
        # are a few (>= 5), else of the random-walk (first difference) scale
        pad_scale = float(np.sqrt(np.mean(z * z))) if len(z) >= 5 else fallback_step_scale
        if pad_scale > 0:
            m = MIN_SAMPLES - len(z)
            z = np.concatenate([z, norm.ppf((np.arange(m) + 0.5) / m) * pad_scale])
    z = np.sort(z)
    spread = float(np.sqrt(np.mean(z * z))) if len(z) else 0.0
    return ErrorModel(b=b, z=z, absz=np.sort(np.abs(z)), spread=spread, extra_scale=extra_scale, tail=tail)
