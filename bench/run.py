"""Performance benchmarks of the service (`make bench`, `make bench-quick`).

    python bench/run.py [--quick] [--only verify,limiter,forecast,accuracy]

Suites (each writes bench/results/<suite>.md and prints it):
  verify    GET /verify p50/p99 (1 client) and req/s (16 connections) via gunicorn, SQLite and PostgreSQL
  limiter   time the rate limiter adds per counted request (memory and Redis storage) and req/s with it
  forecast  POST /forecast e2e latency per model and series length vs run_forecast in-process; worker start-up
  load      bench/load.py: 50 clients for 60 s through nginx and gunicorn, /verify and /forecast mixed
  accuracy  bench/accuracy.py --mode inprocess on all M4 Hourly and Weekly series (--sample 20 with --quick)

Needs PostgreSQL at 127.0.0.1:5432 (user postgres, db test) and Redis at 127.0.0.1:6379 (db 14 is flushed);
a suite whose service is missing fails on its own and the others still run. Exit status 1 if any failed.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402
import latency  # noqa: E402

SUITES = ["verify", "limiter", "forecast", "load", "accuracy"]


def suite_accuracy(quick: bool) -> str:
    """All 773 M4 series, four models, five confidences, in-process (one fit serves every confidence).

    tests/test_forecast_api.py asserts that POST /forecast returns exactly these numbers, so running 15,000
    requests through HTTP would measure the same forecasts 20 times slower.
    """
    cmd = [c.PYTHON, str(c.BENCH / "accuracy.py"), "--mode", "inprocess", "--jobs", "2",
           "--output", str(c.RESULTS / "accuracy.md")]
    if quick:
        cmd += ["--sample", "20"]
    c.RESULTS.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(cmd, cwd=c.ROOT, env=c.base_env(), capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(f"accuracy.py failed ({result.returncode}):\n{result.stderr[-4000:]}")
    print(result.stdout[-8000:], flush=True)
    return result.stdout


def suite_load(quick: bool) -> str:
    """bench/load.py: 50 clients through nginx (TLS) and gunicorn, /verify and /forecast mixed."""
    cmd = [c.PYTHON, str(c.BENCH / "load.py"), "--seconds", "15" if quick else "60"]
    result = subprocess.run(cmd, cwd=c.ROOT, env=c.base_env(), capture_output=True, text=True, timeout=900)
    print(result.stdout[-6000:], flush=True)
    if result.returncode != 0:
        raise RuntimeError(f"load.py failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result.stdout


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer requests and repetitions, for a fast check")
    ap.add_argument("--only", default=",".join(SUITES), help="comma-separated subset of: " + ",".join(SUITES))
    args = ap.parse_args(argv)
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SUITES]
    if unknown:
        ap.error(f"unknown suite(s): {', '.join(unknown)}")
    runners = {"verify": latency.suite_verify, "limiter": latency.suite_limiter,
               "forecast": latency.suite_forecast, "load": suite_load, "accuracy": suite_accuracy}
    failed = []
    with c.code_snapshot() as code:
        c.CODE_LINE = code
        print(f"{c.machine_line()}\n{code} (copied to {c.APP_ROOT})\n", flush=True)
        failed = _run(chosen, runners, args.quick)
    if failed:
        print(f"FAILED suites: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def _run(chosen: list[str], runners: dict, quick: bool) -> list[str]:
    failed = []
    for name in chosen:
        print(f"== {name} ==", flush=True)
        t0 = time.perf_counter()
        try:
            runners[name](quick)
        except Exception:  # one broken suite must not hide the others' numbers
            traceback.print_exc()
            failed.append(name)
        print(f"== {name}: {time.perf_counter() - t0:.0f} s ==\n", flush=True)
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
