"""Backtests: every monthly development series (M1 and Tourism Monthly, whole rows: training and test; 983
series) through the backtest batch's own runner, 6 windows of 12 months every 4 months, with forecast-model-1 and
forecast-model-2, beside statsforecast's ``cross_validation`` with AutoETS on the same series, windows and
cores in the same run. The development data holds no other monthly series (its M4 part is Hourly and Weekly,
and M3 is held out), so 983 is as many as there are.

    python bench/backtest.py [--quick] [--processes 2]

- Ours: app.batches.backtest.BacktestRunner, what a job worker process runs for each series of a backtest batch
  (the series checked as POST /forecast checks it, each window's history checked again and forecast through
  the front door), in a pool of ``--processes`` processes, one model a pass. The database and the web process
  are not part of it (bench/batches.py measures those).
- statsforecast: ``StatsForecast(models=[AutoETS(season_length=12)], freq="MS", n_jobs=processes)
  .cross_validation(h=12, n_windows=6, step_size=4, level=[95])``.
- Each side is warmed up first (imports, numba compilation) on a few series, outside the clock.
- Rate: series-windows per second per core = series x windows / wall seconds / processes; and per CPU second of
  the processes doing the work, which a shared machine moves least. The load average before and after each
  pass is reported beside it.
- Accuracy: every window scored as the M4 competition scores a forecast (app.forecast.accuracy: MASE with the
  seasonal naive scale of the window's own history, m = 12; sMAPE; 95% coverage; MSIS), averaged over a series'
  windows, then over the series, for both sides alike from their forecasts.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from multiprocessing import Pool  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import orjson  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402
import datasets  # noqa: E402

from app.forecast.accuracy import coverage, mase, mase_scale, msis, smape  # noqa: E402

SETS = ("m1-monthly", "tourism-monthly")
HORIZON, WINDOWS, STEP, SEASON, CONFIDENCE = 12, 6, 4, 12, 0.95
MODELS = ("forecast-model-1", "forecast-model-2")
START = np.datetime64("1990-01", "M")


def load(limit: int | None) -> list[tuple[str, np.ndarray]]:
    series = [(f"{name}/{s.id}", np.concatenate([s.history, s.actual])) for name in SETS
              for s in datasets.load(name, "test")]
    if limit is not None and limit > len(series):
        raise SystemExit(f"--series {limit}: the development data holds {len(series)} monthly series")
    if limit is not None and limit < len(series):
        keep = np.unique(np.linspace(0, len(series) - 1, limit).round().astype(int))
        series = [series[i] for i in keep]
    return series


def load_average() -> str:
    one, five, _ = os.getloadavg()
    return f"{one:.1f}/{five:.1f}"


def month_starts(count: int) -> list[str]:
    months = START + np.arange(count)
    return [f"{m}-01T00:00:00" for m in months.astype(str)]


# ---------------------------------------------------------------------------------------------------- ours

_runner: Any = None


def _start(model_id: str) -> None:
    global _runner
    from app.batches.backtest import BacktestRunner

    _runner = BacktestRunner({"fields": {"forecast_horizon": HORIZON, "data_frequency": "Monthly",
                                         "forecast_frequency": "Monthly", "confidence": CONFIDENCE,
                                         "n_windows": WINDOWS, "step_size": STEP, "models": [model_id]},
                              "headers": {"X-Model-Id": model_id}}, max_points=100_000)


def _backtest(item: tuple[str, list[float]]) -> tuple[bytes, float]:
    """The series' result line, and the CPU seconds it took this process."""
    unique_id, values = item
    cpu = time.process_time()
    line = _runner.run({"id": unique_id, "timestamps": month_starts(len(values)), "values": values}, index=0)[1]
    return line, time.process_time() - cpu


def _children_cpu() -> float:
    """CPU seconds of this process and of its children that have ended (statsforecast's pool ends with its run)."""
    mine, theirs = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return mine.ru_utime + mine.ru_stime + theirs.ru_utime + theirs.ru_stime


def ours(series: list[tuple[str, np.ndarray]], model_id: str, processes: int) -> tuple[dict[str, Any], float,
                                                                                        float]:
    items = [(unique_id, values.tolist()) for unique_id, values in series]
    with Pool(processes, initializer=_start, initargs=(model_id,)) as pool:
        pool.map(_backtest, items[:processes * 2], chunksize=1)  # imports and first fits, off the clock
        mine = time.process_time()
        t = time.perf_counter()
        done = pool.map(_backtest, items, chunksize=4)
        wall = time.perf_counter() - t
        mine = time.process_time() - mine
    # the workers' CPU for each series, and this process's for handing the series out and reading the results
    # back, as statsforecast's figure holds its own process's and its pool's
    cpu = sum(seconds for _, seconds in done) + mine
    results = {}
    for line, _ in done:
        result = orjson.loads(line)
        if "error" in result:
            raise RuntimeError(f"{result['id']}: {result['error']}")
        results[result["id"]] = [(w["actual"], w["forecasts"][model_id]) for w in result["windows"]]
    return results, wall, cpu


# --------------------------------------------------------------------------------------------- reference

