"""M4 (Hourly, Weekly) loading and scoring, as defined in ../shared/data/m4/README.md.

Data directory: ``$M4_DIR`` if set, else ``<repo>/../shared/data/m4``.

Two splits are offered:
- ``test``: history = ``*-train.csv`` row, actuals = ``*-test.csv`` row (the official M4 evaluation).
- ``valid``: history = training row without its last ``horizon`` points, actuals = those points. Use this
  split (training data only) to choose designs; ``test`` is only for reporting.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.forecast.accuracy import coverage, mase, mase_scale, msis, smape

HORIZON = {"Hourly": 48, "Weekly": 13}
MASE_M = {"Hourly": 24, "Weekly": 1}
DATA_FREQUENCY = {"Hourly": "Hours", "Weekly": "Weekly"}
NAIVE2 = {"Hourly": (18.383, 2.395), "Weekly": (9.161, 2.777)}  # (sMAPE, MASE) totals from the README

# Published rows of the README: method -> {frequency: (OWA, MSIS, ACD)}; None where not published.
PUBLISHED: dict[str, dict[str, tuple[float | None, float | None, float | None]]] = {
    "Naive2 (M4 benchmark)": {"Hourly": (1.000, None, None), "Weekly": (1.000, None, None)},
    "Seasonal naive (M4)": {"Hourly": (0.627, None, None), "Weekly": (1.000, None, None)},
    "Theta (M4 benchmark)": {"Hourly": (1.006, None, None), "Weekly": (0.971, None, None)},
    "ETS (M4 benchmark)": {"Hourly": (None, 17.487, 0.001), "Weekly": (None, 20.386, 0.014)},
    "ARIMA (M4 benchmark)": {"Hourly": (None, 7.538, 0.001), "Weekly": (None, 19.575, 0.005)},
    "Best entry on the frequency (M4)": {"Hourly": (0.410, 6.139, 0.002), "Weekly": (0.739, 16.200, 0.012)},
    "M4 winner, Smyl": {"Hourly": (0.440, 7.928, 0.040), "Weekly": (0.851, 22.034, 0.021)},
}


def data_dir() -> Path:
    env = os.environ.get("M4_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "data" / "m4"


@dataclass(frozen=True)
class Series:
    id: str
    frequency: str
    history: np.ndarray
    actual: np.ndarray


def _read(path: Path) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        next(reader)
        for row in reader:
            vals = [float(v) for v in row[1:] if v != ""]
            out[row[0]] = np.asarray(vals, dtype=float)
    return out


def load(frequency: str, split: str = "test") -> list[Series]:
    """All series of one frequency, in file order."""
    h = HORIZON[frequency]
    train = _read(data_dir() / f"{frequency}-train.csv")
    if split == "valid":
        return [Series(k, frequency, v[:-h], v[-h:]) for k, v in train.items()]
    if split != "test":
        raise ValueError(f"unknown split {split!r}")
    test = _read(data_dir() / f"{frequency}-test.csv")
    return [Series(k, frequency, train[k], test[k]) for k in train]


def sample(series: list[Series], n: int | None) -> list[Series]:
    """``n`` evenly spaced series (deterministic); all when n is None or >= len."""
    if n is None or n >= len(series):
        return list(series)
    idx = np.unique(np.linspace(0, len(series) - 1, n).round().astype(int))
    return [series[i] for i in idx]


@dataclass
class Score:
    smape: float
    mase: float
    owa: float
    coverage: float
    acd: float
    msis: float


def owa(frequency: str, smape_value: float, mase_value: float) -> float:
    s2, m2 = NAIVE2[frequency]
    return 0.5 * (smape_value / s2 + mase_value / m2)


def score(frequency: str, rows: list[tuple[Series, np.ndarray, np.ndarray, np.ndarray]],
          confidence: float = 0.95) -> Score:
    """Aggregate scores over ``(series, median, lower, upper)`` rows at one confidence."""
    m = MASE_M[frequency]
    sm, ms, cov, mi = [], [], [], []
    alpha = 1.0 - confidence
    for s, med, lo, up in rows:
        sc = mase_scale(s.history, m)
        sm.append(smape(s.actual, med))
        ms.append(mase(s.actual, med, sc))
        cov.append(coverage(s.actual, lo, up))
        mi.append(msis(s.actual, lo, up, sc, alpha))
    smape_v = float(np.mean(sm))
    mase_v = float(np.mean(ms))
    cov_v = float(np.mean(cov))
    return Score(smape_v, mase_v, owa(frequency, smape_v, mase_v), cov_v, abs(cov_v - confidence),
                 float(np.mean(mi)))


def fmt(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}"
