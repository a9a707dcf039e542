"""Forecasts with drivers: the default model with and without covariates, beside statsforecast's AutoARIMA with the
same regressors and Prophet with the same regressors and the country's holidays, in the same run.

    python bench/drivers.py [--quick]        # writes bench/results/drivers.md

Data, all from registry packages, nothing hand-made:
- bike-hourly: ISLP's Bikeshare (Capital Bikeshare, Washington DC, 2011, hourly rentals `bikers`), read out of the
  ISLP wheel from PyPI (``pip download ISLP --no-deps`` into ~/.cache/forecast-bench; ISLP itself is not
  installed: it needs torch). Hours absent from the file are the system's closures and empty night hours: they
  count 0 rentals, their weather is the previous hour's. Covariates: temperature, humidity, wind speed, the
  weather situation (one-hot, first level dropped; the single "heavy rain/snow" hour counts as light), holiday,
  working day. Horizon 24 hours from origins at midnight, each history the 8 weeks before it.
- bike-daily: the same rentals summed by day, the weather averaged by day (the share of rainy hours for the
  weather situation). Horizon 14 days; each history every day before the origin.
- macro-quarterly: statsmodels' macrodata (US, 1959-2009): real personal consumption with real disposable income
  and the unemployment rate as covariates. Horizon 8 quarters; each history every quarter before the origin.
- <name>+noise: the same series and windows with three standard-normal random columns (seeded) as the only
  covariates: what a model does with covariates that carry nothing.

The covariates' values over the horizon are the actual ones (a perfect forecast of the weather, the income): what
every method is given alike. Rolling origins: the last windows of each series, non-overlapping (one
``horizon`` apart; 17 days apart on the hourly data, all at midnight, so they spread over the autumn and fall on
every day of the week). Scores per window, then averaged over the windows: MASE scaled by the in-sample
seasonal naive error of that window's history (season 24 hourly, 7 daily, 4 quarterly), sMAPE, and the
coverage of the 95% interval. Every method's forecast is clipped at 0 on a series that never went negative (ours
does so itself).

Methods:
- ours: app.compute.forecast.models.run_forecast with the default model, without covariates.
- ours+cov: the same with the covariates (app.compute.forecast.regression); `used` is the share of windows where
  the holdout kept the covariates.
- arima+X: statsforecast AutoARIMA(season_length) with the covariates as exogenous columns (X_df).
- prophet+X: Prophet with each covariate as an extra regressor and, for the bike data, the US holidays
  (add_country_holidays); its default seasonalities.

Rules of the covariate model, each removed in turn (ours+cov only, the same windows): every series' MASE and
coverage with the rule and without it, so a rule that helps one set and costs the others shows as such.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import io  # noqa: E402
import logging  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
import zipfile  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass, replace  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

from app.compute.forecast import regression  # noqa: E402
from app.compute.forecast.catalog import DEFAULT_MODEL_ID  # noqa: E402
from app.compute.forecast.models import run_forecast  # noqa: E402
from app.compute.forecast.work import CovariateMatrix  # noqa: E402
from app.forecast.accuracy import coverage, mase, mase_scale, smape  # noqa: E402
from app.series.frequencies import seasonal_periods  # noqa: E402

CACHE = Path(os.environ.get("FORECAST_BENCH_CACHE", Path.home() / ".cache" / "forecast-bench"))
OUTPUT = Path(__file__).resolve().parent / "results" / "drivers.md"
CONFIDENCE = 0.95
ISLP_VERSION = "0.6.0"
NOISE_COLUMNS = 3
HOURLY_STEP = 17 * 24  # hourly origins 17 days apart: spread over months, on every day of the week in turn


@dataclass(frozen=True)
class Case:
    name: str
    frequency: str  # app.series.frequencies name, for the seasonal periods our models get
    pandas_freq: str
    season: int  # MASE scale and AutoARIMA season_length
    horizon: int
    timestamps: pd.DatetimeIndex
    y: np.ndarray
    covariates: pd.DataFrame  # numeric design columns, aligned with y
    country: str | None  # holidays Prophet adds
    origins: tuple[int, ...]  # index of each window's first forecast point
    history: int | None  # points of history before each origin (None: all)


def _islp_csv(name: str) -> pd.DataFrame:
    wheel = CACHE / f"islp-{ISLP_VERSION}-py3-none-any.whl"
    if not wheel.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", f"ISLP=={ISLP_VERSION}", "--no-deps", "-q",
                        "-d", str(CACHE)], check=True)
    with zipfile.ZipFile(wheel) as z:
        return pd.read_csv(io.BytesIO(z.read(f"ISLP/data/{name}.csv")))


def _origins(n: int, horizon: int, windows: int, step: int) -> tuple[int, ...]:
    """The last ``windows`` origins, ``step`` apart, the newest one's window ending with the data."""
    return tuple(sorted(n - horizon - i * step for i in range(windows)))


