"""The web process's own work per request, here and in other checkouts, measured in the same run.

    python bench/web_cpu.py [--baseline [LABEL=]/path/to/other/checkout ...] [--quick] [--profile]

Two measurements, each on every checkout given (this one, and each baseline named; a baseline's label is
"baseline" unless given); without --quick the table is also written to bench/results/web_cpu.md:

- in-process: the Flask test client in a child process, ``time.process_time()`` around each request
  (the forecast workers are separate processes, so only the web process's CPU is counted), for
  GET /verify and POST /forecast at 1,000 and 100,000 hourly points; with --profile, a cProfile of the
  same requests (top entries by own time) is printed too.
- over HTTP: one gunicorn per checkout (default config, FORECAST_WORKERS=2, SQLite keys), requests sent to
  each in turn, batch by batch, so both see the same machine load. Web-process CPU per request is the
  gunicorn worker's user+system CPU (/proc) over a batch, divided by its requests; the median over the
  batches is reported, with the end-to-end p50 of every model at 1,000 and 100,000 points.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import http.client  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from contextlib import ExitStack, contextmanager  # noqa: E402
from pathlib import Path  # noqa: E402

# The service code under test: the checkout named by BENCH_APP_ROOT (set for child processes), else this one.
sys.path.insert(0, os.environ.get("BENCH_APP_ROOT") or str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402
from latency import HORIZON, MODELS, make_series  # noqa: E402

SIZES = (1_000, 100_000)
# The quickest model: the same web work costs more CPU time after a longer wait for the pool (caches and clock
# go cold: 1.45 ms with a 6 ms model-2, 1.70 ms with a 13 ms one, 3.33 ms with models 1, 3 and 4).
PROFILE_MODEL = "forecast-model-2"


def forecast_body(n: int) -> bytes:
    stamps, values = make_series(n)
    return json.dumps({"series": [{"timestamps": stamps, "values": values}], "forecast_horizon": HORIZON,
                       "data_frequency": "Hours", "forecast_frequency": "Hours", "confidence": 0.95}).encode()


# ============================================================================================ in-process

def inprocess(database_url: str, key: str, reps: dict[str, int], profile: bool) -> dict:
    """Runs in a child process on the checkout in BENCH_APP_ROOT: CPU per request, and optionally cProfile."""
    import cProfile
    import io
    import pstats

    from app import create_app
    from app.settings import Settings

    settings = Settings(database_url=database_url, forecast_workers=1, log_level="WARNING")
    app = create_app(settings, start_workers=False)
    services = app.extensions["forecast_service"]
    # The pool's attribute was named `forecasts` before it became `pool`; both checkouts must run here.
    pool = getattr(services, "pool", None) or services.forecasts
    pool.start(wait=True)
    client = app.test_client()
    auth = {"Authorization": f"Bearer {key}"}
    bodies = {n: forecast_body(n) for n in SIZES}
    cases = {
        "GET /verify": lambda: client.get("/verify", headers=auth),
        **{
            f"POST /forecast {n:,}": (
                lambda n=n: client.post("/forecast", data=bodies[n], headers={
                    **auth, "Content-Type": "application/json", "X-Model-Id": PROFILE_MODEL})
            )
            for n in SIZES
        },
    }
    out: dict = {"cpu": {}, "profiles": {}}
    for name, call in cases.items():
        count = reps[name]
        for _ in range(max(3, count // 10)):  # warm-up: caches, lazy imports, the worker's first fit
            response = call()
            if response.status_code != 200:
                raise RuntimeError(f"{name}: {response.status_code} {response.get_data(as_text=True)[:300]}")
        samples = []
        for _ in range(count):
            c0 = time.process_time()
            call()
            samples.append(time.process_time() - c0)
        out["cpu"][name] = samples
        if profile:
            profiler = cProfile.Profile(time.process_time)  # CPU, not wall: the machine is shared
            profiler.enable()
            for _ in range(count):
                call()
            profiler.disable()
            text = io.StringIO()
            stats = pstats.Stats(profiler, stream=text)
            stats.sort_stats("tottime").print_stats(18)
            out["profiles"][name] = _trim_profile(text.getvalue(), count)
    services.close()
    return out


def _trim_profile(text: str, calls: int) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if line.lstrip().startswith("ncalls")), 0)
    return f"({calls} requests)\n" + "\n".join(lines[start:])


def _inprocess_reps(quick: bool) -> dict[str, int]:
    if quick:
        return {"GET /verify": 300, "POST /forecast 1,000": 60, "POST /forecast 100,000": 6}
    return {"GET /verify": 2000, "POST /forecast 1,000": 300, "POST /forecast 100,000": 20}


@contextmanager
def keyed_database(tmp: Path, root: Path) -> Iterator[tuple[str, str]]:
    with c.database("sqlite", tmp, app_root=root) as url:
        yield url, c.create_key(url, app_root=root)


# In-process rounds per checkout, taken in turn: a load that changes during the run reaches every checkout.
INPROCESS_ROUNDS = 3


def run_inprocess(trees: dict[str, Path], quick: bool, profile: bool) -> dict[str, dict]:
    results: dict[str, dict] = {label: {"cpu": {}, "profiles": {}} for label in trees}
    reps = {name: max(1, count // INPROCESS_ROUNDS) for name, count in _inprocess_reps(quick).items()}
    with ExitStack() as stack:
        keyed = {label: stack.enter_context(keyed_database(stack.enter_context(c.temp_dir(f"bench-profile-{i}-")),
                                                           root))
                 for i, (label, root) in enumerate(trees.items())}
        for round_ in range(INPROCESS_ROUNDS):
            for label, root in trees.items():
                url, key = keyed[label]
                args = [str(Path(__file__).resolve()), "inprocess", "--database-url", url, "--reps", json.dumps(reps)]
                if profile and round_ == 0:
                    args.append("--profile")
                out = c.run_json(args, timeout=1800, env=c.base_env(root, BENCH_KEY=key))
                for name, samples in out["cpu"].items():
                    results[label]["cpu"].setdefault(name, []).extend(samples)
                results[label]["profiles"].update(out["profiles"])
    return results


# ============================================================================================ over HTTP

def _http_cases(quick: bool) -> list[tuple[str, str, str, bytes | None, int, int]]:
    """(name, method, model, body, requests per batch, batches).

    The web process's CPU per forecast does not depend on the model (the model runs in the pool), so it is
    measured on the quickest model in batches long enough for /proc's 10 ms clock ticks: a tick is 0.05 ms
    a request in a batch of 200 forecasts of 1,000 points (0.25 ms with --quick) and under 1 ms in one of
    12 forecasts of 100,000 points; the other models get fewer requests, for their end-to-end times.
    """
    batches = 3 if quick else 7
    cases: list[tuple[str, str, str, bytes | None, int, int]] = [
        ("GET /verify", "GET", "", None, 300 if quick else 1000, batches)]
    for n in SIZES:
        body = forecast_body(n)
        for model in MODELS:
            if model == PROFILE_MODEL:
                per_batch = (40 if quick else 200) if n == 1_000 else (4 if quick else 12)
                cases.append((f"POST /forecast {n:,} {model}", "POST", model, body, per_batch, batches))
            else:
                cases.append((f"POST /forecast {n:,} {model}", "POST", model, body, 3, 3))
    return cases


def run_http(trees: dict[str, Path], quick: bool) -> dict[str, dict[str, dict[str, list[float]]]]:
    results: dict[str, dict[str, dict[str, list[float]]]] = {label: {} for label in trees}
    with ExitStack() as stack:
        servers = {}
        for label, root in trees.items():
            tmp = stack.enter_context(c.temp_dir(f"bench-profile-{label}-"))
            url, key = stack.enter_context(keyed_database(tmp, root))
            server = stack.enter_context(c.gunicorn(url, tmp, app_root=root, name=f"profile-{label}"))
            client = _Client(server, key)
            stack.callback(client.close)
            servers[label] = (server, client)
        floor = stack.enter_context(_floor_server(stack.enter_context(c.temp_dir("bench-floor-"))))
        floor_client = _Client(floor, "unused")
        stack.callback(floor_client.close)
        results[FLOOR] = {}
        for name, method, model, body, per_batch, batches in _http_cases(quick):
            # GET /verify is also sent to the bare Flask app, in the same batches: the floor of the architecture.
            targets = {**servers, FLOOR: (floor, floor_client)} if body is None else servers
            for label, (_server, client) in targets.items():  # warm-up on every server
                client.send(method, model, body)
                results[label][name] = {"cpu": [], "latency": []}
            for _ in range(batches):
                for label, (server, client) in targets.items():
                    cell = results[label][name]
                    cpu0 = server.worker_cpu_seconds()
                    for _ in range(per_batch):
                        cell["latency"].append(client.send(method, model, body))
                    cell["cpu"].append((server.worker_cpu_seconds() - cpu0) / per_batch)
    return results


FLOOR = "bare Flask"


@contextmanager
def _floor_server(tmp: Path) -> Iterator[c.Gunicorn]:
    """bench/floor_app.py under this checkout's gunicorn.conf.py (gunicorn reads it from its working directory)."""
    env = c.base_env(c.APP_ROOT)
    server = c.Gunicorn(env, tmp / "floor.log", args=["--pythonpath", str(Path(__file__).resolve().parent)],
                        app="floor_app:app")
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


