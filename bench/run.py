"""Performance benchmarks of the service (`make bench`, `make bench-quick`).

    python bench/run.py [--quick] [--only footprint,import,web,verify,limiter,forecast,anomaly,synthetic,monitors,
                                          prometheus,remote-write,fleet,restart,load,accuracy,batches,batch-results,
                                          backtest,tenant-isolation,kpi,alarm-frontier,hostile-remote-write,nixtla,
                                          drivers]

Suites (each writes bench/results/<suite>.md and prints it):
  verify    GET /verify p50/p99 (1 client) and req/s (16 connections) via gunicorn, SQLite and PostgreSQL
  limiter   time the rate limiter adds per counted request (memory and Redis storage) and req/s with it
  forecast  POST /forecast e2e latency per model and series length vs run_forecast in-process; worker start-up
  load      bench/load.py: 50 clients for 60 s through nginx and gunicorn, /verify and /forecast mixed
  footprint `keys list` wall time and the web process's peak memory, beside the reference commit
  import    CPU of importing the app and of `flask keys list`, beside a bare Flask + SQLAlchemy import and the
            previous layout (bench/import_cost.py)
  web       the web process's CPU per request, beside the previous layout and the reference commit
            (bench/web_cpu.py)
  anomaly   NAB files through POST /anomalies, leave-one-category-out, detection latency (bench/anomaly.py)
  synthetic 30-day synthetic streams: false alarms per stream per week, point-adjusted F1 and NAB's score,
            beside the earlier detectors (bench/synthetic.py)
  monitors  appends to monitors, 1,000 monitors a point a second each, a webhook outage (bench/monitors.py)
  prometheus 1,000 Prometheus-backed monitors at 1-minute steps: lag point -> verdict, beside pushed appends
            (bench/prometheus_monitors.py; needs /usr/bin/prometheus)
  remote-write  Prometheus remote write and POST /monitors/points: points/s stored and judged, p99, none lost,
            web CPU a point, SQLite and PostgreSQL + Redis (bench/remote_write.py)
  fleet     one monitor over 2,000 remote-written series through a restart, and over a PromQL query of 5,000
            series: lag, nothing lost, labels on alerts and gauges; SQLite and PostgreSQL + Redis (bench/fleet.py;
            needs /usr/bin/prometheus, promtool and prometheus-alertmanager)
  restart   monitors with a long history through a restart: the first request's time, beside the reference
            commit (which rebuilt every detector state from the stored points) (bench/restart.py)
  accuracy  bench/accuracy.py on every development set, 30 series each (5 with --quick), with anchors
  batches   bench/batches.py: batch throughput beside statsforecast, scale-out, web memory under a 1 GB upload
  batch-results bench/batch_results_memory.py: the web process's peak during results downloads (three at
            once, long ids) and the upload scan's on distinct ids
  backtest  bench/backtest.py: every monthly dev series x 6 windows, models 1 and 2, beside statsforecast's
            cross_validation with AutoETS (100 series with --quick)
  tenant-isolation bench/tenant_isolation.py: another account's 1-series batch (and healthy Prometheus-backed
            monitor) while 150 monitors hang and a 3,000-series batch is queued; SQLite and PostgreSQL + Redis
  kpi       bench/kpi.py: the 14 labelled web-service KPIs, segments caught at the default alarm budget and the
            score's ranking, beside the previous detector and a seasonal-naive z-score
  alarm-frontier bench/alarm_frontier.py: the detector's calibration moved step by step away from the stream's own
            record, each step on the KPIs, NAB's categories and the synthetic anomaly-free streams
  hostile-remote-write bench/hostile_remote_write.py: memory and CPU under hostile remote-write and metrics load,
            beside the commit before the bounds
  nixtla    bench/nixtla.py: add_history beside the plain forecast, levels, the caps, beside the routes before them
  drivers   bench/drivers.py: the default model with and without covariates (bike rentals with weather and holidays,
            consumption with income, and noise covariates) beside AutoARIMA with regressors and Prophet

Needs PostgreSQL at 127.0.0.1:5432 (user postgres, db test) and Redis at 127.0.0.1:6379 (db 14 is flushed);
a suite whose service is missing fails on its own and the others still run. Exit status 1 if any failed.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402
import latency  # noqa: E402

SUITES = ["footprint", "import", "web", "verify", "limiter", "forecast", "anomaly", "synthetic", "monitors",
          "prometheus", "remote-write", "fleet", "restart", "load", "accuracy", "batches", "batch-results", "backtest",
          "tenant-isolation", "kpi", "alarm-frontier", "hostile-remote-write", "nixtla", "drivers"]

# The commit before this service's request pipeline and fast paths: footprint and web compare against it
# in the same run (git worktree), so every figure stands beside its reference on the same machine.
REFERENCE = "3e9fd9e"
# The commit before app/ was laid out in rooms (issue 42): web and import are measured beside it too.
PREVIOUS_LAYOUT = "5eea8fa"
# The detector before stuck values and reasons: the KPI suite runs it beside today's.
KPI_BASE = "6377270"


def _script(name: str, *args: str, timeout: float = 3600) -> str:
    result = c.run_suite([c.PYTHON, str(c.BENCH / name), *args], timeout=timeout)
    print(result.stdout[-8000:], flush=True)
    if result.returncode != 0:
        raise RuntimeError(f"{name} failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result.stdout


def suite_footprint(quick: bool) -> str:
    """`keys list` wall time and the web process's peak memory, beside the reference commit."""
    return _script("footprint.py", "--reference", REFERENCE, "--runs", "3" if quick else "7", timeout=1800)


