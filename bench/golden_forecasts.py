"""Golden-file check: do the four forecast models still give exactly the recorded numbers?

A restructure of app/compute/forecast must not move a single forecast. This runs every model at
confidences 0.8 and 0.95 (one fit each, run_forecast_multi) on a fixed sample of series from every
development set plus synthetic edge cases (short, constant, zeros, negative, seasons of 24 / 7 / 12 /
4 / 52 points, horizon 1 and long horizons), and the two seasonal-naive fallback models run directly;
it either records the medians / lowers / uppers and the fallback notes (``--record``) or compares them
with the recorded ones with ``==`` (the default; exit status 1 on any difference). Floats are stored as
``float.hex`` so the comparison is bit for bit.

A deliberate behaviour change (a retuned rule) changes the file: re-record it in that commit and say so.

    .venv/bin/python bench/golden_forecasts.py            # check
    .venv/bin/python bench/golden_forecasts.py --record   # write bench/results/golden-forecasts.json.gz

The development sets are read where bench/datasets.data_root() finds them: ``$BENCH_DATA_DIR``, else
``<repo>/../shared/data``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

GOLDEN = Path(__file__).resolve().parent / "results" / "golden-forecasts.json.gz"
MODELS = ("forecast-model-1", "forecast-model-2", "forecast-model-3", "forecast-model-4")
CONFIDENCES = (0.8, 0.95)
PER_SET = 5  # series per development set (a fixed random sample, bench/datasets.sample)


def synthetic_cases() -> list[tuple[str, np.ndarray, int, tuple[int, ...]]]:
    """(name, values, horizon, periods) edge cases; seeded, so the same on every run."""
    rng = np.random.default_rng(20261124)
    t = lambda n: np.arange(n, dtype=float)  # noqa: E731
    walk = 100 + np.cumsum(rng.standard_normal(200))
    hourly = 50 + 10 * np.sin(2 * np.pi * t(1000) / 24) + 4 * np.sin(2 * np.pi * t(1000) / 168) \
        + rng.standard_normal(1000)
    daily = 200 + 30 * np.sin(2 * np.pi * t(400) / 7) + 0.1 * t(400) + 3 * rng.standard_normal(400)
    monthly = 1000 + 5 * t(150) + 200 * np.sin(2 * np.pi * t(150) / 12) + 20 * rng.standard_normal(150)
    quarterly = 80 + 0.8 * t(60) + 15 * np.tile([1.0, -0.5, 0.8, -1.3], 15) + 2 * rng.standard_normal(60)
    weekly = 300 + 40 * np.sin(2 * np.pi * t(300) / 52) + 0.2 * t(300) + 5 * rng.standard_normal(300)
    spiky = 20 + 5 * np.sin(2 * np.pi * t(500) / 24) + rng.standard_normal(500)
    spiky[rng.choice(500, 12, replace=False)] += 80
    counts = rng.poisson(0.3, 120).astype(float)
    cases = [
        ("one-point", np.array([5.0]), 3, ()),
        ("two-points", np.array([5.0, 6.0]), 4, ()),
        ("short-3", walk[:3], 2, ()),
        ("short-5-quarterly", walk[:5], 8, (4,)),
        ("short-8-monthly", walk[:8], 18, (12,)),
        ("short-20-yearly", walk[:20], 6, ()),
        ("short-30-monthly", walk[:30], 18, (12,)),
        ("constant", np.full(50, 7.0), 12, (12,)),
        ("constant-hourly", np.full(300, 3.5), 24, (24, 168)),
        ("zeros", np.zeros(60), 7, (7,)),
        ("intermittent-counts", counts, 14, (7,)),
        ("negative-hourly", hourly[:500] - 100.0, 24, (24, 168)),
        ("crossing-zero", walk - 100.0, 10, ()),
        ("hourly-24-168", hourly, 48, (24, 168)),
        ("hourly-horizon-1", hourly, 1, (24, 168)),
        ("hourly-horizon-400", hourly, 400, (24, 168)),
        ("daily-7", daily, 14, (7, 365)),
        ("monthly-12", monthly, 18, (12,)),
        ("monthly-horizon-60", monthly, 60, (12,)),
        ("monthly-48", monthly[:48], 18, (12,)),
        ("quarterly-4", quarterly, 8, (4,)),
        ("quarterly-40", quarterly[:40], 8, (4,)),
        ("quarterly-12", quarterly[:12], 8, (4,)),
        ("quarterly-horizon-1", quarterly, 1, (4,)),
        ("weekly-52", weekly, 13, (52,)),
        ("weekly-horizon-104", weekly, 104, (52,)),
        ("yearly-walk", walk[:40], 6, ()),
        ("long-walk-no-period", walk, 30, ()),
        ("spiky-hourly", spiky, 24, (24,)),
        ("huge-values", 1e12 * (1 + 0.01 * np.sin(2 * np.pi * t(100) / 12)), 12, (12,)),
        ("tiny-values", 1e-9 * (2 + np.sin(2 * np.pi * t(100) / 4)), 8, (4,)),
    ]
    return cases


def dataset_cases() -> list[tuple[str, np.ndarray, int, tuple[int, ...]]]:
    import datasets

    from app.series.frequencies import seasonal_periods

    if not datasets.available():
        raise SystemExit(f"development data not found under {datasets.data_root()} (set BENCH_DATA_DIR)")
    cases = []
    for name, ds in datasets.SETS.items():
        for s in datasets.sample(datasets.load(name, "test"), PER_SET, seed=7):
            per = seasonal_periods(ds.data_frequency, 1, len(s.history))
            cases.append((f"{name}/{s.id}", s.history, ds.horizon, per))
    return cases


def hexes(values: list[float]) -> list[str]:
    return [float(v).hex() for v in values]


def run_all(cases: list[tuple[str, np.ndarray, int, tuple[int, ...]]]) -> dict[str, object]:
    from app.compute.forecast.models import run_forecast_multi

    out: dict[str, object] = {}
    for name, values, horizon, per in cases:
        for model_id in MODELS:
            key = f"{model_id} {name} h={horizon} periods={list(per)}"
            try:
                results = run_forecast_multi(model_id, values.tolist(), horizon, CONFIDENCES, per)
            except Exception as exc:  # noqa: BLE001 - a failure is an outcome to record too
                out[key] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            out[key] = {str(c): {"median": hexes(r.median), "lower": hexes(r.lower), "upper": hexes(r.upper),
                                 "fallback": r.fallback} for c, r in zip(CONFIDENCES, results, strict=True)}
    # nothing above falls back, so the fallback models are run directly on every case as well
    from app.compute.forecast.models import FALLBACKS

    for name, values, horizon, per in cases:
        for model_id in ("forecast-model-2", "forecast-model-4"):
            fb_name, fb_model = FALLBACKS[model_id]
            key = f"{fb_name} (of {model_id}) {name} h={horizon} periods={list(per)}"
            fitted = fb_model.fit(values.tolist(), horizon, per)
            out[key] = {str(c): dict(zip(("median", "lower", "upper"), (hexes(list(a)) for a in fitted.predict(c)),
                                         strict=True)) for c in CONFIDENCES}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--record", action="store_true", help="write the golden file instead of checking it")
    args = ap.parse_args()
    cases = dataset_cases() + synthetic_cases()
    start = time.perf_counter()
    got = run_all(cases)
    took = time.perf_counter() - start
    if args.record:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(GOLDEN, "wt") as fh:
            json.dump(got, fh, indent=0, sort_keys=True)
        print(f"recorded {len(got)} forecasts ({len(cases)} series x {len(MODELS)} models) in {took:.1f} s")
        return 0
    with gzip.open(GOLDEN, "rt") as fh:
        want = json.load(fh)
    bad = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
    for k in bad[:20]:
        print("DIFFERS:", k)
    print(f"{len(got) - len(bad)} of {len(want)} recorded forecasts identical, {len(bad)} differ ({took:.1f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
