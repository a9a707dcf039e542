"""In-process latency of each model's fit + predict (the worker's share of a POST /forecast).

    python bench/model_latency.py [--repeats 15] [--compare /path/to/other/checkout]

Cases: 1,000 hourly points (periods 24, 168; horizon 48) for every model; 3,000 hourly points, the
longest history any model reads (a longer request is cut to its model's cap, so this is the cost of the
largest request); model-3 on 2,016 five-minute points (periods 12, 288: one week; horizon 48), the
shape of an operational metric; and model-1 on 40 quarterly points of a growing, strongly seasonal series
(horizon 8), the case where model-1 also runs model-3 at every rolling origin.
Reports the median wall and CPU seconds over ``--repeats`` runs (each on a fresh series of the same
shape). ``--compare`` runs the same cases against another checkout (e.g. the previous commit in a git
worktree) in a subprocess, so both figures come from the same machine at the same time.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _series(kind: str, seed: int) -> tuple[np.ndarray, str, int, int]:
    """A series of the case's shape: values, data frequency, step and horizon."""
    rng = np.random.default_rng(seed)
    if kind.startswith("hourly-"):
        n = int(kind.split("-")[1])
        t = np.arange(n)
        y = 100 + 10 * np.sin(2 * np.pi * t / 24) + 3 * np.sin(2 * np.pi * t / 168) + rng.standard_normal(n)
        return y, "Hours", 1, 48
    if kind == "quarterly-40":
        t = np.arange(40)
        y = (100 + 2 * t) * (1 + 0.2 * np.sin(2 * np.pi * t / 4)) + 3 * rng.standard_normal(40)
        return y, "Quarterly", 1, 8
    t = np.arange(2016)
    y = 60 + 20 * np.sin(2 * np.pi * t / 288) + 3 * rng.standard_normal(2016)
    return np.clip(y, 0, 100), "Minutes", 5, 48


_MODELS = ("forecast-model-1", "forecast-model-2", "forecast-model-3", "forecast-model-4")
CASES = [(m, "hourly-1000") for m in _MODELS] + [(m, "hourly-3000") for m in _MODELS]
CASES.append(("forecast-model-3", "five-minute-2016"))
CASES.append(("forecast-model-1", "quarterly-40"))


def measure(repeats: int) -> list[dict[str, object]]:
    sys.path.insert(0, str(ROOT))
    from app.forecast.models import run_forecast, seasonal_periods

    out = []
    for model_id, kind in CASES:
        wall, cpu = [], []
        for i in range(repeats + 1):
            y, freq, step, horizon = _series(kind, i)
            per = seasonal_periods(freq, step, len(y))
            t0, c0 = time.perf_counter(), time.process_time()
            run_forecast(model_id, y.tolist(), horizon, 0.95, per)
            if i:  # the first run warms imports and caches
                wall.append(time.perf_counter() - t0)
                cpu.append(time.process_time() - c0)
        out.append({"model": model_id, "case": kind, "wall_p50": float(np.median(wall)),
                    "cpu_p50": float(np.median(cpu))})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--compare", default=None, help="another checkout to measure in the same run")
    ap.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    rows = measure(args.repeats)
    if args.json:
        print(json.dumps(rows))
        return 0
    other = None
    if args.compare:
        env = dict(os.environ, PYTHONPATH=args.compare)
        res = subprocess.run([sys.executable, str(Path(args.compare) / "bench" / "model_latency.py"), "--json",
                              "--repeats", str(args.repeats)], capture_output=True, text=True, env=env,
                             cwd=args.compare, check=True)
        other = {(r["model"], r["case"]): r for r in json.loads(res.stdout.strip().splitlines()[-1])}
    print("| model | case | wall p50 s | CPU p50 s |" + (" compared: wall p50 s | CPU p50 s |" if other else ""))
    print("|---|---|---|---|" + ("---|---|" if other else ""))
    for r in rows:
        line = f"| {r['model']} | {r['case']} | {r['wall_p50']:.3f} | {r['cpu_p50']:.3f} |"
        if other:
            o = other.get((r["model"], r["case"]))
            line += f" {o['wall_p50']:.3f} | {o['cpu_p50']:.3f} |" if o else " - | - |"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