def _bikeshare() -> pd.DataFrame:
    raw = _islp_csv("Bikeshare")
    raw["ts"] = (pd.Timestamp("2011-01-01") + pd.to_timedelta(raw["day"] - 1, unit="D")
                 + pd.to_timedelta(raw["hr"].astype(int), unit="h"))
    frame = raw.set_index("ts").reindex(pd.date_range("2011-01-01", periods=365 * 24, freq="h"))
    frame["bikers"] = frame["bikers"].fillna(0.0)
    frame = frame.ffill()
    day = frame.index.normalize()
    # holiday and working day are properties of the day: an hour absent from the file takes its day's
    for col in ("holiday", "workingday"):
        frame[col] = frame.groupby(day)[col].transform("max")
    frame["weathersit"] = frame["weathersit"].replace({"heavy rain/snow": "light rain/snow"})
    return frame


def bike_hourly(windows: int) -> Case:
    f = _bikeshare()
    x = pd.DataFrame({"temp": f["temp"], "hum": f["hum"], "windspeed": f["windspeed"],
                      "weather=cloudy": (f["weathersit"] == "cloudy/misty").astype(float),
                      "weather=rain": (f["weathersit"] == "light rain/snow").astype(float),
                      "holiday": f["holiday"].astype(float), "workingday": f["workingday"].astype(float)})
    y = f["bikers"].to_numpy(float)
    return Case("bike-hourly", "Hours", "h", 24, 24, f.index, y, x.reset_index(drop=True), "US",
                _origins(len(y), 24, windows, HOURLY_STEP), 8 * 168)


def bike_daily(windows: int) -> Case:
    f = _bikeshare()
    g = f.groupby(f.index.normalize())
    x = pd.DataFrame({"temp": g["temp"].mean(), "hum": g["hum"].mean(), "windspeed": g["windspeed"].mean(),
                      "rain_share": g["weathersit"].agg(lambda s: float(np.mean(s == "light rain/snow"))),
                      "holiday": g["holiday"].max().astype(float), "workingday": g["workingday"].max().astype(float)})
    y = g["bikers"].sum().to_numpy(float)
    return Case("bike-daily", "Daily", "D", 7, 14, x.index, y, x.reset_index(drop=True), "US",
                _origins(len(y), 14, windows, 14), None)


def macro_quarterly(windows: int) -> Case:
    from statsmodels.datasets import macrodata

    d = macrodata.load_pandas().data
    ts = pd.PeriodIndex.from_fields(year=d["year"].astype(int), quarter=d["quarter"].astype(int),
                                    freq="Q").to_timestamp()
    x = pd.DataFrame({"realdpi": d["realdpi"].to_numpy(float), "unemp": d["unemp"].to_numpy(float)})
    y = d["realcons"].to_numpy(float)
    return Case("macro-quarterly", "Quarterly", "QS", 4, 8, ts, y, x, None, _origins(len(y), 8, windows, 8), None)


def with_noise(case: Case, seed: int) -> Case:
    rng = np.random.default_rng(seed)
    noise = pd.DataFrame(rng.standard_normal((len(case.y), NOISE_COLUMNS)),
                         columns=[f"noise{i}" for i in range(NOISE_COLUMNS)])
    return replace(case, name=case.name + "+noise", covariates=noise, country=None)


# --------------------------------------------------------------------------------------------------
# methods: (case, history slice, forecast slice) -> (median, lower, upper, used)

Forecast = tuple[np.ndarray, np.ndarray, np.ndarray, float]


def ours(case: Case, hist: slice, fut: slice, with_covariates: bool) -> Forecast:
    y = case.y[hist]
    periods = seasonal_periods(case.frequency, 1, len(y))
    cm = None
    if with_covariates:
        cols = tuple(case.covariates.columns)
        cm = CovariateMatrix(cols, case.covariates.iloc[hist].to_numpy(float),
                             case.covariates.iloc[fut].to_numpy(float), (False,) * len(cols))
    res = run_forecast(DEFAULT_MODEL_ID, y, case.horizon, CONFIDENCE, periods, covariates=cm)
    return np.array(res.median), np.array(res.lower), np.array(res.upper), float(bool(res.covariates_used))