def suite_import(quick: bool) -> str:
    """CPU of importing the app and of `flask keys list`, beside a bare import and the previous layout."""
    return _script("import_cost.py", "--reference", PREVIOUS_LAYOUT, "--runs", "3" if quick else "7", timeout=1800)


def suite_web(quick: bool) -> str:
    """The web process's CPU per request (in-process and through gunicorn), beside the previous layout and the
    reference commit."""
    with c.git_worktree(PREVIOUS_LAYOUT) as layout, c.git_worktree(REFERENCE) as reference:
        return _script("web_cpu.py", "--baseline", f"layout {PREVIOUS_LAYOUT}={layout}",
                       "--baseline", f"reference {REFERENCE}={reference}", *(["--quick"] if quick else []))


def suite_anomaly(quick: bool) -> str:
    """NAB development files through POST /anomalies, scored as NAB does, and the detection latencies."""
    return _script("anomaly.py", *(["--quick"] if quick else []))


def suite_synthetic(quick: bool) -> str:
    """Long synthetic streams: false alarms per week, point-adjusted F1, NAB, the sensitivity table."""
    return _script("synthetic.py", *(["--quick"] if quick else []))


def suite_monitors(quick: bool) -> str:
    """Appending to monitors (1 point, 100 points, 200 monitors each second) and a webhook outage."""
    return _script("monitors.py", *(["--quick"] if quick else []))


def suite_prometheus(quick: bool) -> str:
    """1,000 Prometheus-backed monitors read and judged each minute: lag p50/p99, beside pushed appends."""
    return _script("prometheus_monitors.py", *(["--quick"] if quick else []))


def suite_remote_write(quick: bool) -> str:
    """Prometheus remote write and bulk points: points/s stored and judged, p99, nothing lost; SQLite and
    PostgreSQL + Redis (bench/remote_write.py)."""
    return _script("remote_write.py", *(["--quick"] if quick else []))


def suite_fleet(quick: bool) -> str:
    """One monitor over 2,000 remote-written series through a restart, and over a PromQL query of 5,000 series:
    lag p50/p99, nothing lost, labels on alerts and gauges; SQLite and PostgreSQL + Redis (bench/fleet.py)."""
    return _script("fleet.py", *(["--quick"] if quick else []), timeout=7200)


def suite_restart(quick: bool) -> str:
    """Monitors with a long history through a restart: the first request's time, beside the reference commit
    (bench/restart.py)."""
    return _script("restart.py", *(["--quick"] if quick else []), timeout=7200)


