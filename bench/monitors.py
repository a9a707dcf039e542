"""Monitor benchmarks (issue 12), through a real gunicorn with the default configuration.

    python bench/monitors.py [--quick] [--database sqlite|postgres]

1. Append 1 point to a monitor holding 4,000 points: p50/p99 end to end (target p50 <= 25 ms).
2. Append a batch of 100 points to a monitor holding 4,000: p50/p99 (target p50 <= 150 ms).
3. 200 monitors each receiving one point a second for 60 s on the default single process: errors, lost
   points (every monitor's stored count checked afterwards) and latency percentiles.
Writes bench/results/monitors.md.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import http.client  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402

START = datetime(2026, 1, 1, tzinfo=UTC)


def stamp(minute: int) -> str:
    return (START + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ")


def value(minute: int, phase: float = 0.0) -> float:
    # A daily wave with noise and an occasional spike, so the judge does real work and alerts would fire.
    rng = random.Random(minute * 7919 + int(phase * 1000))
    spike = 25.0 if rng.random() < 0.002 else 0.0
    return 50 + 10 * math.sin(2 * math.pi * minute / 1440 + phase) + rng.gauss(0, 1) + spike


class Client:
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self, url: str, key: str) -> None:
        host, port = url.removeprefix("http://").split(":")
        self.connection = http.client.HTTPConnection(host, int(port), timeout=60)
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: object | None = None) -> tuple[int, dict, float]:
        payload = json.dumps(body) if body is not None else None
        for attempt in (1, 2):
            started = time.perf_counter()
            try:
                self.connection.request(method, path, body=payload, headers=self.headers)
                response = self.connection.getresponse()
                data = response.read()
                break
            except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
                # The server closed a keep-alive connection that idled past its timeout; every call here is
                # safe to repeat (re-sent points are idempotent), so reconnect once.
                self.connection.close()
                if attempt == 2:
                    raise
            except (OSError, http.client.HTTPException):
                self.connection.close()
                raise
        elapsed = time.perf_counter() - started
        return response.status, (json.loads(data) if data else {}), elapsed


def create_monitor(client: Client, name: str) -> str:
    status, body, _ = client.call("POST", "/monitors", {"name": name, "data_frequency": "Minutes"})
    if status != 201:
        raise RuntimeError(f"create monitor: {status} {body}")
    return body["id"]


def seed(client: Client, monitor_id: str, count: int, phase: float = 0.0) -> None:
    for start in range(0, count, 1000):
        minutes = range(start, min(count, start + 1000))
        status, body, _ = client.call("POST", f"/monitors/{monitor_id}/points", {
            "timestamps": [stamp(m) for m in minutes], "values": [value(m, phase) for m in minutes]})
        if status != 200:
            raise RuntimeError(f"seed: {status} {body}")


def append_latency(client: Client, monitor_id: str, first_minute: int, batch: int, requests: int,
                   warmup: int) -> list[float]:
    latencies = []
    minute = first_minute
    for i in range(warmup + requests):
        minutes = range(minute, minute + batch)
        status, body, elapsed = client.call("POST", f"/monitors/{monitor_id}/points", {
            "timestamps": [stamp(m) for m in minutes], "values": [value(m) for m in minutes]})
        if status != 200 or body["new_points"] != batch:
            raise RuntimeError(f"append: {status} {body}")
        if i >= warmup:
            latencies.append(elapsed)
        minute += batch
    return latencies


def steady_load(url: str, key: str, monitors: int, seconds: int, history: int) -> dict:
    seeder = Client(url, key)
    ids = [create_monitor(seeder, f"load-{i}") for i in range(monitors)]
    for i, monitor_id in enumerate(ids):
        seed(seeder, monitor_id, history, phase=i / monitors)
    latencies: list[float] = []
    errors: list[str] = []
    late: list[float] = []
    lock = threading.Lock()
    local = threading.local()

    def send(job: tuple[int, int, float]) -> None:
        index, tick, due = job
        delay = due - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            with lock:
                late.append(-delay)
        client = getattr(local, "client", None)
        if client is None:
            client = local.client = Client(url, key)
        minute = history + tick
        try:
            status, body, elapsed = client.call("POST", f"/monitors/{ids[index]}/points", {
                "timestamps": [stamp(minute)], "values": [value(minute, index / monitors)]})
        except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
            local.client = None
            with lock:
                errors.append(f"{type(exc).__name__}: {exc}")
            return
        with lock:
            if status != 200 or body.get("new_points") != 1:
                errors.append(f"{status} {str(body)[:200]}")
            else:
                latencies.append(elapsed)

    begin = time.monotonic() + 1.0
    # Each monitor sends once a second, the monitors spread evenly over the second.
    jobs = [(i, tick, begin + tick + i / monitors) for tick in range(seconds) for i in range(monitors)]
    wall = time.monotonic()
    with ThreadPoolExecutor(max_workers=64) as pool:
        list(pool.map(send, jobs))
    wall = time.monotonic() - wall

    lost = 0
    seeder = Client(url, key)  # the seeding connection idled past the server's keep-alive timeout
    for monitor_id in ids:
        status, body, _ = seeder.call("GET", f"/monitors/{monitor_id}?points=0")
        if status != 200 or body["point_count"] != history + seconds:
            lost += (history + seconds) - body.get("point_count", 0)
    return {
        "requests": len(jobs), "ok": len(latencies), "errors": len(errors), "error_samples": errors[:5],
        "lost_points": lost, "p50": c.percentile(latencies, 50), "p90": c.percentile(latencies, 90),
        "p99": c.percentile(latencies, 99), "max": max(latencies) if latencies else float("nan"),
        "sent_late_p99": c.percentile(late, 99) if late else 0.0, "late_count": len(late),
        "wall_seconds": wall, "rate": len(latencies) / wall if wall else 0.0,
    }


class Receiver:
    """A webhook receiver on 127.0.0.1 that acknowledges everything and records event ids in arrival order."""

    def __init__(self, port: int) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.events: list[dict] = []
        events = self.events
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    events.append(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def receiver_outage(url: str, key: str, outage: float, monitors: int = 5) -> dict:
    """Alerts raised while the receiver is down for ``outage`` seconds (connection refused), then it returns:
    does every event arrive, in order per monitor, and how long after the return is the backlog drained?"""
    port = c.free_port()
    client = Client(url, key)
    ids = []
    for i in range(monitors):
        status, body, _ = client.call("POST", "/monitors", {
            "name": f"outage-{i}", "data_frequency": "Minutes", "webhook_url": f"http://127.0.0.1:{port}/hook"})
        if status != 201:
            raise RuntimeError(f"create monitor: {status} {body}")
        ids.append(body["id"])
    down_at = time.monotonic()
    minute = 0
    rounds = 0
    while time.monotonic() - down_at < outage:
        # A batch of 60 points with two spikes per monitor, every few seconds of the outage.
        minutes = range(minute, minute + 60)
        for monitor_id in ids:
            values = [value(m) + (40.0 if m % 60 in (30, 45) and m >= 120 else 0.0) for m in minutes]
            status, body, _ = client.call("POST", f"/monitors/{monitor_id}/points", {
                "timestamps": [stamp(m) for m in minutes], "values": values})
            if status != 200:
                raise RuntimeError(f"append: {status} {body}")
        minute += 60
        rounds += 1
        time.sleep(min(5.0, max(0.0, outage - (time.monotonic() - down_at))))
    client = Client(url, key)
    expected = {}
    for monitor_id in ids:
        status, body, _ = client.call("GET", f"/monitors/{monitor_id}/deliveries?limit=1000")
        expected[monitor_id] = len(body["deliveries"])
    total = sum(expected.values())
    receiver = Receiver(port)
    back_at = time.monotonic()
    try:
        while len(receiver.events) < total and time.monotonic() - back_at < 3600:
            time.sleep(0.2)
        drained = time.monotonic() - back_at
        time.sleep(3)  # repeats would arrive after the backlog
    finally:
        receiver.stop()
    ids_seen = [e["id"] for e in receiver.events]
    in_order = all(
        [e["sequence"] for e in receiver.events if e["monitor_id"] == m] == list(range(1, expected[m] + 1))
        for m in ids
    )
    return {"events": total, "received": len(set(ids_seen)), "repeats": len(ids_seen) - len(set(ids_seen)),
            "in_order": in_order, "drained_seconds": drained, "outage_seconds": outage, "rounds": rounds}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    args = parser.parse_args()
    single_requests = 100 if args.quick else 400
    batch_requests = 30 if args.quick else 100
    monitors, seconds = (50, 15) if args.quick else (200, 60)
    outage_seconds = 10.0 if args.quick else 120.0
    # A monitor that has been running a while: past the detector's warm-up and its look-back window.
    history = 2000

    load_before = f"{os.getloadavg()[0]:.2f}"
    with c.temp_dir("bench-monitors-") as tmp, c.database(args.database, tmp) as url:
        key = c.create_key(url, "read,write,delete")
        # The default deployment: one gunicorn worker process, gthread, FORECAST_WORKERS = cores.
        env_workers = os.cpu_count() or 1
        # ALLOW_PRIVATE_WEBHOOKS lets the outage case's receiver live on loopback; nothing else changes.
        with c.gunicorn(url, tmp, name="monitors", workers=env_workers, ALLOW_PRIVATE_WEBHOOKS="1") as server:
            client = Client(server.url, key)
            single_id = create_monitor(client, "single")
            seed(client, single_id, 4000)
            single = append_latency(client, single_id, 4000, 1, single_requests, warmup=20)
            batch_id = create_monitor(client, "batch")
            seed(client, batch_id, 4000)
            batch = append_latency(client, batch_id, 4000, 100, batch_requests, warmup=5)
            print(json.dumps({"single_p50": c.percentile(single, 50), "batch_p50": c.percentile(batch, 50)}),
                  flush=True)
            load = steady_load(server.url, key, monitors, seconds, history)
            print(json.dumps(load), flush=True)
            outage = receiver_outage(server.url, key, outage_seconds)

    single_p50, batch_p50 = c.percentile(single, 50), c.percentile(batch, 50)
    rows = [
        ["append 1 point to a monitor holding 4,000", len(single), c.fmt_ms(single_p50), c.fmt_ms(c.percentile(
            single, 90)), c.fmt_ms(c.percentile(single, 99)), "p50 <= 25 ms",
         "met" if single_p50 <= 0.025 else "MISSED"],
        ["append a batch of 100 to a monitor holding 4,000", len(batch), c.fmt_ms(batch_p50), c.fmt_ms(
            c.percentile(batch, 90)), c.fmt_ms(c.percentile(batch, 99)), "p50 <= 150 ms",
         "met" if batch_p50 <= 0.150 else "MISSED"],
        [f"{monitors} monitors x 1 point/s for {seconds} s ({load['requests']} requests)",
         load["ok"], c.fmt_ms(load["p50"]), c.fmt_ms(load["p90"]), c.fmt_ms(load["p99"]),
         "no error, no lost point",
         ("met" if load["errors"] == 0 and load["lost_points"] == 0 else
          f"MISSED ({load['errors']} errors, {load['lost_points']} lost)")
         + (f"; kept pace ({load['rate']:.0f} req/s)" if load["wall_seconds"] <= seconds * 1.1 else
            f"; did NOT keep pace: {load['rate']:.0f} req/s sustained of {monitors} offered, the run took "
            f"{load['wall_seconds']:.0f} s")],
        [f"receiver down {outage['outage_seconds']:.0f} s (connection refused), then back: {outage['events']} "
         f"alert events from 5 monitors", outage["received"], "", "", "",
         "every event, in order per monitor",
         ("met" if outage["received"] == outage["events"] and outage["in_order"] else "MISSED")
         + f"; backlog drained {outage['drained_seconds']:.1f} s after the return; {outage['repeats']} repeats"],
    ]
    notes = [
        f"Database: {args.database}. gunicorn with the repository's gunicorn.conf.py defaults (1 worker process, "
        f"gthread), FORECAST_WORKERS={env_workers}; memory rate-limit storage; a key with limits of 10,000,000.",
        "End to end: HTTP/1.1 keep-alive on loopback, from sending the request to reading the whole answer, "
        "which includes the verdicts of the new points (judged in the worker pool against the stored history) "
        "and the commit of points and alert events.",
        "Series: one point a minute, a daily wave with noise and rare spikes. Single-point and batch appends "
        "are sequential from one client, after warm-up requests that are not counted.",
        f"Steady load: {monitors} monitors seeded with {history} points each, then every monitor sends one point "
        f"a second (spread evenly over the second) for {seconds} s from 64 client threads in one process on the "
        "same machine; afterwards every monitor's stored point count is checked (lost points = expected - stored).",
        f"Steady load detail: max {c.fmt_ms(load['max'])} ms; requests sent late by the client "
        f"{load['late_count']} (p99 lateness {c.fmt_ms(load['sent_late_p99'])} ms); errors: "
        f"{load['errors']} {load['error_samples'] if load['errors'] else ''}",
        "Receiver outage: default retry policy (exponential backoff from 1 s, waits capped at 60 s, give up after "
        "an hour); points with spikes keep arriving during the outage, so events queue behind each monitor's "
        "oldest undelivered one; the receiver acknowledges everything once back. Repeats (the same event id "
        "twice) are allowed by at-least-once delivery and counted.",
        f"1-min load average before the suite: {load_before} (2 cores shared with other processes).",
    ]
    c.write_table("monitors", "Monitor point appends", notes,
                  ["case", "requests measured", "p50 ms", "p90 ms", "p99 ms", "target", "result"], rows)


if __name__ == "__main__":
    main()
