"""Tenant isolation on the job workers: another account's small batch, and its healthy Prometheus-backed monitor,
while one account's Prometheus-backed monitors hang and another's large batch fills the queue.

    python bench/tenant_isolation.py [--quick] [--database sqlite|postgres|both]

The service runs as production runs it (Procfile): gunicorn (`gunicorn wsgi:app`, its default processes) and
`flask --app wsgi jobs worker` (its default: one process per core), with ALLOW_PRIVATE_WEBHOOKS=1 so that
monitors may read from loopback. Twice: the embedded default (SQLite, its job queue in SQLite, limits in memory)
and PostgreSQL + Redis (the queue and the limits in Redis db 14, two gunicorn processes). Three accounts:

- A creates HOSTILE_MONITORS Prometheus-backed monitors (1-second steps, so a failed read is due again after the
  poller's 2 s) whose prometheus_url is a TCP server that accepts every connection and never answers, each
  with its own path: a read that reaches it waits out PROMETHEUS_TIMEOUT_SECONDS (10 s by default), and the
  poller answers the other reads of that server from its memory of the failure for 5 s;
- B then submits a BIG_SERIES-series CSV batch (synthetic monthly series of 60-120 points, horizon 12, the
  default model);
- C then submits a 1-series batch (JSON, a monthly series of 96 points), six times, 2-6 s apart (at random, so
  as not to fall in step with the poller's rounds), while B's batch runs: time from the POST to the GET that
  first shows `done` (polled every POLL_SECONDS). Target: <= 10 s each. The same batch is timed first on the
  idle service (after one warm-up batch), in the same run, as the reference.
- C also has one healthy Prometheus-backed monitor (1-second steps) on a real Prometheus (Debian's, scraping a
  gauge every second; skipped when /usr/bin/prometheus is missing): lag from a step's time to its stored
  verdict, seen by an observer reading the series' newest point time from the database every 0.5 s (so lag is
  over-stated by up to 0.5 s, and includes the 1 s a step waits to settle), before A's monitors exist and
  while they hang. Bound (docs/monitors.md): p99 <= 10 s.

B's batch is cancelled once measured (it need not finish); its progress then is reported. Writes
bench/results/tenant-isolation.md.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from datetime import date  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import requests  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402
from fleet import Gauges, Observer  # noqa: E402

from tests.support import PROMETHEUS_BINARY, PrometheusServer, Tarpit  # noqa: E402

HOSTILE_MONITORS = 150
BIG_SERIES = 3_000
TARGET_SECONDS = 10.0
LAG_BOUND_SECONDS = 10.0
POLL_SECONDS = 0.1
SAMPLE_SECONDS = 0.25
HORIZON = 12
FIELDS = {"forecast_horizon": HORIZON, "data_frequency": "Monthly", "forecast_frequency": "Monthly"}


def monthly_series(rng: random.Random, points: int) -> list[float]:
    """A monthly series: level, trend, a yearly season and noise, positive."""
    level, trend = rng.uniform(100, 5000), rng.uniform(-0.004, 0.01)
    amplitude, phase, noise = rng.uniform(0.02, 0.25), rng.uniform(0, 2 * math.pi), rng.uniform(0.01, 0.08)
    return [round(level * (1 + trend * t) * (1 + amplitude * math.sin(2 * math.pi * t / 12 + phase))
                  * (1 + rng.gauss(0, noise)), 3) for t in range(points)]


def month_stamps(points: int, end: date = date(2025, 12, 1)) -> list[str]:
    months = end.year * 12 + end.month - 1
    return [f"{(m // 12):04d}-{(m % 12) + 1:02d}-01T00:00:00" for m in range(months - points + 1, months + 1)]


def big_upload(series: int, seed: int = 0) -> bytes:
    rng = random.Random(seed)
    parts = ["unique_id,timestamp,value\n"]
    for n in range(series):
        points = rng.randint(60, 120)
        parts += [f"sku-{n:05d},{stamp},{value}\n"
                  for stamp, value in zip(month_stamps(points), monthly_series(rng, points), strict=True)]
    return "".join(parts).encode()


def small_body(seed: int) -> dict[str, Any]:
    values = monthly_series(random.Random(1000 + seed), 96)
    return {**FIELDS, "series": [{"id": f"c-{seed}", "timestamps": month_stamps(96), "values": values}]}


class Client:
    def __init__(self, url: str, key: str) -> None:
        self.url = url
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {key}"

    def batch(self, batch_id: str) -> dict[str, Any]:
        answer = self.session.get(f"{self.url}/batches/{batch_id}", timeout=30)
        answer.raise_for_status()
        return answer.json()


class Sampler:
    """Reads from the database (read-only) every SAMPLE_SECONDS what the job workers hold: chunks being computed
    (claimed, not done) per account, and uploads being split. (perf_counter time, {account: chunks}, splits)."""

    CHUNKS = ("SELECT b.account_id, count(*) FROM batch_chunks c JOIN batches b ON b.id = c.batch_id "
              "WHERE c.status = 'pending' AND c.lease_token IS NOT NULL GROUP BY b.account_id")
    SPLITS = "SELECT count(*) FROM batches WHERE lease_token IS NOT NULL AND NOT prepared"

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.samples: list[tuple[float, dict[str, int], int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _connect(self) -> Any:
        if self.database_url.startswith("sqlite"):
            import sqlite3

            path = self.database_url.removeprefix("sqlite:///")
            return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        import psycopg

        return psycopg.connect(self.database_url, autocommit=True)

    def _run(self) -> None:
        connection = self._connect()
        try:
            while not self._stop.is_set():
                try:
                    chunks = {account: count for account, count in connection.execute(self.CHUNKS).fetchall()}
                    splits = connection.execute(self.SPLITS).fetchone()[0]
                    self.samples.append((time.perf_counter(), chunks, splits))
                except Exception:  # noqa: BLE001 - a busy database: sample again next time
                    pass
                self._stop.wait(SAMPLE_SECONDS)
        finally:
            connection.close()

    def between(self, start: float, end: float) -> tuple[float, float, int]:
        """(mean chunks of B computing, share of samples with an upload being split, samples) in [start, end]."""
        inside = [(chunks, splits) for t, chunks, splits in self.samples if start <= t <= end]
        if not inside:
            return float("nan"), float("nan"), 0
        return (sum(chunks.get("tenant-b", 0) for chunks, _ in inside) / len(inside),
                sum(1 for _, splits in inside if splits) / len(inside), len(inside))


def time_small_batch(client: Client, seed: int, most: float = 120.0) -> dict[str, Any]:
    """Submits C's 1-series batch and polls it: seconds to the 202, to the first `running`, to `done`."""
    began = time.perf_counter()
    answer = client.session.post(f"{client.url}/batches", json=small_body(seed), timeout=60)
    at = {"began": began}
    if answer.status_code != 202:
        raise RuntimeError(f"small batch answered {answer.status_code}: {answer.text[:300]}")
    accepted = time.perf_counter() - began
    batch_id = answer.json()["id"]
    running = None
    while time.perf_counter() - began < most:
        body = client.batch(batch_id)
        now = time.perf_counter() - began
        if body["status"] == "running" and running is None:
            running = now
        if body["status"] in ("done", "failed", "cancelled"):
            return {**at, "seconds": now, "accepted": accepted, "running": running, "status": body["status"],
                    "finished": True}
        time.sleep(POLL_SECONDS)
    return {**at, "seconds": time.perf_counter() - began, "accepted": accepted, "running": running,
            "status": "not done", "finished": False}


