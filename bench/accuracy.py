"""Accuracy and calibration of the forecast models on every development set, beside statsforecast anchors.

    python bench/accuracy.py [--sets m4-hourly,m4-weekly,m1-yearly,...] [--sample N] [--seed 0]
        [--models forecast-model-1,...] [--anchors AutoETS,AutoTheta,AutoARIMA | none]
        [--confidences 0.5,0.8,0.9,0.95,0.99] [--split test|valid] [--jobs 2]
        [--anchor-cache DIR] [--mode inprocess|http] [--url ...] [--key-env FORECAST_API_KEY]
        [--output results.md]

One table per set: sMAPE, MASE, OWA (M4 only), MSIS at 95%, empirical coverage at each confidence,
the share of forecast steps with a negative lower bound on never-negative histories, and seconds per
series. The anchors (statsforecast AutoETS, AutoTheta, AutoARIMA and Comb, the mean of their medians
and bounds) are computed in the same run on the same series (a development-only dependency).
``--split valid`` scores on the training rows only (last horizon held out): use it to choose designs.
``--sample N`` takes a fixed random sample of N series per set (``--seed``), for quick iterations.
``--anchor-cache DIR`` reuses anchor forecasts of an earlier run (keyed by set, split and series id)
while iterating on the models. The anchors dominate the cost: statsforecast's AutoARIMA took 9-66 s of
CPU a series on M4 Hourly (960 points, season 24) and did not finish one M4 Weekly series (season 52,
up to 2,597 points) in 400 s, against ~1 s on M1 Monthly and ~8 s on Tourism Monthly. To finish, start
the anchors first in their own process (``--models "" --anchor-cache DIR``, same --sets/--sample/--seed/
--split) and run the models with the same cache while it works.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import pickle  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402
from datetime import datetime, timedelta  # noqa: E402
from multiprocessing import Pool  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import datasets  # noqa: E402
from datasets import SETS, DataSet, Series  # noqa: E402

MODELS = "forecast-model-1,forecast-model-2,forecast-model-3,forecast-model-4"
ANCHORS = ("AutoETS", "AutoTheta", "AutoARIMA")
Forecast = dict[float, tuple[np.ndarray, np.ndarray, np.ndarray]]


def _inprocess(task: tuple[str, DataSet, Series, list[float]]) -> tuple[Forecast, float, str | None]:
    model_id, ds, s, confs = task
    from app.compute.forecast.models import run_forecast_multi
    from app.series.frequencies import seasonal_periods

    per = seasonal_periods(ds.data_frequency, 1, len(s.history))
    t = time.perf_counter()
    res = run_forecast_multi(model_id, s.history.tolist(), ds.horizon, confs, per)
    dt = time.perf_counter() - t
    return ({c: (np.array(r.median), np.array(r.lower), np.array(r.upper)) for c, r in zip(confs, res, strict=True)},
            dt, res[0].fallback)


def _stamps(ds: DataSet, n: int) -> list[str]:
    start = datetime(2015, 1, 1)
    if ds.data_frequency in ("Hours", "Weekly"):
        step = timedelta(hours=1) if ds.data_frequency == "Hours" else timedelta(weeks=1)
        return [(start + i * step).strftime("%Y-%m-%dT%H:%M:%S") for i in range(n)]
    months = {"Monthly": 1, "Quarterly": 3, "Yearly": 12}[ds.data_frequency]
    out = []
    for i in range(n):
        k = i * months
        out.append(f"{1900 + k // 12:04d}-{k % 12 + 1:02d}-01T00:00:00")
    return out


def _post(url: str, key: str, model_id: str, body: dict) -> tuple[dict, float, str | None]:
    data = json.dumps(body).encode()
    for _attempt in range(50):
        req = urllib.request.Request(f"{url}/forecast", data=data, method="POST", headers={
            "Content-Type": "application/json", "Authorization": f"Bearer {key}", "X-Model-Id": model_id})
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                payload = json.loads(resp.read())
                return payload, time.perf_counter() - t, resp.headers.get("X-Forecast-Fallback")
        except urllib.error.HTTPError as exc:
            if exc.code == 429:
                time.sleep(float(exc.headers.get("Retry-After") or 1))
                continue
            raise RuntimeError(f"HTTP {exc.code}: {exc.read()[:300]!r}") from exc
    raise RuntimeError("too many 429 responses")


def _http(task: tuple[str, DataSet, Series, list[float], str, str]) -> tuple[Forecast, float, str | None]:
    model_id, ds, s, confs, url, key = task
    stamps = _stamps(ds, len(s.history))
    out: Forecast = {}
    dt = 0.0
    fallback = None
    for c in confs:
        body = {"series": [{"timestamps": stamps, "values": s.history.tolist()}], "forecast_horizon": ds.horizon,
                "data_frequency": ds.data_frequency, "forecast_frequency": ds.data_frequency, "confidence": c}
        r, seconds, fb = _post(url, key, model_id, body)
        dt += seconds
        fallback = fallback or fb
        out[c] = (np.array(r["median"]), np.array(r["lower_bound"]), np.array(r["upper_bound"]))
    return out, dt / len(confs), fallback


def _anchor(task: tuple[str, DataSet, Series, list[float]]) -> tuple[Forecast, float, str | None]:
    """One statsforecast model on one series; Naive when the model cannot be fitted (reported)."""
    import warnings

    from statsforecast import models as sf

    name, ds, s, confs = task
    levels = sorted({round(100 * c) for c in confs})
    y = s.history.astype(float)
    season = ds.season if len(y) >= 2 * ds.season + 1 else 1
    t = time.perf_counter()
    note = None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = getattr(sf, name)(season_length=season)
            r = model.forecast(y=y, h=ds.horizon, level=levels)
            if not all(np.all(np.isfinite(r[k])) for k in r):
                raise ValueError("non-finite")
    except Exception as exc:  # noqa: BLE001 - a failing anchor is scored as Naive, and counted
        note = type(exc).__name__
        r = sf.Naive().forecast(y=y, h=ds.horizon, level=levels)
    dt = time.perf_counter() - t
    return ({c: (np.asarray(r["mean"]), np.asarray(r[f"lo-{round(100 * c)}"]),
                 np.asarray(r[f"hi-{round(100 * c)}"])) for c in confs}, dt, note)


def _run(fn, tasks: list, jobs: int) -> list:
    if jobs <= 1:
        return [fn(t) for t in tasks]
    with Pool(jobs) as pool:
        return pool.map(fn, tasks, chunksize=1)


def _anchors(ds: DataSet, series: list[Series], confs: list[float], names: list[str], split: str, jobs: int,
             cache: Path | None) -> dict[str, list[tuple[Forecast, float, str | None]]]:
    out = {}
    for name in names:
        path = cache / f"{ds.name}-{split}-{name}.pkl" if cache else None
        known: dict[str, tuple] = {}
        if path and path.exists():
            known = pickle.loads(path.read_bytes())
        todo = [s for s in series if s.id not in known or set(known[s.id][0]) != set(confs)]
        for s, r in zip(todo, _run(_anchor, [(name, ds, s, confs) for s in todo], jobs), strict=True):
            known[s.id] = r
        if path and todo:
            path.write_bytes(pickle.dumps(known))
        out[name] = [known[s.id] for s in series]
    if len(names) == len(ANCHORS):
        comb = []
        for i in range(len(series)):
            fc = {c: tuple(np.mean([out[n][i][0][c][k] for n in names], axis=0) for k in range(3)) for c in confs}
            comb.append((fc, sum(out[n][i][1] for n in names), None))
        out["Comb (mean of 3)"] = comb
    return out


def _row(ds: DataSet, name: str, series: list[Series], res: list, confs: list[float]) -> str:
    sc = datasets.score(ds, series, [r[0] for r in res])
    times = np.array([r[1] for r in res])
    notes = sum(1 for r in res if r[2])
    owa = f"{sc.owa:.3f}" if sc.owa is not None else "-"
    neg = f"{sc.lower_negative:.3f}" if sc.lower_negative is not None else "-"
    covs = " | ".join(f"{sc.coverage[c]:.3f}" for c in confs)
    return (f"| {name} | {sc.smape:.3f} | {sc.mase:.3f} | {owa} | {sc.msis:.3f} | {covs} | {neg} | "
            f"{np.median(times):.4f} | {notes} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--frequencies", default=None, help="M4 only, e.g. Hourly,Weekly (kept for bench/run.py)")
    ap.add_argument("--sample", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--anchors", default=",".join(ANCHORS))
    ap.add_argument("--confidences", default="0.5,0.8,0.9,0.95,0.99")
    ap.add_argument("--mode", choices=["inprocess", "http"], default="inprocess")
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--key-env", default="FORECAST_API_KEY")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--split", choices=["test", "valid"], default="test")
    ap.add_argument("--anchor-cache", default=None)
    ap.add_argument("--output", default=None)
    args = ap.parse_args(argv)

    if not datasets.available():
        print(f"data sets not found under {datasets.data_root()}; set BENCH_DATA_DIR", file=sys.stderr)
        return 2
    sets = [s for s in args.sets.split(",") if s]
    if args.frequencies:
        sets = [f"m4-{f.lower()}" for f in args.frequencies.split(",") if f]
    models = [m for m in args.models.split(",") if m]
    anchors = [a for a in args.anchors.split(",") if a and a != "none"]
    confs = sorted({float(c) for c in args.confidences.split(",") if c} | {0.95})
    key = os.environ.get(args.key_env, "") if args.mode == "http" else ""
    if args.mode == "http" and not key:
        ap.error(f"environment variable {args.key_env} is empty")
    cache = Path(args.anchor_cache) if args.anchor_cache else None
    if cache:
        cache.mkdir(parents=True, exist_ok=True)

    lines = [f"# Accuracy ({args.mode}, split={args.split}, sample={args.sample or 'all'}, seed={args.seed})", "",
             "Coverage columns: share of actuals inside the interval at each nominal confidence. "
             "neg.lower: share of forecast steps with a lower bound below 0 on never-negative histories. "
             "s/series: median seconds per series (anchors: fit + forecast; Comb: sum of its three).", ""]
    head = ("| model | sMAPE | MASE | OWA | MSIS | " + " | ".join(f"cov {c:g}" for c in confs)
            + " | neg.lower | s/series | fallbacks |")
    sep = "|---" * (8 + len(confs)) + "|"
    for name in sets:
        ds = SETS[name]
        series = datasets.sample(datasets.load(name, args.split), args.sample, args.seed)
        lines += [f"## {name} ({len(series)} series, horizon {ds.horizon}, MASE period {ds.mase_m})", "", head, sep]
        for model_id in models:
            if args.mode == "inprocess":
                res = _run(_inprocess, [(model_id, ds, s, confs) for s in series], args.jobs)
            else:
                res = _run(_http, [(model_id, ds, s, confs, args.url, key) for s in series], args.jobs)
            lines.append(_row(ds, model_id, series, res, confs))
            print(name, lines[-1], flush=True)
        if anchors:
            for aname, res in _anchors(ds, series, confs, anchors, args.split, args.jobs, cache).items():
                lines.append(_row(ds, f"{aname} (statsforecast)", series, res, confs))
                print(name, lines[-1], flush=True)
        lines.append("")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        Path(args.output).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