def arima_x(case: Case, hist: slice, fut: slice) -> Forecast:
    from statsforecast import StatsForecast
    from statsforecast.models import AutoARIMA

    x = case.covariates
    train = pd.DataFrame({"unique_id": "s", "ds": case.timestamps[hist], "y": case.y[hist]})
    train = pd.concat([train, x.iloc[hist].reset_index(drop=True)], axis=1)
    future = pd.concat([pd.DataFrame({"unique_id": "s", "ds": case.timestamps[fut]}),
                        x.iloc[fut].reset_index(drop=True)], axis=1)
    sf = StatsForecast(models=[AutoARIMA(season_length=case.season)], freq=case.pandas_freq, n_jobs=1)
    out = sf.forecast(df=train, h=case.horizon, X_df=future, level=[95])
    return (out["AutoARIMA"].to_numpy(float), out["AutoARIMA-lo-95"].to_numpy(float),
            out["AutoARIMA-hi-95"].to_numpy(float), 1.0)


def prophet_x(case: Case, hist: slice, fut: slice) -> Forecast:
    from prophet import Prophet

    x = case.covariates
    m = Prophet(interval_width=CONFIDENCE)
    for col in x.columns:
        m.add_regressor(col)
    if case.country:
        m.add_country_holidays(country_name=case.country)
    train = pd.concat([pd.DataFrame({"ds": case.timestamps[hist], "y": case.y[hist]}),
                       x.iloc[hist].reset_index(drop=True)], axis=1)
    future = pd.concat([pd.DataFrame({"ds": case.timestamps[fut]}), x.iloc[fut].reset_index(drop=True)], axis=1)
    m.fit(train)
    out = m.predict(future)
    return out["yhat"].to_numpy(float), out["yhat_lower"].to_numpy(float), out["yhat_upper"].to_numpy(float), 1.0


METHODS: dict[str, Callable[[Case, slice, slice], Forecast]] = {
    "ours": lambda c, h, f: ours(c, h, f, False),
    "ours+cov": lambda c, h, f: ours(c, h, f, True),
    "arima+X": arima_x,
    "prophet+X": prophet_x,
}


def evaluate(case: Case, methods: tuple[str, ...]) -> dict[str, dict[str, float]]:
    rows: dict[str, list[tuple[float, float, float, float, float]]] = {m: [] for m in methods}
    nonnegative = bool(np.min(case.y) >= 0)
    for o in case.origins:
        start = 0 if case.history is None else max(0, o - case.history)
        hist, fut = slice(start, o), slice(o, o + case.horizon)
        actual = case.y[fut]
        scale = mase_scale(case.y[hist], case.season)
        for name in methods:
            t0 = time.process_time()
            med, lo, hi, used = METHODS[name](case, hist, fut)
            cpu = time.process_time() - t0
            if nonnegative:
                med, lo, hi = (np.maximum(a, 0.0) for a in (med, lo, hi))
            rows[name].append((mase(actual, med, scale), smape(actual, med), coverage(actual, lo, hi), used, cpu))
    return {name: dict(zip(("mase", "smape", "coverage", "used", "cpu"), np.mean(np.array(r), axis=0),
                           strict=True)) for name, r in rows.items()}


def _quiet() -> None:
    warnings.filterwarnings("ignore")
    for name in ("cmdstanpy", "prophet", "statsforecast"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _revision() -> str:
    """The commit measured, and whether the forecast code differed from it."""
    root = Path(__file__).resolve().parents[1]
    git = ["git", "-C", str(root)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "app/compute/forecast"], capture_output=True,
                           text=True).stdout.strip()
    return f"commit {head}" + (" with uncommitted changes under app/compute/forecast" if dirty else "")


# each rule of app.compute.forecast.regression removed in turn: the module constant that switches it off
RULE_ABLATIONS: dict[str, tuple[str, float | int]] = {
    "no significance test (every column kept)": ("SIGNIFICANCE_Z", 0.0),
    "one holdout window instead of three": ("HOLDOUT_WINDOWS", 1),
}


def ablations(cases: list[Case]) -> dict[str, dict[str, dict[str, float]]]:
    """ours+cov on every case with each rule of RULE_ABLATIONS removed (the module's constant set for the run)."""
    out = {}
    for label, (constant, value) in RULE_ABLATIONS.items():
        shipped = getattr(regression, constant)
        setattr(regression, constant, value)
        try:
            out[label] = {case.name: evaluate(case, ("ours+cov",))["ours+cov"] for case in cases}
        finally:
            setattr(regression, constant, shipped)
    return out