def label(kind: str) -> str:
    return "SQLite (embedded default)" if kind == "sqlite" else "PostgreSQL + Redis, 2 web processes"


def seen_running(seconds: float | None) -> str:
    return "not seen" if seconds is None else f"{seconds:.2f} s"


def lag_summary(lags: list[float]) -> str:
    if not lags:
        return "-"
    return f"{c.median(lags):.1f} / {c.percentile(lags, 99):.1f} / {max(lags):.1f} s ({len(lags):,})"


def run_store(kind: str, *, small_batches: int, spacing: tuple[float, float], idle_batches: int, healthy_idle: float,
              hostile: int, big: int) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": kind}
    with c.temp_dir("bench-tenants-") as tmp, c.database(kind, tmp) as database_url:
        key_a = c.create_key(database_url, "read,write,admin,delete", account="tenant-a")
        key_b = c.create_key(database_url, "read,write,delete", account="tenant-b")
        key_c = c.create_key(database_url, "read,write,delete", account="tenant-c")
        env = c.base_env(DATABASE_URL=database_url, ALLOW_PRIVATE_WEBHOOKS="1")
        if kind == "postgres":
            c.flush_redis()
            env.update(REDIS_URL=c.REDIS_URL, WEB_CONCURRENCY="2")
        hanging = Tarpit()
        have_prometheus = os.path.exists(PROMETHEUS_BINARY)
        gauges = prometheus = observer = sampler = None
        server = c.Gunicorn(env, tmp / "gunicorn.log")
        worker = c.start_jobs_worker(env, tmp / "worker.log")
        try:
            if have_prometheus:
                gauges = Gauges("bench_tenant_ok", "queue", 1).start()
                prometheus = PrometheusServer(tmp / "prometheus", [
                    {"job_name": "tenant", "static_configs": [{"targets": [f"127.0.0.1:{gauges.port}"]}]}])
                prometheus.start()
            server.wait_ready()
            a, b, cc = Client(server.url, key_a), Client(server.url, key_b), Client(server.url, key_c)

            # The reference: C's batch on the idle service, after one warm-up batch.
            time_small_batch(cc, 0, most=300)
            out["idle"] = [time_small_batch(cc, 1 + i) for i in range(idle_batches)]

            # C's healthy monitor, first alone.
            lags_idle: list[float] = []
            lags_loaded: list[float] = []
            reads: list[float] = []  # when the observer saw the monitor's newest point move
            phase: dict[str, float] = {}
            if have_prometheus:
                created = cc.session.post(f"{server.url}/monitors", timeout=30, json={
                    "name": "healthy", "data_frequency": "Seconds", "prometheus_url": prometheus.url,
                    "prometheus_query": "bench_tenant_ok"})
                assert created.status_code == 201, created.text
                healthy_id = created.json()["id"]

                def seen(_series: int, before: int | None, after: int, now: float) -> None:
                    reads.append(now)
                    if before is None:
                        return  # the first read's backfill: live steps only
                    # By when the verdict was stored: once A's monitors exist, every read is "with A's".
                    for epoch in range(before + 1, after + 1):
                        (lags_loaded if "hostile" in phase and now >= phase["hostile"] else lags_idle).append(
                            now - epoch)

                observer = Observer(database_url, healthy_id, seen)
                observer.start()
                time.sleep(healthy_idle)

            # A's hanging monitors, then B's large batch.
            phase["hostile"] = time.time()
            for i in range(hostile):
                answer = a.session.post(f"{server.url}/monitors", timeout=30, json={
                    "name": f"hanging {i}", "data_frequency": "Seconds",
                    "prometheus_url": f"{hanging.url}/tenant-a/{i}", "prometheus_query": "up"})
                if answer.status_code != 201:
                    raise RuntimeError(f"hostile monitor answered {answer.status_code}: {answer.text[:300]}")
            out["hostile_create_seconds"] = time.time() - phase["hostile"]
            upload = big_upload(big)
            began = time.perf_counter()
            answer = b.session.post(f"{server.url}/batches", params=FIELDS, data=upload, timeout=300,
                                    headers={"Content-Type": "text/csv"})
            if answer.status_code != 202:
                raise RuntimeError(f"big batch answered {answer.status_code}: {answer.text[:300]}")
            big_id = answer.json()["id"]
            out["big_upload"] = (len(upload), time.perf_counter() - began)
            big_started = time.perf_counter()
            worker_cpu0 = c.tree_cpu_seconds(worker.pid)
            sampler = Sampler(database_url).start()

            # C's small batches while both run.
            loaded = []
            pauses = random.Random(7)  # random pauses, so the batches do not fall in step with the poller's rounds
            for i in range(small_batches):
                time.sleep(pauses.uniform(*spacing))
                result = time_small_batch(cc, 100 + i, most=max(60.0, 6 * TARGET_SECONDS))
                result["big_done"] = b.batch(big_id)["progress"]["done"]
                loaded.append(result)
                print(kind, "small batch", i, result, flush=True)
            out["loaded"] = loaded
            elapsed = time.perf_counter() - big_started
            sampler.stop()
            for result in loaded:  # what the job workers held while the batch waited (202 to running)
                waited_until = result["began"] + (result["running"] or result["seconds"])
                result["b_chunks"], result["splitting"], _ = sampler.between(
                    result["began"] + result["accepted"], waited_until)
            big_view = b.batch(big_id)
            out["big"] = {"status": big_view["status"], "done": big_view["progress"]["done"],
                          "failed": big_view["progress"]["failed"], "total": big_view["progress"]["total"],
                          "seconds": elapsed, "finished_at": big_view["finished_at"]}
            out["worker_cpu"] = (c.tree_cpu_seconds(worker.pid) - worker_cpu0) / elapsed
            if observer is not None:
                observer.stop()
            out["lags_idle"], out["lags_loaded"] = lags_idle, lags_loaded
            gaps = [(later, later - earlier) for earlier, later in zip(reads, reads[1:], strict=False)]
            out["gaps_idle"] = [gap for at, gap in gaps if at < phase["hostile"]]
            out["gaps_loaded"] = [gap for at, gap in gaps if at >= phase["hostile"]]
            statuses: Counter[str] = Counter()
            after = ""
            while True:
                page = a.session.get(f"{server.url}/monitors?limit=1000&after={after}", timeout=60).json()
                statuses.update(view["source"]["status"] for view in page["monitors"])
                if not page["next_after"]:
                    break
                after = page["next_after"]
            out["hostile_statuses"] = dict(statuses)
            out["hostile_connections"] = hanging.accepted
            out["hostile_seconds"] = time.time() - phase["hostile"]
            out["have_prometheus"] = have_prometheus
            b.session.delete(f"{server.url}/batches/{big_id}", timeout=60)  # nothing left to wait for
        finally:
            for thread in (observer, sampler):
                if thread is not None:
                    thread.stop()
            c.stop_process(worker, signal.SIGTERM)
            server.stop()
            if prometheus is not None:
                prometheus.stop()
            if gauges is not None:
                gauges.stop()
            hanging.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 small batches instead of 6, a shorter idle phase")
    ap.add_argument("--database", choices=("sqlite", "postgres", "both"), default="both")
    ap.add_argument("--hostile", type=int, default=HOSTILE_MONITORS)
    ap.add_argument("--big", type=int, default=BIG_SERIES)
    args = ap.parse_args(argv)
    kinds = ("sqlite", "postgres") if args.database == "both" else (args.database,)
    small, idle_batches, healthy_idle = (3, 2, 15.0) if args.quick else (6, 3, 25.0)
    spacing = (2.0, 6.0)
    runs = [run_store(kind, small_batches=small, spacing=spacing, idle_batches=idle_batches,
                      healthy_idle=healthy_idle, hostile=args.hostile, big=args.big) for kind in kinds]

    rows, lag_rows, notes = [], [], []
    for run in runs:
        idle = [r["seconds"] for r in run["idle"]]
        loaded = [r["seconds"] for r in run["loaded"]]
        finished = sum(1 for r in run["loaded"] if r["finished"] and r["status"] == "done")
        met = finished == len(loaded) and max(loaded) <= TARGET_SECONDS
        rows.append([label(run["kind"]), f"{c.median(idle):.2f}", f"{c.median(loaded):.2f}", f"{max(loaded):.2f}",
                     f"{finished} of {len(loaded)}", f"<= {TARGET_SECONDS:g} s each", "met" if met else "MISSED"])
        if run["have_prometheus"]:
            bound = bool(run["lags_loaded"]) and c.percentile(run["lags_loaded"], 99) <= LAG_BOUND_SECONDS
            lag_rows.append([label(run["kind"]), lag_summary(run["lags_idle"]), lag_summary(run["lags_loaded"]),
                             f"{max(run['gaps_idle'], default=0):.1f} / {max(run['gaps_loaded'], default=0):.1f}",
                             f"p99 <= {LAG_BOUND_SECONDS:g} s", "met" if bound else "MISSED"])
        big = run["big"]
        steps = "; ".join(
            f"202 {r['accepted']:.2f} s, running {seen_running(r['running'])}, "
            f"{r['status']} {r['seconds']:.2f} s (B's chunks computing meanwhile {r['b_chunks']:.2f}, B's upload "
            f"split {r['splitting'] * 100:.0f}% of it; B at {r['big_done']:,} done)" for r in run["loaded"])
        waited = [r["b_chunks"] for r in run["loaded"] if r["b_chunks"] == r["b_chunks"]]
        notes.append(
            f"{label(run['kind'])}: C's batches under load, from the POST: {steps}. B's {big['total']:,}-series "
            f"batch ({run['big_upload'][0] / 1e6:.1f} MB CSV, 202 after {run['big_upload'][1]:.1f} s): "
            f"{big['status']}, {big['done']:,} done and {big['failed']:,} failed {big['seconds']:.0f} s after its 202 "
            f"({big['done'] / big['seconds']:.1f} series/s), then cancelled. A's {args.hostile} monitors (created in "
            f"{run['hostile_create_seconds']:.1f} s): the hanging server took {run['hostile_connections']:,} "
            f"connections in {run['hostile_seconds']:.0f} s; their states at the end {run['hostile_statuses']}. "
            f"Job workers' CPU over the window: {run['worker_cpu'] * 100:.0f}% of one core, of {os.cpu_count()}.")
        if waited:
            notes[-1] += (f" While C's batches waited (202 to running), B's chunks being computed averaged "
                          f"{sum(waited) / len(waited):.2f} (of {os.cpu_count()} job worker processes).")
    extra = ""
    if lag_rows:
        extra = "\n".join(
            ["C's healthy Prometheus-backed monitor (1-second steps): lag from a step's time to its stored verdict "
             "(p50 / p99 / max, steps observed), alone and while A's monitors hang (B's batch running); the longest "
             "gap between two of its reads seen by the observer.", "",
             "| deployment | alone | with A's hanging monitors | longest gap between reads s: alone / with A's | "
             "bound | result |", "|---|---|---|---|---|---|"]
            + ["| " + " | ".join(str(v) for v in row) + " |" for row in lag_rows])
    else:
        notes.append(f"{PROMETHEUS_BINARY} is missing: C's healthy Prometheus-backed monitor was not measured.")
    c.write_table(
        "tenant-isolation",
        "Tenant isolation: another account's 1-series batch while one account's monitors hang and another's "
        "large batch is queued",
        [f"gunicorn (`gunicorn wsgi:app`, default processes; 2 with PostgreSQL + Redis) and `flask --app wsgi jobs "
         f"worker` (default: one process per core, {os.cpu_count()} here), ALLOW_PRIVATE_WEBHOOKS=1, on the same "
         "shared machine as the benchmark, Prometheus and the hanging server.",
         f"Account A: {args.hostile} Prometheus-backed monitors, 1-second steps, each on its own path of a TCP server "
         "that accepts and never answers (a read that reaches it waits out PROMETHEUS_TIMEOUT_SECONDS, 10 s). Account "
         "B, right "
         f"after: a {args.big:,}-series CSV batch (synthetic monthly series of 60-120 points, horizon {HORIZON}, "
         f"default model). Account C: a 1-series JSON batch (96 monthly points), {len(runs[0]['loaded'])} times, "
         f"{spacing[0]:g}-{spacing[1]:g} s apart (at random), each timed from its POST to the GET (every "
         f"{POLL_SECONDS:g} s) showing `done`; the idle reference is the same batch on the idle service before A "
         f"and B, {len(runs[0]['idle'])} times after a warm-up batch.",
         f"Target: C's batch done within {TARGET_SECONDS:g} s while A's monitors hang and B's batch is queued.",
         *notes],
        ["deployment", "idle 1-series batch p50 s", "under load p50 s", "under load max s", "finished",
         "target", "result"],
        rows, extra=extra)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
