"""In-process latency of each model's fit + predict (the worker's share of a POST /forecast).

    python bench/model_latency.py [--repeats 15] [--compare /path/to/other/checkout]

Cases: 1,000 hourly points (periods 24, 168; horizon 48) for every model; 3,000 hourly points, the
longest history any model reads (a longer request is cut to its model's cap, so this is the cost of the
largest request); model-3 on 2,016 five-minute points (periods 12, 288: one week; horizon 48), the
shape of an operational metric; and model-1 on 40 quarterly points of a growing, strongly seasonal series
(horizon 8), the case where model-1 also runs model-3 at every rolling origin.
Reports the median wall and CPU seconds over ``--repeats`` runs (each on a fresh series of the same
shape). Each checkout is measured in its own process, which imports that checkout's ``app``. With
``--compare`` (another checkout, e.g. the previous commit in a git worktree) the two processes take turns,
series by series and in alternating order, and the last column is the median of the per-series CPU ratios:
on a shared machine whose speed drifts by a third within minutes, measuring one checkout after the other
moved an unchanged model's figure by more than the change being measured.
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


def _serve(root: str) -> None:
    """Worker: import ``root``'s app, then time one forecast per stdin line "model case seed"."""
    sys.path.insert(0, root)
    from app.compute.forecast.models import run_forecast
    from app.series.frequencies import seasonal_periods

    for line in sys.stdin:
        model_id, kind, seed = line.split()
        y, freq, step, horizon = _series(kind, int(seed))
        per = seasonal_periods(freq, step, len(y))
        t0, c0 = time.perf_counter(), time.process_time()
        run_forecast(model_id, y.tolist(), horizon, 0.95, per)
        print(json.dumps([time.perf_counter() - t0, time.process_time() - c0]), flush=True)


class _Worker:
    def __init__(self, root: Path) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve", str(root)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=root)

    def time(self, model_id: str, kind: str, seed: int) -> tuple[float, float]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{model_id} {kind} {seed}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker for {model_id} {kind} exited")
        wall, cpu = json.loads(line)
        return wall, cpu

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def measure(repeats: int, roots: list[Path]) -> list[dict[str, object]]:
    """Per case, each root's p50s; the roots take turns on each series (seed), in alternating order."""
    workers = [_Worker(r) for r in roots]
    out = []
    try:
        for model_id, kind in CASES:
            times: list[list[tuple[float, float]]] = [[] for _ in roots]
            for i in range(repeats + 1):
                order = range(len(roots)) if i % 2 else reversed(range(len(roots)))
                for j in order:
                    t = workers[j].time(model_id, kind, i)
                    if i:  # the first run warms imports and caches
                        times[j].append(t)
            row: dict[str, object] = {"model": model_id, "case": kind}
            for j, ts in enumerate(times):
                row[f"wall_p50_{j}"] = float(np.median([w for w, _ in ts]))
                row[f"cpu_p50_{j}"] = float(np.median([c for _, c in ts]))
            if len(roots) > 1:
                row["cpu_ratio"] = float(np.median([a[1] / b[1] for a, b in zip(times[0], times[1], strict=True)]))
            out.append(row)
    finally:
        for w in workers:
            w.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--compare", default=None, help="another checkout to measure in the same run, interleaved")
    ap.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serve:
        _serve(args.serve)
        return 0
    roots = [ROOT] + ([Path(args.compare).resolve()] if args.compare else [])
    rows = measure(args.repeats, roots)
    other = len(roots) > 1
    print("| model | case | wall p50 s | CPU p50 s |"
          + (" compared: wall p50 s | CPU p50 s | CPU ratio, p50 of per-series ratios |" if other else ""))
    print("|---|---|---|---|" + ("---|---|---|" if other else ""))
    for r in rows:
        line = f"| {r['model']} | {r['case']} | {r['wall_p50_0']:.3f} | {r['cpu_p50_0']:.3f} |"
        if other:
            line += f" {r['wall_p50_1']:.3f} | {r['cpu_p50_1']:.3f} | {r['cpu_ratio']:.2f} |"
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