def render_ablations(results: dict[str, dict[str, dict[str, float]]],
                     removed: dict[str, dict[str, dict[str, float]]], cases: list[Case]) -> list[str]:
    names = [case.name for case in cases]
    lines = ["", "Rules of the covariate model, each removed in turn (ours+cov, MASE / 95% coverage, same windows):",
             "", "| rule | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names),
             "| shipped | " + " | ".join(f"{results[n]['ours+cov']['mase']:.3f} / "
                                         f"{results[n]['ours+cov']['coverage']:.3f}" for n in names) + " |"]
    for label, by_case in removed.items():
        lines.append(f"| {label} | " + " | ".join(f"{by_case[n]['mase']:.3f} / {by_case[n]['coverage']:.3f}"
                                                  for n in names) + " |")
    return lines


def render(results: dict[str, dict[str, dict[str, float]]], cases: list[Case], seconds: float, quick: bool) -> str:
    lines = ["# Forecasts with drivers (bench/drivers.py)", "",
             f"`python bench/drivers.py{' --quick' if quick else ''}`: the default model ({DEFAULT_MODEL_ID}) "
             "without and with covariates, statsforecast AutoARIMA with the same regressors, Prophet with the "
             "same regressors (and the US holidays on the bike data), on the same rolling windows in one run "
             f"({seconds:.0f} s wall). Data, windows and scores: the docstring of bench/drivers.py.", "",
             f"code: {_revision()}; {common.machine_line()}", ""]
    lines += ["| series | windows x horizon | method | MASE | sMAPE | 95% coverage | covariates used | CPU s/window |",
              "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for case in cases:
        for name, r in results[case.name].items():
            used = f"{r['used']:.0%}" if name == "ours+cov" else ""
            lines.append(f"| {case.name} | {len(case.origins)} x {case.horizon} | {name} | {r['mase']:.3f} | "
                         f"{r['smape']:.2f} | {r['coverage']:.3f} | {used} | {r['cpu']:.1f} |")
    driver_cases = [c for c in cases if "+noise" not in c.name]
    lines += ["", "Mean over the series with drivers (each series' windows averaged first):", "",
              "| method | MASE | sMAPE | 95% coverage |", "| --- | ---: | ---: | ---: |"]
    for name in results[driver_cases[0].name]:
        vals = np.array([[results[c.name][name][k] for k in ("mase", "smape", "coverage")] for c in driver_cases])
        m = vals.mean(axis=0)
        lines.append(f"| {name} | {m[0]:.3f} | {m[1]:.2f} | {m[2]:.3f} |")
    lines += ["", "Noise covariates: MASE with the random columns over MASE without covariates (1.000: the same):",
              ""]
    ratios = []
    for case in cases:
        if "+noise" in case.name:
            r = results[case.name]
            ratios.append(r["ours+cov"]["mase"] / r["ours"]["mase"])
            lines.append(f"- {case.name}: {ratios[-1]:.4f} (covariates kept in {r['ours+cov']['used']:.0%} of the "
                         "windows)")
    lines += ["", "Issue 81's targets, per series with drivers (computed from the table above):", ""]
    for rival in ("ours", "arima+X", "prophet+X"):
        wins = [c.name for c in driver_cases if results[c.name]["ours+cov"]["mase"] < results[c.name][rival]["mase"]]
        lines.append(f"- ours+cov has a lower MASE than {rival}: {len(wins)} of {len(driver_cases)} series "
                     f"({', '.join(wins) or 'none'})")
    inside = [c.name for c in driver_cases if 0.93 <= results[c.name]["ours+cov"]["coverage"] <= 0.97]
    lines.append(f"- ours+cov's 95% coverage within 0.93-0.97: {len(inside)} of {len(driver_cases)} series "
                 f"({', '.join(inside) or 'none'})")
    lines.append(f"- noise covariates no worse than without by more than 1%: "
                 f"{sum(r <= 1.01 for r in ratios)} of {len(ratios)} series")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 windows a series instead of 8")
    ap.add_argument("--output", type=Path, default=OUTPUT)
    args = ap.parse_args()
    _quiet()
    windows = 3 if args.quick else 8
    drivers = [bike_hourly(windows), bike_daily(windows), macro_quarterly(windows)]
    cases = drivers + [with_noise(c, seed=i) for i, c in enumerate(drivers)]
    t0 = time.time()
    results = {}
    for case in cases:
        methods = tuple(METHODS) if "+noise" not in case.name else ("ours", "ours+cov")
        results[case.name] = evaluate(case, methods)
        print(case.name, {k: round(v["mase"], 3) for k, v in results[case.name].items()}, flush=True)
    removed = ablations(cases)
    text = render(results, cases, time.time() - t0, args.quick)
    text += "\n".join(render_ablations(results, removed, cases)) + "\n"
    args.output.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
