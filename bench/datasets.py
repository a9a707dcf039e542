"""Development data sets for the accuracy benchmark: M4 Hourly/Weekly, M1 and Tourism Yearly/Quarterly/Monthly.

Each set is read from the repository's sibling data directory (``$BENCH_DATA_DIR`` if set, else
``<repo>/../shared/data``), as its README describes: one row a series (id, then values, padded with
empty cells), ``*-test.csv`` continuing ``*-train.csv``. Horizons and MASE periods are the READMEs'.

Splits: ``test`` = the competition's holdout; ``valid`` = the training row without its last horizon
(use it to choose designs, so the holdout stays a judge).
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class DataSet:
    name: str            # e.g. "m1-yearly"
    folder: str          # m4, m1, tourism
    frequency: str       # file prefix: Hourly, Weekly, Yearly, Quarterly, Monthly
    horizon: int
    mase_m: int          # seasonal period of the MASE scale
    data_frequency: str  # the API's data_frequency for these series
    season: int          # season length given to the statsforecast anchors (1 = none)
    naive2: tuple[float, float] | None = None  # M4 Naive2 (sMAPE, MASE) totals, for OWA


SETS: dict[str, DataSet] = {s.name: s for s in (
    DataSet("m4-hourly", "m4", "Hourly", 48, 24, "Hours", 24, (18.383, 2.395)),
    DataSet("m4-weekly", "m4", "Weekly", 13, 1, "Weekly", 52, (9.161, 2.777)),
    DataSet("m1-yearly", "m1", "Yearly", 6, 1, "Yearly", 1),
    DataSet("m1-quarterly", "m1", "Quarterly", 8, 4, "Quarterly", 4),
    DataSet("m1-monthly", "m1", "Monthly", 18, 12, "Monthly", 12),
    DataSet("tourism-yearly", "tourism", "Yearly", 4, 1, "Yearly", 1),
    DataSet("tourism-quarterly", "tourism", "Quarterly", 8, 4, "Quarterly", 4),
    DataSet("tourism-monthly", "tourism", "Monthly", 24, 12, "Monthly", 12),
)}


@dataclass(frozen=True)
class Series:
    id: str
    set: str
    history: np.ndarray
    actual: np.ndarray


def data_root() -> Path:
    env = os.environ.get("BENCH_DATA_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


def available() -> bool:
    return all((data_root() / d).is_dir() for d in ("m4", "m1", "tourism"))


def _read(path: Path) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        next(reader)
        for row in reader:
            out[row[0]] = np.asarray([float(v) for v in row[1:] if v != ""], dtype=float)
    return out


def load(name: str, split: str = "test") -> list[Series]:
    ds = SETS[name]
    base = data_root() / ds.folder
    train = _read(base / f"{ds.frequency}-train.csv")
    if split == "valid":
        # series too short to hold out a horizon and keep 3 points are skipped
        return [Series(k, name, v[:-ds.horizon], v[-ds.horizon:]) for k, v in train.items()
                if len(v) >= ds.horizon + 3]
    if split != "test":
        raise ValueError(f"unknown split {split!r}")
    test = _read(base / f"{ds.frequency}-test.csv")
    return [Series(k, name, train[k], test[k][:ds.horizon]) for k in train]


def sample(series: list[Series], n: int | None, seed: int = 0) -> list[Series]:
    """A fixed random sample of ``n`` series in file order (all when n is None or >= len)."""
    if n is None or n >= len(series):
        return list(series)
    idx = np.sort(np.random.default_rng(seed).choice(len(series), size=n, replace=False))
    return [series[i] for i in idx]


# --------------------------------------------------------------------------------------------------
# scoring (as M4 does; see the data READMEs)


def mase_scale(history: np.ndarray, m: int) -> float:
    x = np.asarray(history, dtype=float)
    if len(x) <= m:
        m = 1
    d = np.abs(x[m:] - x[:-m])
    s = float(d.mean()) if len(d) else float("nan")
    return s if s > 0 else float("nan")


def smape(actual: np.ndarray, forecast: np.ndarray) -> float:
    den = np.abs(actual) + np.abs(forecast)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = np.where(den > 0, 200.0 * np.abs(actual - forecast) / den, 0.0)
    return float(r.mean())


def msis(actual: np.ndarray, lower: np.ndarray, upper: np.ndarray, scale: float, alpha: float) -> float:
    pen = (upper - lower) + (2.0 / alpha) * ((lower - actual) * (actual < lower) + (actual - upper) * (actual > upper))
    return float(pen.mean()) / scale


@dataclass
class Score:
    smape: float
    mase: float
    owa: float | None
    msis: float
    coverage: dict[float, float]
    lower_negative: float | None  # share of steps with lower < 0 on never-negative histories


def score(ds: DataSet, series: list[Series], forecasts: list[dict[float, tuple[np.ndarray, np.ndarray, np.ndarray]]],
          msis_level: float = 0.95) -> Score:
    """Aggregate over series; ``forecasts[i][confidence] = (median, lower, upper)``."""
    sm, ms, mi, neg = [], [], [], []
    cov: dict[float, list[float]] = {}
    for s, fc in zip(series, forecasts, strict=True):
        sc = mase_scale(s.history, ds.mase_m)
        med = fc[msis_level][0]
        sm.append(smape(s.actual, med))
        ms.append(float(np.mean(np.abs(s.actual - med))) / sc)
        lo, up = fc[msis_level][1], fc[msis_level][2]
        mi.append(msis(s.actual, lo, up, sc, 1.0 - msis_level))
        for c, (_, lo_c, up_c) in fc.items():
            cov.setdefault(c, []).append(float(np.mean((s.actual >= lo_c) & (s.actual <= up_c))))
        if np.min(s.history) >= 0:
            neg.append(float(np.mean(lo < 0)))
    smape_v, mase_v = float(np.mean(sm)), float(np.nanmean(ms))
    owa = None
    if ds.naive2:
        owa = 0.5 * (smape_v / ds.naive2[0] + mase_v / ds.naive2[1])
    return Score(smape_v, mase_v, owa, float(np.nanmean(mi)), {c: float(np.mean(v)) for c, v in cov.items()},
                 float(np.mean(neg)) if neg else None)