def suite_accuracy(quick: bool) -> str:
    """Every development set (M4 Hourly/Weekly, M1 and Tourism Yearly/Quarterly/Monthly), a fixed sample of
    30 series each, four models and five confidences in-process, beside statsforecast's AutoETS and AutoTheta
    computed in the same run. AutoARIMA (and so the anchors' combination) costs minutes a series on two
    cores: run bench/accuracy.py without --anchors for it. tests/api/forecast/test_routes.py asserts that
    POST /forecast returns exactly the in-process numbers.
    """
    cmd = [c.PYTHON, str(c.BENCH / "accuracy.py"), "--mode", "inprocess", "--jobs", "2", "--seed", "0",
           "--sample", "5" if quick else "30", "--anchors", "AutoETS,AutoTheta",
           "--output", str(c.RESULTS / "accuracy.md")]
    c.RESULTS.mkdir(parents=True, exist_ok=True)
    result = c.run_suite(cmd, timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(f"accuracy.py failed ({result.returncode}):\n{result.stderr[-4000:]}")
    _describe_sample(c.RESULTS / "accuracy.md")
    print(result.stdout[-8000:], flush=True)
    return result.stdout


def _describe_sample(path: Path) -> None:
    """Put the machine, the code and where the full-set tables live under the sample table's title: the
    sample is a quick check; every series of each set, with AutoARIMA and the anchors' combination, and
    each change's before/after figures are kept by hand in docs/models.md."""
    title, _, rest = path.read_text().partition("\n")
    path.write_text(f"{title}\n\n{c.machine_line()}\n{c.CODE_LINE}\n\nA fixed sample of each development "
                    "set. Every series of each set, with AutoARIMA and the anchors' combination, and what each "
                    "change to the models measured: docs/models.md, section \"Measured\".\n" + rest)


def suite_batches(quick: bool) -> str:
    """bench/batches.py: 10,000 series (500 with --quick) through gunicorn and the job workers, beside
    statsforecast on the same cores; two workers against one; the web process's memory under a 1 GB upload."""
    return _script("batches.py", *(["--quick"] if quick else []), timeout=4 * 3600)


def suite_batch_results(quick: bool) -> str:
    """bench/batch_results_memory.py: the web process's VmHWM while batch results are downloaded."""
    return _script("batch_results_memory.py", *(["--series", "200", "--scan-ids", "10000"] if quick else []),
                   timeout=1800)


def suite_backtest(quick: bool) -> str:
    """bench/backtest.py: the backtest runner on every monthly development series beside statsforecast's
    cross_validation with AutoETS, same windows and cores, series-windows per second and M4 scores."""
    return _script("backtest.py", *(["--quick"] if quick else []), timeout=4 * 3600)


def suite_tenant_isolation(quick: bool) -> str:
    """bench/tenant_isolation.py: another account's 1-series batch done within 10 s, and its healthy
    Prometheus-backed monitor's lag, while one account's 150 monitors hang and another's 3,000-series batch is
    queued; SQLite and PostgreSQL + Redis."""
    return _script("tenant_isolation.py", *(["--quick"] if quick else []), timeout=1800)


def suite_kpi(quick: bool) -> str:
    """bench/kpi.py: the detector at its defaults on the 14 labelled web-service KPIs (segments caught within 8
    points at the false alarms a week it raises, the score's ranking), beside the detector before stuck values and
    reasons and a seasonal-naive z-score, in the same run."""
    return _script("kpi.py", *(["--quick"] if quick else ["--base", KPI_BASE]), timeout=1800)


def suite_alarm_frontier(quick: bool) -> str:
    """bench/alarm_frontier.py: what catching more of the KPIs' incidents costs on NAB and on anomaly-free streams,
    the calibration moved one step at a time, in one run."""
    return _script("alarm_frontier.py", *(["--quick"] if quick else []), timeout=3600)


def suite_hostile_remote_write(quick: bool) -> str:
    """bench/hostile_remote_write.py: the web process's memory under unmatched hostile label sets, a million samples
    in one body, and a /monitors/metrics loop over 100,000 series, beside the commit before those bounds."""
    return _script("hostile_remote_write.py", *(["--label-requests", "4", "--metrics-series", "20000",
                                                  "--loop-seconds", "15"] if quick else []), timeout=2400)


def suite_nixtla(quick: bool) -> str:
    """bench/nixtla.py: Nixtla's client with add_history beside the plain forecast, cross-validation with many
    levels, and the caps, beside the routes before them in the same run."""
    return _script("nixtla.py", *(["--quick"] if quick else []), timeout=2400)


def suite_drivers(quick: bool) -> str:
    """bench/drivers.py: forecasts with covariates beside AutoARIMA with the same regressors and Prophet with the
    same regressors and holidays, and with noise covariates, in the same run."""
    return _script("drivers.py", *(["--quick"] if quick else []), timeout=3600)


def suite_load(quick: bool) -> str:
    """bench/load.py: 50 clients through nginx (TLS) and gunicorn, /verify and /forecast mixed."""
    cmd = [c.PYTHON, str(c.BENCH / "load.py"), "--seconds", "15" if quick else "60"]
    result = c.run_suite(cmd, timeout=900)
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
    runners = {"footprint": suite_footprint, "import": suite_import, "web": suite_web,
               "anomaly": suite_anomaly, "synthetic": suite_synthetic,
               "monitors": suite_monitors, "prometheus": suite_prometheus, "verify": latency.suite_verify,
               "limiter": latency.suite_limiter,
               "forecast": latency.suite_forecast, "load": suite_load, "accuracy": suite_accuracy,
               "batches": suite_batches, "batch-results": suite_batch_results, "backtest": suite_backtest,
               "remote-write": suite_remote_write, "fleet": suite_fleet, "restart": suite_restart,
               "tenant-isolation": suite_tenant_isolation, "kpi": suite_kpi, "alarm-frontier": suite_alarm_frontier,
               "hostile-remote-write": suite_hostile_remote_write, "nixtla": suite_nixtla,
               "drivers": suite_drivers}
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
