"""Does pmdarima earn its place? Its auto_arima against the ridge AR(3) on differences that model-1 uses.

    python bench/pmdarima_trial.py [--sample 40] [--sets m1-yearly,tourism-yearly,m1-quarterly,m4-hourly]

Both run as model-1's ARIMA-like pool member does: on the seasonally adjusted series (classical
decomposition when the seasonality test says so), scale-normalised. Reported per set: sMAPE and MASE of
each as a standalone forecaster, and the median seconds per fit; plus the p50 seconds at 1,000 hourly
points (model-1 fits every member at 8 rolling origins + once, so a member must cost well under
300 ms / 9 there to fit model-1's budget).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import datasets  # noqa: E402

from app.compute.forecast.base import _normalise  # noqa: E402
from app.compute.forecast.candidates import deseasonalised  # noqa: E402
from app.compute.forecast.smoothing import ar_diff_forecast  # noqa: E402
from app.series.frequencies import seasonal_periods  # noqa: E402


def auto_arima_forecast(y: np.ndarray, h: int) -> np.ndarray:
    import pmdarima as pm

    if len(y) < 5 or np.ptp(y) == 0:
        return np.full(h, float(y[-1]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = pm.auto_arima(y, seasonal=False, stepwise=True, suppress_warnings=True, error_action="ignore",
                              max_p=3, max_q=3, max_d=2)
        return np.asarray(model.predict(n_periods=h), dtype=float)


MEMBERS = {"ridge AR(3) on differences": deseasonalised(ar_diff_forecast),
           "pmdarima auto_arima": deseasonalised(auto_arima_forecast)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=40)
    ap.add_argument("--sets", default="m1-yearly,tourism-yearly,m1-quarterly,m4-hourly")
    args = ap.parse_args(argv)
    print("| set | member | sMAPE | MASE | s/fit p50 |\n|---|---|---|---|---|")
    for name in args.sets.split(","):
        ds = datasets.SETS[name]
        series = datasets.sample(datasets.load(name), args.sample)
        for label, fn in MEMBERS.items():
            sm, ms, ts = [], [], []
            for s in series:
                x, scale = _normalise(s.history, 3000)
                per = seasonal_periods(ds.data_frequency, 1, len(x))
                t = time.perf_counter()
                f = fn(x, ds.horizon, per) * scale
                ts.append(time.perf_counter() - t)
                sm.append(datasets.smape(s.actual, f))
                ms.append(float(np.mean(np.abs(s.actual - f))) / datasets.mase_scale(s.history, ds.mase_m))
            print(f"| {name} | {label} | {np.mean(sm):.3f} | {np.nanmean(ms):.3f} | {np.median(ts):.4f} |", flush=True)
    rng = np.random.default_rng(0)
    t = np.arange(1000)
    y = 1 + 0.1 * np.sin(2 * np.pi * t / 24) + 0.01 * rng.standard_normal(1000)
    for label, fn in MEMBERS.items():
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            fn(y, 48, (24, 168))
            ts.append(time.perf_counter() - t0)
        print(f"| 1,000 hourly points | {label} | - | - | {np.median(ts):.4f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
