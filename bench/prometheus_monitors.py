"""Prometheus-backed monitors at scale (issue 36): 1,000 monitors on a 1-minute frequency, each reading its own
series from a real Prometheus, read and judged by the default configuration on this machine (one gunicorn,
one `jobs worker`, SQLite), beside pushed points measured in the same run.

    python bench/prometheus_monitors.py [--quick] [--monitors N] [--minutes M]

Lag is a point's time (the minute Prometheus evaluates the query at) to the moment its verdict is stored,
which an observer sees by reading each monitor's newest point time from the database (read-only) every 0.25 s,
so lag is over-stated by up to 0.25 s; a point is readable SETTLE_SECONDS after its time, which lag includes.
(Reading GET /monitors/metrics every 0.5 s instead cost gunicorn 15% of a core, on the machine measured.)
At the end, GET /monitors/metrics must show every monitor's newest point. Target: p99 <= 10 s.
The pushed-points reference: POST /monitors/{id}/points of one point to a pushed monitor holding 300 points,
one client, before the Prometheus-backed monitors exist (idle) and while they are read (loaded).
Writes bench/results/prometheus.md.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import signal  # noqa: E402
import sqlite3  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import requests  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402

from tests.support import ScrapeTarget  # noqa: E402

PROMETHEUS = os.environ.get("PROMETHEUS_BINARY", "/usr/bin/prometheus")
SCRAPE_SECONDS = 15
TARGET_P99 = 10.0
OBSERVE_SECONDS = 0.25


class Exporter(ScrapeTarget):
    """N gauges, one per monitor, each a slow wave with noise: what Prometheus scrapes."""

    def __init__(self, series: int) -> None:
        super().__init__()
        self.series = series

    def body(self) -> str:
        t = time.time() / 60.0
        lines = ["# TYPE bench_queue_depth gauge"]
        for i in range(self.series):
            value = 100 + 10 * math.sin(t / 7 + i) + random.gauss(0, 1)
            lines.append(f'bench_queue_depth{{queue="q{i}"}} {value:.4f}')
        return "\n".join(lines) + "\n"


def start_prometheus(tmp: Path, exporter_port: int) -> tuple[subprocess.Popen[bytes], str]:
    port = c.free_port()
    target = {"targets": [f"127.0.0.1:{exporter_port}"]}
    config = {"global": {"scrape_interval": f"{SCRAPE_SECONDS}s"},
              "scrape_configs": [{"job_name": "bench", "static_configs": [target]}]}
    (tmp / "prometheus.yml").write_text(json.dumps(config))
    log = open(tmp / "prometheus.log", "w")  # noqa: SIM115
    process = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(url + "/-/ready", timeout=1).status_code == 200:
                return process, url
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise RuntimeError("prometheus did not start")


def push_latencies(session: requests.Session, url: str, monitor_id: str, start: int, count: int,
                   pause: float) -> list[float]:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    out = []
    for i in range(start, start + count):
        stamp = (base + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ")
        value = 10 + 3 * math.sin(i / 15) + random.gauss(0, 0.2)
        began = time.perf_counter()
        answer = session.post(f"{url}/monitors/{monitor_id}/points", json={"timestamps": [stamp], "values": [value]},
                              timeout=30)
        out.append(time.perf_counter() - began)
        if answer.status_code != 200:
            raise RuntimeError(f"push failed: {answer.status_code} {answer.text[:300]}")
        time.sleep(pause)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--monitors", type=int, default=1000)
    ap.add_argument("--minutes", type=float, default=None)
    args = ap.parse_args()
    minutes = args.minutes or (3.0 if args.quick else 6.0)
    if not os.path.exists(PROMETHEUS):
        raise SystemExit(f"{PROMETHEUS} is missing (apt-get install -y prometheus)")
    with c.temp_dir("bench-prometheus-") as tmp, c.database("sqlite", tmp) as database_url:
        key = c.create_key(database_url, "read,write,admin,delete")
        headers = {"Authorization": f"Bearer {key}"}
        exporter = Exporter(args.monitors).start()
        prometheus, prometheus_url = start_prometheus(tmp, exporter.port)
        env = c.base_env(DATABASE_URL=database_url, ALLOW_PRIVATE_WEBHOOKS="1")
        worker_log = open(tmp / "worker.log", "w")  # noqa: SIM115
        worker = subprocess.Popen([str(c.VENV_BIN / "flask"), "--app", "wsgi", "jobs", "worker"],
                                  cwd=env["BENCH_APP_ROOT"], env=env, stdout=worker_log, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        try:
            with c.gunicorn(database_url, tmp, ALLOW_PRIVATE_WEBHOOKS="1") as server:
                session = requests.Session()
                session.headers.update(headers)
                # The pushed reference: a monitor with 300 points, then one point per request.
                pushed = session.post(f"{server.url}/monitors", json={"name": "pushed", "data_frequency": "Minutes"},
                                      timeout=30).json()["id"]
                base = datetime(2026, 1, 1, tzinfo=UTC)
                stamps = [(base + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%M:%SZ") for i in range(300)]
                session.post(f"{server.url}/monitors/{pushed}/points", timeout=60,
                             json={"timestamps": stamps, "values": [10 + 3 * math.sin(i / 15) for i in range(300)]})
                idle = push_latencies(session, server.url, pushed, 300, 200, 0.0)

                # Wait for two scrapes so the monitors' backfill finds a series.
                time.sleep(SCRAPE_SECONDS + 2)
                created_at = time.time()
                ids: list[str] = []
                for i in range(args.monitors):
                    answer = session.post(f"{server.url}/monitors", timeout=30, json={
                        "name": f"queue q{i}", "data_frequency": "Minutes", "prometheus_url": prometheus_url,
                        "prometheus_query": f'bench_queue_depth{{queue="q{i}"}}'})
                    if answer.status_code != 201:
                        raise RuntimeError(answer.text)
                    ids.append(answer.json()["id"])
                creation_seconds = time.time() - created_at
                wanted = set(ids)

                # Observe: when does each minute's verdict appear in the exposition?
                seen: dict[str, float] = {}
                lags: list[float] = []
                observe_from = math.floor(time.time() / 60) * 60 + 60  # the first whole minute after creation
                stop_at = time.time() + minutes * 60
                # Only the minutes whose verdicts had time to show before the end are counted.
                last_counted = math.floor((stop_at - 3 * TARGET_P99) / 60) * 60
                worker_cpu0 = c.tree_cpu_seconds(worker.pid)
                server_cpu0 = c.tree_cpu_seconds(server.process.pid)
                loaded: list[float] = []
                pusher_stop = threading.Event()

                def pusher() -> None:
                    push_session = requests.Session()
                    push_session.headers.update(headers)
                    i = 500
                    while not pusher_stop.is_set():
                        loaded.extend(push_latencies(push_session, server.url, pushed, i, 10, 0.25))
                        i += 10

                pusher_thread = threading.Thread(target=pusher, daemon=True)
                pusher_thread.start()
                statuses: dict[str, int] = {}
                observer = sqlite3.connect(f"file:{database_url.removeprefix('sqlite:///')}?mode=ro", uri=True)
                while time.time() < stop_at:
                    began = time.time()
                    rows = observer.execute("SELECT monitor_id, max(last_epoch) FROM monitor_series "
                                            "WHERE last_epoch IS NOT NULL GROUP BY monitor_id")
                    now = time.time()
                    for monitor_id, epoch in rows:
                        if monitor_id not in wanted:
                            continue
                        if epoch > seen.get(monitor_id, 0) and observe_from <= epoch <= last_counted:
                            lags.append(now - epoch)
                        seen[monitor_id] = max(epoch, seen.get(monitor_id, 0))
                    time.sleep(max(0.0, OBSERVE_SECONDS - (time.time() - began)))
                observer.close()
                pusher_stop.set()
                pusher_thread.join(30)
                worker_cpu = c.tree_cpu_seconds(worker.pid) - worker_cpu0
                server_cpu = c.tree_cpu_seconds(server.process.pid) - server_cpu0
                elapsed = minutes * 60
                listing: list[dict[str, Any]] = []
                after = ""
                while True:
                    page = session.get(f"{server.url}/monitors?limit=1000&after={after}", timeout=60).json()
                    listing += page["monitors"]
                    if not page["next_after"]:
                        break
                    after = page["next_after"]
                for view in listing:
                    if view["source"]["kind"] == "prometheus":
                        statuses[view["source"]["status"]] = statuses.get(view["source"]["status"], 0) + 1
                points = {view["id"]: view["point_count"] for view in listing if view["id"] in wanted}
                exposed = session.get(f"{server.url}/monitors/metrics", timeout=60).text
                newest = {line.split('monitor_id="', 1)[1].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
                          for line in exposed.splitlines()
                          if line.startswith("forecast_monitor_last_point_timestamp_seconds{")}
                in_exposition = sum(1 for monitor_id in wanted if newest.get(monitor_id, 0) >= seen.get(monitor_id, 1))
        finally:
            c.stop_process(worker, signal.SIGINT)
            c.stop_process(prometheus, signal.SIGTERM)
            exporter.stop()
    expected = max(0, (last_counted - observe_from) // 60 + 1) * args.monitors
    rows = [
        ["Prometheus-backed: lag, point time to verdict (s)", f"{c.median(lags):.2f}", f"{c.percentile(lags, 99):.2f}",
         f"{max(lags) if lags else float('nan'):.2f}", f"{len(lags)} of {expected} due"],
        ["pushed, idle: POST 1 point (ms)", c.fmt_ms(c.median(idle)), c.fmt_ms(c.percentile(idle, 99)),
         c.fmt_ms(max(idle)), str(len(idle))],
        ["pushed, while 1,000 monitors are read: POST 1 point (ms)", c.fmt_ms(c.median(loaded)),
         c.fmt_ms(c.percentile(loaded, 99)), c.fmt_ms(max(loaded) if loaded else float("nan")), str(len(loaded))],
    ]
    verdict = "met" if lags and c.percentile(lags, 99) <= TARGET_P99 else "NOT met"
    notes = [
        f"{args.monitors} Prometheus-backed monitors, data_frequency Minutes, each its own series "
        f"(Prometheus {SCRAPE_SECONDS} s scrapes); one gunicorn (default configuration), one `flask --app wsgi jobs "
        "worker` (default: one process per core), SQLite; Prometheus, the exporter and the observer on the same "
        "machine.",
        f"Observed {minutes:g} min; lag counts live points only (backfill excluded), as seen by an observer reading "
        f"the monitors' newest point times every {OBSERVE_SECONDS} s. Target p99 <= {TARGET_P99:g} s: {verdict}. "
        f"GET /monitors/metrics at the end showed the newest point of {in_exposition} of {args.monitors}.",
        f"Creating the {args.monitors} monitors took {creation_seconds:.1f} s (each backfills on its first read).",
        f"CPU over the observed window: jobs worker {worker_cpu / elapsed * 100:.0f}% of one core, gunicorn "
        f"(serving the pusher) {server_cpu / elapsed * 100:.0f}%; the machine's load average is in the header.",
        f"Source states at the end: {statuses}; stored points per monitor: min {min(points.values())}, "
        f"max {max(points.values())}.",
    ]
    c.write_table("prometheus", "Prometheus-backed monitors", notes, ["case", "p50", "p99", "max", "samples"], rows)


if __name__ == "__main__":
    main()
