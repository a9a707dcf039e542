"""Latency suites: verify, limiter, forecast (see bench/run.py).

Each suite starts what it needs (database, gunicorn, Redis db 14) and tears it down, then writes
bench/results/<suite>.md. The in-process helpers run in child processes via the sub-commands at the
bottom (``python bench/latency.py limiter-inprocess|forecast-inprocess ...``) so BLAS pinning, imports
and the GIL are the same as in a service process and nothing leaks into the orchestrator.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import http.client  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

# The service code under test: bench/run.py's snapshot (BENCH_APP_ROOT), else this checkout.
sys.path.insert(0, os.environ.get("BENCH_APP_ROOT") or str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402

MODELS = ["forecast-model-1", "forecast-model-2", "forecast-model-3", "forecast-model-4"]
SIZES = [100, 1_000, 10_000, 100_000]
HORIZON = 48
COUNTED_BODY = "{}"  # POST /forecast with it: authenticated, counted, then 400 INVALID_REQUEST


# ============================================================================================ verify

def _loadgen(server: c.Gunicorn, key: str, mode: str, *, path: str = "/verify", method: str = "GET",
             body: str = "", requests: int = 2000, connections: int = 16, duration: float = 10.0) -> dict:
    args = [str(c.BENCH / "loadgen.py"), "--url", server.url, "--path", path, "--method", method,
            "--mode", mode, "--requests", str(requests), "--connections", str(connections),
            "--duration", str(duration), "--warmup", "1"]
    if body:
        args += ["--body", body]
    out = c.run_json(args, timeout=duration + requests * 0.05 + 120, env=c.base_env(BENCH_KEY=key))
    bad = {k: v for k, v in out["statuses"].items() if k != str(200 if not body else 400)}
    if bad or out.get("errors"):
        raise RuntimeError(f"unexpected answers from {path}: {out['statuses']} {out.get('errors')}")
    return out


def suite_verify(quick: bool) -> str:
    n = 500 if quick else 3000
    duration = 3.0 if quick else 10.0
    rows = []
    load = f"{os.getloadavg()[0]:.2f}"
    for kind in ("sqlite", "postgres"):
        with c.temp_dir("bench-verify-") as tmp, c.database(kind, tmp) as url:
            key = c.create_key(url)
            with c.gunicorn(url, tmp, name=f"verify-{kind}") as server:
                seq = _loadgen(server, key, "latency", requests=n)
                cpu0 = server.worker_cpu_seconds()
                sat = _loadgen(server, key, "throughput", connections=16, duration=duration)
                cpu = server.worker_cpu_seconds() - cpu0
            lat, sl = seq["latencies"], sat["latencies"]
            # Warm-up requests are in the CPU window too; count them from the rate.
            cpu_per_request = cpu / max(1, sat["requests"] * (duration + 1) / duration)
            rows.append([
                "SQLite" if kind == "sqlite" else "PostgreSQL", len(lat), c.fmt_ms(c.median(lat)),
                c.fmt_ms(c.percentile(lat, 99)), f"{len(lat) / seq['elapsed']:.0f}", f"{sat['rate']:.0f}",
                c.fmt_ms(c.median(sl)), c.fmt_ms(c.percentile(sl, 99)), sat["requests"],
                f"{cpu_per_request * 1000:.2f} ms ({1 / cpu_per_request:.0f} req/s per free core)",
                _verdict(c.median(lat) <= 0.003 and sat["rate"] >= 800) if kind == "sqlite" else "(no target)",
            ])
    notes = [
        "GET /verify through gunicorn, default config (1 worker process, gthread, 32 threads), "
        "FORECAST_WORKERS=2, memory rate-limit storage, key with custom limits of 10,000,000.",
        "Load generator: bench/loadgen.py in its own process, HTTP/1.1 keep-alive on loopback.",
        f"Sequential: 1 connection, {n} requests one after another (100 warm-up requests not counted).",
        f"Saturation: 16 concurrent keep-alive connections for {duration:g} s after a 1 s warm-up; "
        "latency columns under load are per request.",
        "Server CPU per request = user+system CPU of the gunicorn worker process (/proc) over the saturation "
        "run divided by its requests (warm-up included): a load-independent figure; 1 / it is the ceiling of "
        "one process (GIL) on a core nobody else uses.",
        f"1-min load average before the suite: {load} (2 cores; other processes may share them).",
        "Targets (SQLite): p50 <= 3 ms, >= 800 req/s at saturation.",
    ]
    header = ["database", "sequential requests", "p50 ms (1 client)", "p99 ms (1 client)", "req/s (1 client)",
              "req/s (16 conns)", "p50 ms (16 conns)", "p99 ms (16 conns)", "requests in window",
              "server CPU per request (gunicorn worker, under load)", "target"]
    return c.write_table("verify", "GET /verify latency and throughput", notes, header, rows)


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


# ============================================================================================ limiter

def limiter_inprocess(storage: str, database_url: str, key: str, iterations: int, fill: int) -> dict:
    """Runs in a child process: the limiter's own calls for one request, and test-client requests."""
    from limits import RateLimitItemPerDay, RateLimitItemPerHour, RateLimitItemPerMinute

    from app import create_app
    from app.settings import Settings
    from app.web.ratelimit import KEY_PREFIX, KEY_SCOPE

    settings = Settings(database_url=database_url, redis_url=c.REDIS_URL if storage == "redis" else None,
                        forecast_workers=1, log_level="WARNING")
    app = create_app(settings, start_workers=False)
    strategy = app.extensions["forecast_service"].limits._strategy  # noqa: SLF001 (the app's own windows)
    items = [RateLimitItemPerMinute(10_000_000), RateLimitItemPerHour(10_000_000), RateLimitItemPerDay(10_000_000)]
    out: dict = {}

    def counted(ident: str) -> float:
        t0 = time.perf_counter()
        for item in items:  # a counted request: each window hit and read in one step
            strategy.hit_counted(item, KEY_PREFIX, ident, KEY_SCOPE)
        return time.perf_counter() - t0

    def uncounted(ident: str) -> float:
        t0 = time.perf_counter()
        for item in items:  # an uncounted request (GET /verify): the three windows read
            strategy.get_window_stats(item, KEY_PREFIX, ident, KEY_SCOPE)
        return time.perf_counter() - t0

    for _ in range(50):
        counted("bench-warm")
    out["direct_empty"] = [counted("bench-direct") for _ in range(iterations)]
    # A busy key: its windows already hold `fill` entries (moving windows keep one entry per request).
    for _ in range(fill):
        counted("bench-full")
    out["direct_full"] = [counted("bench-full") for _ in range(iterations)]
    out["direct_read"] = [uncounted("bench-full") for _ in range(iterations)]

    client = app.test_client()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    cpu: list[float] = []
    for i in range(20 + iterations // 5):
        c0 = time.process_time()
        resp = client.post("/forecast", headers=headers, data=COUNTED_BODY)
        if i >= 20:
            cpu.append(time.process_time() - c0)
        if resp.status_code != 400:
            raise RuntimeError(f"POST /forecast answered {resp.status_code}: {resp.get_data(as_text=True)[:300]}")
    out["client_cpu"] = cpu
    app.extensions["forecast_service"].close()
    return out


def suite_limiter(quick: bool) -> str:
    iterations = 1000 if quick else 5000
    fill = 5_000 if quick else 20_000
    duration = 3.0 if quick else 10.0
    rows = []
    http_rows = []
    load = f"{os.getloadavg()[0]:.2f}"
    for storage in ("memory", "redis"):
        with c.temp_dir("bench-limiter-") as tmp, c.database("sqlite", tmp) as url:
            key = c.create_key(url)
            redis_url = None
            if storage == "redis":
                c.flush_redis()
                redis_url = c.REDIS_URL
            try:
                res = c.run_json([str(Path(__file__).resolve()), "limiter-inprocess", "--storage", storage,
                                  "--database-url", url, "--iterations", str(iterations), "--fill", str(fill)],
                                 timeout=600, env=c.base_env(BENCH_KEY=key))
                if storage == "redis":
                    c.flush_redis()
                with c.gunicorn(url, tmp, redis_url=redis_url, name=f"limiter-{storage}") as server:
                    cpu0 = server.worker_cpu_seconds()
                    verify = _loadgen(server, key, "throughput", duration=duration)
                    cpu1 = server.worker_cpu_seconds()
                    counted = _loadgen(server, key, "throughput", path="/forecast", method="POST",
                                       body=COUNTED_BODY, duration=duration)
                    cpu2 = server.worker_cpu_seconds()
                    scale = (duration + 1) / duration  # the 1 s warm-up is inside the CPU window
                    verify["cpu"] = (cpu1 - cpu0) / max(1, verify["requests"] * scale)
                    counted["cpu"] = (cpu2 - cpu1) / max(1, counted["requests"] * scale)
            finally:
                if storage == "redis":
                    c.flush_redis()
        target = 0.0003 if storage == "memory" else 0.001
        label = "memory://" if storage == "memory" else "Redis (loopback, db 14)"
        d0, d1, d2 = res["direct_empty"], res["direct_full"], res["direct_read"]
        rows.append([label, "direct: 3 counted hits (hit and window read in one step), empty windows",
                     c.fmt_ms(c.median(d0), 3), c.fmt_ms(c.percentile(d0, 99), 3), _verdict(c.median(d0) <= target)])
        rows.append([label, f"direct: same, windows already holding {fill:,} entries", c.fmt_ms(c.median(d1), 3),
                     c.fmt_ms(c.percentile(d1, 99), 3), _verdict(c.median(d1) <= target)])
        rows.append([label, "direct: 3 window reads (an uncounted request)", c.fmt_ms(c.median(d2), 3),
                     c.fmt_ms(c.percentile(d2, 99), 3), _verdict(c.median(d2) <= target)])
        rows.append([label, "test client POST /forecast {} (counted, then 400): whole request, process CPU",
                     c.fmt_ms(c.median(res["client_cpu"]), 3), c.fmt_ms(c.percentile(res["client_cpu"], 99), 3),
                     "(whole request; no target)"])
        http_rows.append(f"| {label} | {verify['rate']:.0f} | {c.fmt_ms(c.median(verify['latencies']))} | "
                         f"{c.fmt_ms(verify['cpu'])} | {counted['rate']:.0f} | "
                         f"{c.fmt_ms(c.median(counted['latencies']))} | {c.fmt_ms(counted['cpu'])} |")
    notes = [
        "Added time per counted request. 'direct' = the calls the app makes on its own rate-limit strategy "
        "(app.extensions['forecast_service'].limits): a counted request hits its three windows (minute, hour, day), "
        "each hit returning the window's figures in the same step; an uncounted one reads the three windows. "
        f"{iterations} requests each, after 50 warm-up.",
        "'test client' = Flask test client in one process, POST /forecast with body {} (authenticated, counted, "
        "answered 400): process CPU time of the whole request, for scale.",
        "Targets: <= 0.3 ms p50 added with memory, <= 1 ms with Redis on loopback.",
    ]
    header = ["storage", "method", "p50 ms", "p99 ms", "target"]
    extra = "\n".join([
        f"Through gunicorn (default config, SQLite keys), 16 keep-alive connections, {duration:g} s:", "",
        "| storage | GET /verify req/s | /verify p50 ms under load | /verify server CPU ms/req "
        "| POST /forecast {} (counted, 400) req/s | counted p50 ms under load | counted server CPU ms/req |",
        "|---|---|---|---|---|---|---|", *http_rows, "",
        "Server CPU ms/req = user+system CPU of the gunicorn worker process (/proc) per request, warm-up "
        f"included. 1-min load average before the suite: {load}."])
    return c.write_table("limiter", "Rate limiter added time", notes, header, rows, extra)


# ============================================================================================ forecast

def make_series(n: int, seed: int = 42) -> tuple[list[str], list[float]]:
    """Hourly series: level + slow trend + daily and weekly seasonality + Gaussian noise (deterministic)."""
    from datetime import datetime, timedelta

    import numpy as np

    rng = np.random.default_rng(seed)
    t = np.arange(n, dtype=float)
    y = (200 + 0.002 * t + 30 * np.sin(2 * np.pi * t / 24) + 12 * np.sin(2 * np.pi * t / 168 + 1.0)
         + rng.normal(0, 6, n))
    start = datetime(2020, 1, 1)
    stamps = [(start + timedelta(hours=i)).strftime("%Y-%m-%dT%H:%M:%S") for i in range(n)]
    return stamps, [round(float(v), 3) for v in y]


def reps_for(n: int, quick: bool) -> int:
    table = {100: 15, 1_000: 15, 10_000: 9, 100_000: 5}
    quick_table = {100: 4, 1_000: 5, 10_000: 3, 100_000: 2}
    return (quick_table if quick else table)[n]


def forecast_startup(runs: int) -> dict:
    """Child process: WorkerPool(workers=2).start(wait=True) wall time and pool.startup_seconds."""
    from app.compute.pool import WorkerPool

    startup: list[dict] = []
    for _ in range(runs):
        pool = WorkerPool(workers=2, timeout_seconds=30, queue_limit=4)
        t0 = time.perf_counter()
        pool.start(wait=True)
        wall = time.perf_counter() - t0
        startup.append({"wall": wall, "workers": list(pool.startup_seconds)})
        pool.close()
    return {"startup": startup}


def forecast_serve() -> None:
    """Child process: for each stdin line "<model> <n>", time one run_forecast and print {"t": seconds}.

    Driven call by call by the orchestrator, interleaved with the HTTP requests for the same cell, so both
    see the same code and the same machine load (the machine may be shared).
    """
    from app.compute.forecast.models import run_forecast
    from app.series.frequencies import seasonal_periods

    run_forecast("forecast-model-2", [float(i % 7) for i in range(60)], 3, 0.9, (7,))
    cache: dict[int, list[float]] = {}
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        model, n_text = line.split()
        n = int(n_text)
        if n not in cache:
            cache = {n: make_series(n)[1]}
        values = cache[n]
        periods = seasonal_periods("Hours", 1, n)
        t0 = time.perf_counter()
        result = run_forecast(model, values, HORIZON, 0.95, periods)
        dt = time.perf_counter() - t0
        sys.stdout.write(json.dumps({"t": dt, "fallback": result.fallback}) + "\n")
        sys.stdout.flush()


class InProcess:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([c.PYTHON, str(Path(__file__).resolve()), "forecast-serve"], cwd=c.APP_ROOT,
                                     env=c.base_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self.proc.stdout.readline().strip() != "ready":  # type: ignore[union-attr]
            raise RuntimeError("in-process forecast helper did not start")

    def time(self, model: str, n: int) -> float:
        self.proc.stdin.write(f"{model} {n}\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError("in-process forecast helper died")
        return float(json.loads(line)["t"])

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _forecast_times(server: c.Gunicorn, inproc: InProcess, key: str, sizes: list[int], quick: bool,
                    deadline: float) -> dict:
    conn = http.client.HTTPConnection(server.host, server.port, timeout=120)
    e2e: dict[str, dict[str, list[float]]] = {m: {} for m in MODELS}
    local: dict[str, dict[str, list[float]]] = {m: {} for m in MODELS}
    web_cpu: dict[str, dict[str, float]] = {m: {} for m in MODELS}
    fallbacks: list[str] = []
    for n in sizes:
        stamps, values = make_series(n)
        body = json.dumps({"series": [{"timestamps": stamps, "values": values}], "forecast_horizon": HORIZON,
                           "data_frequency": "Hours", "forecast_frequency": "Hours", "confidence": 0.95}).encode()
        for model in MODELS:
            headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json", "X-Model-Id": model}
            ts, ip = [], []
            cpu_start = None
            for i in range(reps_for(n, quick) + 1):
                if i == 1:
                    cpu_start = server.worker_cpu_seconds()
                if i > 1 and time.monotonic() > deadline:
                    break  # keep the suite bounded on a loaded machine; fewer reps are reported as such
                t0 = time.perf_counter()
                conn.request("POST", "/forecast", body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                dt = time.perf_counter() - t0
                if resp.status != 200:
                    raise RuntimeError(f"{model} n={n}: HTTP {resp.status} {data[:300]!r}")
                if resp.getheader("X-Forecast-Fallback"):
                    fallbacks.append(f"{model} n={n}: {resp.getheader('X-Forecast-Fallback')}")
                t_local = inproc.time(model, n)
                if i > 0:  # the first of each is a warm-up
                    ts.append(dt)
                    ip.append(t_local)
            e2e[model][str(n)] = ts
            local[model][str(n)] = ip
            web_cpu[model][str(n)] = (server.worker_cpu_seconds() - cpu_start) / max(1, len(ts)) if ts else 0.0
    conn.close()
    return {"e2e": e2e, "inprocess": local, "web_cpu": web_cpu, "fallbacks": sorted(set(fallbacks))}


def suite_forecast(quick: bool) -> str:
    sizes = SIZES
    load_before = os.getloadavg()[0]
    startup = c.run_json([str(Path(__file__).resolve()), "forecast-startup", "--runs", "1" if quick else "3"],
                         timeout=600)["startup"]
    with c.temp_dir("bench-forecast-") as tmp, c.database("sqlite", tmp) as url:
        key = c.create_key(url)
        inproc = InProcess()
        try:
            with c.gunicorn(url, tmp, name="forecast") as server:
                res = _forecast_times(server, inproc, key, sizes, quick,
                                      deadline=time.monotonic() + (150 if quick else 330))
        finally:
            inproc.close()
    rows = []
    for model in MODELS:
        prev = None
        for n in sizes:
            e2e = res["e2e"][model][str(n)]
            ip = res["inprocess"][model][str(n)]
            med_e2e = c.median(e2e)
            overhead = med_e2e - c.median(ip)
            growth = "" if prev is None else f"{med_e2e / prev:.2f}x"
            prev = med_e2e
            target = ""
            if n == 1_000:
                limit = 0.030 if model == "forecast-model-2" else 0.500
                target = (f"p50 {_verdict(med_e2e <= limit)} (<= {limit * 1000:g} ms); "
                          f"overhead {_verdict(overhead <= 0.005)}")
            rows.append([model, f"{n:,}", len(e2e), c.fmt_ms(med_e2e, 1), c.fmt_ms(c.percentile(e2e, 95), 1),
                         c.fmt_ms(c.median(ip), 1), c.fmt_ms(c.percentile(ip, 95), 1), c.fmt_ms(overhead, 1),
                         c.fmt_ms(res["web_cpu"][model][str(n)], 1),
                         f"{med_e2e * 1000 / (n / 1000):.2f}", growth, target])
    walls = [s["wall"] for s in startup]
    per_worker = [w for s in startup for w in s["workers"]]
    notes = [
        f"POST /forecast end-to-end through gunicorn (default config, FORECAST_WORKERS=2, SQLite keys), one "
        f"client, keep-alive, requests one after another; hourly series, horizon {HORIZON}, confidence 0.95; "
        "body JSON pre-encoded (client encoding not timed).",
        "In-process: app.compute.forecast.models.run_forecast in a long-lived child process, BLAS on 1 thread, "
        "same series and periods (seasonal_periods('Hours', 1, n)), called right after each HTTP request "
        "(interleaved, so both see the same code and machine load). First call of each cell is a warm-up.",
        "Series: 200 + 0.002 t + 30 sin(2 pi t/24) + 12 sin(2 pi t/168 + 1) + N(0, 6), seed 42, 3 decimals.",
        "HTTP overhead = median e2e - median in-process (reading/parsing/validating JSON and timestamps, pipe to "
        "the worker process, response). 'x vs previous size' = e2e median ratio for 10x more points "
        "(linear growth = 10x).",
        "Web-process CPU ms/req = user+system CPU of the gunicorn worker process (not its forecast workers) per "
        "timed request: the service's own per-request work, independent of machine load.",
        f"Fallbacks seen over HTTP: {', '.join(res['fallbacks']) or 'none'}.",
        f"1-min load average before the suite: {load_before:.2f} (2 cores; other processes may share them).",
        "Targets at 1,000 points: model-2 p50 <= 30 ms; models 1, 3, 4 p50 <= 500 ms; HTTP overhead <= 5 ms; "
        "growth no faster than linear.",
    ]
    header = ["model", "points", "reps", "e2e p50 ms", "e2e p95 ms", "in-process p50 ms", "in-process p95 ms",
              "HTTP overhead ms", "web-process CPU ms/req", "e2e ms per 1,000 pts", "x vs previous size", "target"]
    extra = (f"Worker start-up (WorkerPool(workers=2).start(wait=True), {len(startup)} run(s)): "
             f"wall p50 {c.median(walls):.2f} s (max {max(walls):.2f} s); per worker (pool.startup_seconds) "
             f"p50 {c.median(per_worker):.2f} s, max {max(per_worker):.2f} s.")
    return c.write_table("forecast", "Forecast latency per model and series length", notes, header, rows, extra)


# ============================================================================================ children

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    lim = sub.add_parser("limiter-inprocess")
    lim.add_argument("--storage", choices=["memory", "redis"], required=True)
    lim.add_argument("--database-url", required=True)
    lim.add_argument("--iterations", type=int, default=5000)
    lim.add_argument("--fill", type=int, default=20000)
    st = sub.add_parser("forecast-startup")
    st.add_argument("--runs", type=int, default=3)
    sub.add_parser("forecast-serve")
    args = ap.parse_args(argv)
    if args.cmd == "forecast-serve":
        forecast_serve()
        return 0
    if args.cmd == "limiter-inprocess":
        out = limiter_inprocess(args.storage, args.database_url, os.environ["BENCH_KEY"], args.iterations, args.fill)
    else:
        out = forecast_startup(args.runs)
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