class _Client:
    """One keep-alive connection, opened again when the server closed it while idle (keepalive is 5 s,
    and a batch on the other server can take longer)."""

    def __init__(self, server: c.Gunicorn, key: str) -> None:
        self.server, self.key = server, key
        self.conn = http.client.HTTPConnection(server.host, server.port, timeout=120)

    def send(self, method: str, model: str, body: bytes | None) -> float:
        headers = {"Authorization": f"Bearer {self.key}"}
        if body is not None:
            headers |= {"Content-Type": "application/json", "X-Model-Id": model}
        path = "/forecast" if body is not None else "/verify"
        for attempt in (1, 2):
            t0 = time.perf_counter()
            try:
                self.conn.request(method, path, body=body, headers=headers)
                response = self.conn.getresponse()
                data = response.read()
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.server.host, self.server.port, timeout=120)
                if attempt == 2:
                    raise
                continue
            elapsed = time.perf_counter() - t0
            if response.status != 200:
                raise RuntimeError(f"{method} {path} {model}: HTTP {response.status} {data[:300]!r}")
            return elapsed
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.conn.close()


# ============================================================================================ report

def report(inproc: dict[str, dict], over_http: dict[str, dict], trees: dict[str, Path]) -> str:
    labels = list(trees)
    lines = [c.machine_line(), "", *(f"- {label}: {root}" for label, root in trees.items()), ""]
    if inproc:
        lines += ["In-process (Flask test client), web-process CPU per request, median ms:", "",
                  "| request | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
        for name in inproc[labels[0]]["cpu"]:
            cells = [c.fmt_ms(c.median(inproc[label]["cpu"][name]), 3) for label in labels]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    if over_http:
        lines += ["Through gunicorn: web-process CPU per request (median of batches, ms) and end-to-end p50 (ms):",
                  "", "| request | " + " | ".join(f"{label} CPU | {label} e2e p50" for label in labels) + " |",
                  "|---|" + "---|---|" * len(labels)]
        for name in over_http[labels[0]]:
            cells = []
            for label in labels:
                cell = over_http[label][name]
                cells += [c.fmt_ms(c.median(cell["cpu"]), 2), c.fmt_ms(c.median(cell["latency"]), 1)]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        for name, cell in over_http.get(FLOOR, {}).items():
            lines.append(f"| {name} on a bare Flask app, same gunicorn config (the floor) | "
                         f"{c.fmt_ms(c.median(cell['cpu']), 2)} | {c.fmt_ms(c.median(cell['latency']), 1)} |"
                         + " | |" * (len(labels) - 1))
        lines += ["", "Scaling rule (every model: e2e p50 at 100,000 <= 1.3 x its 1,000-point p50 + 25 ms):"]
        for label in labels:
            for model in MODELS:
                small = c.median(over_http[label][f"POST /forecast 1,000 {model}"]["latency"])
                large = c.median(over_http[label][f"POST /forecast 100,000 {model}"]["latency"])
                bound = 1.3 * small + 0.025
                lines.append(f"- {label} {model}: {large * 1000:.1f} ms vs bound {bound * 1000:.1f} ms "
                             f"({'met' if large <= bound else 'MISSED'})")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd")
    child = sub.add_parser("inprocess", help="(internal) the in-process measurement, in a child process")
    child.add_argument("--database-url", required=True)
    child.add_argument("--reps", required=True)
    child.add_argument("--profile", action="store_true")
    ap.add_argument("--baseline", action="append", default=[],
                    help="[LABEL=]PATH of another checkout to measure beside this one (repeatable)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--profile", action="store_true", help="print cProfile top entries per request kind")
    ap.add_argument("--skip", default="", help="comma-separated: inprocess,http")
    args = ap.parse_args(argv)
    if args.cmd == "inprocess":
        out = inprocess(args.database_url, os.environ["BENCH_KEY"], json.loads(args.reps), args.profile)
        sys.stdout.write(json.dumps(out) + "\n")
        return 0
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    # This checkout is copied first, so edits made while the benchmark runs do not reach it.
    with c.code_snapshot() as code:
        trees = {"current": c.APP_ROOT}
        for baseline in args.baseline:
            label, _, path = baseline.rpartition("=")
            trees[label or "baseline"] = Path(path).resolve()
        inproc = {} if "inprocess" in skip else run_inprocess(trees, args.quick, args.profile)
        if args.profile:
            for label, result in inproc.items():
                for name, text in result["profiles"].items():
                    print(f"--- cProfile {label}: {name} {text}\n", flush=True)
        over_http = {} if "http" in skip else run_http(trees, args.quick)
    title = "# Web-process CPU per request, this checkout beside " + ", ".join(list(trees)[1:] or ["nothing"])
    text = f"{title}\n\n{code}\n\n" + report(inproc, over_http, trees)
    print(text, flush=True)
    if not args.quick:
        c.RESULTS.mkdir(parents=True, exist_ok=True)
        (c.RESULTS / "web_cpu.md").write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