def statsforecast(series: list[tuple[str, np.ndarray]], processes: int) -> tuple[dict[str, Any], float, float]:
    import pandas as pd
    from statsforecast import StatsForecast
    from statsforecast.models import AutoETS

    frame = pd.concat([pd.DataFrame({"unique_id": unique_id, "ds": pd.date_range("1990-01-01", periods=len(values),
                                                                                    freq="MS"), "y": values})
                       for unique_id, values in series], ignore_index=True)

    def run(df: Any) -> Any:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return StatsForecast(models=[AutoETS(season_length=SEASON)], freq="MS", n_jobs=processes) \
                .cross_validation(df=df, h=HORIZON, n_windows=WINDOWS, step_size=STEP, level=[95])

    run(frame[frame["unique_id"].isin([u for u, _ in series[:processes * 2]])])  # numba compilation, off the clock
    cpu0 = _children_cpu()
    t = time.perf_counter()
    cv = run(frame)
    wall = time.perf_counter() - t
    cpu = _children_cpu() - cpu0
    results: dict[str, Any] = {}
    for (unique_id, _cutoff), window in cv.groupby(["unique_id", "cutoff"], sort=True):
        results.setdefault(unique_id, []).append((window["y"].tolist(), {
            "median": window["AutoETS"].tolist(), "lower": window["AutoETS-lo-95"].tolist(),
            "upper": window["AutoETS-hi-95"].tolist()}))
    return results, wall, cpu


# ------------------------------------------------------------------------------------------------- scores

def scores(series: list[tuple[str, np.ndarray]], results: dict[str, Any]) -> dict[str, float]:
    """M4's scores per window, averaged over each series' windows, then over the series with a finite scale."""
    per_series: dict[str, list[float]] = {"mase": [], "smape": [], "coverage": [], "msis": []}
    for unique_id, values in series:
        windows = results[unique_id]
        cuts = [len(values) - HORIZON - STEP * (WINDOWS - 1 - w) for w in range(WINDOWS)]
        rows: dict[str, list[float]] = {name: [] for name in per_series}
        for cut, (actual, forecast) in zip(cuts, windows, strict=True):
            assert np.allclose(actual, values[cut:cut + HORIZON]), unique_id
            scale = mase_scale(values[:cut], SEASON)
            rows["mase"].append(mase(actual, forecast["median"], scale) if scale > 0 else math.nan)
            rows["msis"].append(msis(actual, forecast["lower"], forecast["upper"], scale, 1 - CONFIDENCE)
                                if scale > 0 else math.nan)
            rows["smape"].append(smape(actual, forecast["median"]))
            rows["coverage"].append(coverage(actual, forecast["lower"], forecast["upper"]))
        for name, found in rows.items():
            per_series[name].append(float(np.mean(found)))
    return {name: float(np.nanmean(found)) for name, found in per_series.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 series instead of every monthly series")
    ap.add_argument("--series", type=int, default=None, help="an even sample of this many series")
    ap.add_argument("--processes", type=int, default=2)
    args = ap.parse_args(argv)
    sample = 100 if args.quick else args.series
    series = load(sample)
    windows = len(series) * WINDOWS
    rows = []
    measured = {}
    for label, run in ((f"ours, {MODELS[0]}", lambda: ours(series, MODELS[0], args.processes)),
                       (f"ours, {MODELS[1]}", lambda: ours(series, MODELS[1], args.processes)),
                       ("statsforecast AutoETS", lambda: statsforecast(series, args.processes))):
        before = load_average()
        results, wall, cpu = run()
        score = scores(series, results)
        measured[label] = (windows / wall / args.processes, windows / cpu, score)
        rows.append([label, f"{windows / wall / args.processes:.2f}", f"{windows / cpu:.1f}", f"{wall:.1f}",
                     f"{cpu:.1f}", f"{before} -> {load_average()}", f"{score['mase']:.3f}", f"{score['smape']:.2f}",
                     f"{score['coverage']:.3f}", f"{score['msis']:.3f}"])
        print(label, rows[-1], flush=True)
    reference_rate, reference_cpu, reference = measured["statsforecast AutoETS"]
    verdicts = [f"{label}: {rate / reference_rate:.1f}x statsforecast AutoETS's series-windows per second per core "
                f"({'faster' if rate > reference_rate else 'SLOWER'} by the wall clock), "
                f"{per_cpu / reference_cpu:.1f}x per CPU second "
                f"({'faster' if per_cpu > reference_cpu else 'SLOWER'} by the CPU it costs); "
                f"MASE {score['mase']:.3f} vs {reference['mase']:.3f} "
                f"({'at least as accurate' if score['mase'] <= reference['mase'] else 'LESS accurate'})"
                for label, (rate, per_cpu, score) in measured.items() if label.startswith("ours")]
    c.write_table(
        "backtest",
        "Backtests: monthly series x 6 windows, ours beside statsforecast's cross_validation",
        [f"{len(series)} monthly series ({' + '.join(SETS)}, whole rows{', an even sample' if sample else ''}),"
         f" {WINDOWS} windows of {HORIZON} months every {STEP} months, 95% intervals: {windows:,} series-windows "
         f"a model; {args.processes} processes each side.",
         "Ours: the backtest batch's runner (app.batches.backtest.BacktestRunner), what a job worker runs per "
         "series, in a process pool, one model a pass; statsforecast: cross_validation with "
         "AutoETS(season_length=12), n_jobs = processes. Both warmed up off the clock.",
         "Scores as M4 computes them (app.forecast.accuracy), per window with the window's own history as the MASE "
         "scale (m = 12), averaged over a series' windows, then over the series.",
         *verdicts],
        ["run", "series-windows/s per core", "series-windows per CPU s", "wall s", "CPU s",
         "load average (1/5 min) before -> after", "MASE", "sMAPE", "coverage 95%", "MSIS"],
        rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
