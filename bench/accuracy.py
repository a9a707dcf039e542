"""M4 Hourly/Weekly accuracy and calibration benchmark of the forecast models.

    python bench/accuracy.py [--sample N] [--models forecast-model-1,...] [--frequencies Hourly,Weekly]
        [--confidences 0.5,0.8,0.9,0.95,0.99] [--mode inprocess|http] [--url http://127.0.0.1:8000]
        [--key-env FORECAST_API_KEY] [--jobs 2] [--split test|valid] [--output results.md]

``--split valid`` scores on the training rows only (last horizon held out): use it to choose designs.
In-process mode calls the model code directly (one fit per series, every confidence from it, the same
numbers as ``run_forecast``); http mode POSTs to a running service.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
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

import m4  # noqa: E402

START = datetime(2015, 1, 5)
STEP = {"Hourly": timedelta(hours=1), "Weekly": timedelta(weeks=1)}


def _inprocess(task):
    model_id, s, confidences = task
    from app.forecast.models import run_forecast_multi, seasonal_periods

    freq = m4.DATA_FREQUENCY[s.frequency]
    h = m4.HORIZON[s.frequency]
    per = seasonal_periods(freq, 1, len(s.history))
    t = time.perf_counter()
    res = run_forecast_multi(model_id, s.history.tolist(), h, confidences, per)
    dt = time.perf_counter() - t
    out = [(np.array(r.median), np.array(r.lower), np.array(r.upper)) for r in res]
    return out, dt, res[0].fallback


def _post(url: str, key: str, model_id: str, body: dict) -> tuple[dict, float, str | None]:
    """(response body, seconds of the successful attempt, X-Forecast-Fallback header)."""
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


def _http(task):
    model_id, s, confidences, url, key = task
    freq = m4.DATA_FREQUENCY[s.frequency]
    stamps = [(START + i * STEP[s.frequency]).strftime("%Y-%m-%dT%H:%M:%S") for i in range(len(s.history))]
    out = []
    dt = 0.0
    fallback = None
    for c in confidences:
        body = {"series": [{"timestamps": stamps, "values": s.history.tolist()}],
                "forecast_horizon": m4.HORIZON[s.frequency], "data_frequency": freq,
                "forecast_frequency": freq, "confidence": c}
        r, seconds, fb = _post(url, key, model_id, body)
        dt += seconds
        fallback = fallback or fb
        out.append((np.array(r["median"]), np.array(r["lower_bound"]), np.array(r["upper_bound"])))
    return out, dt / len(confidences), fallback


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=None)
    ap.add_argument("--models", default="forecast-model-1,forecast-model-2,forecast-model-3,forecast-model-4")
    ap.add_argument("--frequencies", default="Hourly,Weekly")
    ap.add_argument("--confidences", default="0.5,0.8,0.9,0.95,0.99")
    ap.add_argument("--mode", choices=["inprocess", "http"], default="inprocess")
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--key-env", default="FORECAST_API_KEY")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--split", choices=["test", "valid"], default="test")
    ap.add_argument("--output", default=None)
    args = ap.parse_args(argv)

    models = [m for m in args.models.split(",") if m]
    freqs = [f for f in args.frequencies.split(",") if f]
    confs = [float(c) for c in args.confidences.split(",") if c]
    if 0.95 not in confs:
        confs.append(0.95)
    key = os.environ.get(args.key_env, "") if args.mode == "http" else ""
    if args.mode == "http" and not key:
        ap.error(f"environment variable {args.key_env} is empty")

    lines: list[str] = [f"# M4 accuracy ({args.mode}, split={args.split}, sample={args.sample or 'all'})", ""]
    calib: list[tuple[str, str, list[float]]] = []
    for freq in freqs:
        series = m4.sample(m4.load(freq, args.split), args.sample)
        lines += [f"## {freq} ({len(series)} series, horizon {m4.HORIZON[freq]})", "",
                  "| model | sMAPE | MASE | OWA | coverage@95 | ACD | MSIS | mean s/series | median s/series "
                  "| fallbacks |", "|---|---|---|---|---|---|---|---|---|---|"]
        for model_id in models:
            if args.mode == "inprocess":
                tasks = [(model_id, s, confs) for s in series]
                fn = _inprocess
            else:
                tasks = [(model_id, s, confs, args.url, key) for s in series]
                fn = _http
            with Pool(max(1, args.jobs)) as pool:
                res = pool.map(fn, tasks, chunksize=1)
            times = np.array([r[1] for r in res])
            nfb = sum(1 for r in res if r[2])
            per_conf = []
            for ci, c in enumerate(confs):
                rows = [(s, *r[0][ci]) for s, r in zip(series, res, strict=True)]
                per_conf.append(m4.score(freq, rows, c))
            sc = per_conf[confs.index(0.95)]
            lines.append(f"| {model_id} | {sc.smape:.3f} | {sc.mase:.3f} | {sc.owa:.3f} | {sc.coverage:.3f} | "
                         f"{sc.acd:.3f} | {sc.msis:.3f} | {times.mean():.4f} | {np.median(times):.4f} | {nfb} |")
            calib.append((model_id, freq, [p.coverage for p in per_conf]))
            print(lines[-1], flush=True)
        for name, vals in m4.PUBLISHED.items():
            o, ms, acd = vals[freq]
            lines.append(f"| {name} (published) | - | - | {m4.fmt(o)} | - | {m4.fmt(acd)} | {m4.fmt(ms)} | - | - | - |")
        lines.append("")
    lines += ["## Calibration: empirical coverage by nominal confidence", "",
              "| model | frequency | " + " | ".join(f"{c:g}" for c in confs) + " |",
              "|---|---|" + "---|" * len(confs)]
    for model_id, freq, covs in calib:
        lines.append(f"| {model_id} | {freq} | " + " | ".join(f"{v:.3f}" for v in covs) + " |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        Path(args.output).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
