"""Monitor benchmarks (issue 12), through a real gunicorn with the default configuration, beside the reference.

    python bench/monitors.py [--quick] [--database sqlite|postgres] [--reference COMMIT | --no-reference]

1. Append 1 point to a monitor holding 4,000 points: p50/p99 end to end (target p50 <= 25 ms).
2. Append a batch of 100 points to a monitor holding 4,000: p50/p99 (target p50 <= 150 ms).
3. 1,000 monitors, each given a history of 300 points, then each fed one point a second for 60 s (30 s with
   --quick) on the default single gunicorn process: sustained points/s (target >= 1,000), append p99 (target
   <= 250 ms), errors, and lost points (every monitor's stored count checked afterwards). The load comes from
   a separate process (asyncio, keep-alive connections, every request encoded before the clock starts).
4. A webhook receiver down for 120 s, then back: every alert event delivered, in order (this code only).
Cases 1-3 also run against the reference commit (main before the append path's Core statements: the streaming
detector already, each append's statements built through the ORM session), from a git worktree, in the same run.
Writes bench/results/monitors.md.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import http.client  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TypeVar  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402

START = datetime(2026, 1, 1, tzinfo=UTC)
# main before the append path ran prebuilt Core statements (the streaming detector already, its statements built
# through the ORM session on every append).
REFERENCE = "9e1a109"
T = TypeVar("T")
KEY_ENV = "BENCH_MONITORS_KEY"  # how the load generator gets the key: never on a command line
LOAD_CONNECTIONS = 128  # keep-alive connections: 1,000 points/s still offered while answers take up to 128 ms
TARGET_RATE = 1000.0
TARGET_P99 = 0.250


def stamp(minute: int) -> str:
    return (START + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp_seconds(second: int) -> str:
    return (START + timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%SZ")


def value(minute: int, phase: float = 0.0) -> float:
    # A daily wave with noise and an occasional spike, so the judge does real work and alerts would fire.
    rng = random.Random(minute * 7919 + int(phase * 1000))
    spike = 25.0 if rng.random() < 0.002 else 0.0
    return 50 + 10 * math.sin(2 * math.pi * minute / 1440 + phase) + rng.gauss(0, 1) + spike


def stream_values(index: int, count: int) -> list[float]:
    """Monitor ``index``'s per-second values: an hourly drift, noise, rare spikes. The seeding process and the
    load generator both call this, so the load continues each monitor's own history."""
    rng = random.Random(index)
    phase = 2 * math.pi * rng.random()
    return [50 + 10 * math.sin(2 * math.pi * k / 3600 + phase) + rng.gauss(0, 1)
            + (25.0 if rng.random() < 0.002 else 0.0) for k in range(count)]


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


def create_monitor(client: Client, name: str, frequency: str = "Minutes") -> str:
    status, body, _ = client.call("POST", "/monitors", {"name": name, "data_frequency": frequency})
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


# ---------------------------------------------------------------------------------------------- load generator

def _request_bytes(host: str, port: int, path: str, key: str, body: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    length, close = 0, False
    for line in lines[1:]:
        name, _, field = line.partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(field.strip())
        elif name == "connection" and field.strip().lower() == "close":
            close = True
    return status, await reader.readexactly(length), close


async def _drive(spec: dict, key: str) -> dict:
    """Open loop: job (monitor i, second t) is due at begin + t + i / monitors, so each monitor sends once a second,
    the monitors spread evenly over the second. A connection takes the next due job as soon as it is free; a job
    taken after its due time is counted late (the load was not offered on time), so the generator's own lag shows."""
    host, port = spec["url"].removeprefix("http://").split(":")
    port_number = int(port)
    ids, seconds, history = spec["ids"], spec["seconds"], spec["history"]
    monitors = len(ids)
    stamps = [stamp_seconds(history + t) for t in range(seconds)]
    jobs: list[tuple[float, int, bytes]] = []
    for i, monitor_id in enumerate(ids):
        values = stream_values(i, history + seconds)[history:]
        path = f"/monitors/{monitor_id}/points"
        for t in range(seconds):
            body = json.dumps({"timestamps": [stamps[t]], "values": [values[t]]}, separators=(",", ":")).encode()
            jobs.append((t + i / monitors, i, _request_bytes(host, port_number, path, key, body)))
    jobs.sort(key=lambda job: job[0])

    loop = asyncio.get_running_loop()
    connections = [await asyncio.open_connection(host, port_number) for _ in range(spec["connections"])]
    begin = loop.time() + 1.0
    deadline = begin + spec["deadline_seconds"]
    next_job = 0
    latencies: list[float] = []
    from_due: list[float] = []
    lateness: list[float] = []
    answered_at: list[float] = []
    acked = [0] * monitors
    errors: list[str] = []
    reconnects = 0

    async def worker(slot: int) -> None:
        nonlocal next_job, reconnects
        reader, writer = connections[slot]
        while next_job < len(jobs) and loop.time() < deadline:
            offset, index, request = jobs[next_job]
            next_job += 1
            due = begin + offset
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            sent = loop.time()
            lateness.append(max(0.0, sent - due))
            try:
                writer.write(request)
                status, body, close = await _read_response(reader)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}"[:200])
                writer.close()
                reader, writer = await asyncio.open_connection(host, port_number)
                reconnects += 1
                continue
            done = loop.time()
            ok = False
            if status == 200:
                try:
                    ok = json.loads(body).get("new_points") == 1
                except ValueError:
                    ok = False
            if ok:
                acked[index] += 1
                latencies.append(done - sent)
                from_due.append(done - due)
                answered_at.append(done - begin)
            else:
                errors.append(f"{status} {body[:160].decode(errors='replace')}")
            if close:
                writer.close()
                reader, writer = await asyncio.open_connection(host, port_number)
                reconnects += 1

    before = resource.getrusage(resource.RUSAGE_SELF)
    await asyncio.gather(*(worker(slot) for slot in range(len(connections))))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    # The generator's own CPU while offering the load (not while encoding the requests beforehand).
    cpu = usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime
    buckets = [0] * (int(max(answered_at, default=0)) + 1)
    for moment in answered_at:
        buckets[int(moment)] += 1
    whole = buckets[1:-1] or buckets  # full seconds only: the first and last are partly empty by design
    return {
        "scheduled": len(jobs), "sent": next_job, "ok": len(latencies), "errors": len(errors),
        "error_samples": sorted(set(errors))[:5], "reconnects": reconnects, "acked": acked,
        "p50": c.percentile(latencies, 50), "p90": c.percentile(latencies, 90), "p99": c.percentile(latencies, 99),
        "max": max(latencies, default=float("nan")), "from_due_p99": c.percentile(from_due, 99),
        "late_50ms": sum(1 for late in lateness if late > 0.05), "late_p99": c.percentile(lateness, 99),
        "first_answer": min(answered_at, default=float("nan")), "last_answer": max(answered_at, default=float("nan")),
        "last_due": jobs[-1][0], "bucket_min": min(whole, default=0), "bucket_median": c.median(whole),
        "loadgen_cores": cpu / max(1e-9, loop.time() - begin + 1.0),
    }


def loadgen_main() -> None:
    spec = json.loads(sys.stdin.read())
    result = asyncio.run(_drive(spec, os.environ[KEY_ENV]))
    print(json.dumps(result))


# ---------------------------------------------------------------------------------------------- steady load

def _parallel(url: str, key: str, count: int, work: Callable[[Client, int], T], threads: int = 8) -> list[T]:
    """work(client, i) for i in range(count) on a few keep-alive clients: set-up and checks, not measured."""
    local = threading.local()

    def run(i: int) -> T:
        if getattr(local, "client", None) is None:
            local.client = Client(url, key)
        return work(local.client, i)

    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(run, range(count)))


def steady_load(server: c.Gunicorn, key: str, monitors: int, seconds: int, history: int) -> dict:
    seed_started = time.monotonic()

    def set_up(client: Client, i: int) -> str:
        monitor_id = create_monitor(client, f"load-{i}", "Seconds")
        values = stream_values(i, history)
        status, body, _ = client.call("POST", f"/monitors/{monitor_id}/points", {
            "timestamps": [stamp_seconds(k) for k in range(history)], "values": values})
        if status != 200:
            raise RuntimeError(f"seed: {status} {body}")
        return monitor_id

    ids = _parallel(server.url, key, monitors, set_up)
    seed_seconds = time.monotonic() - seed_started
    spec = {"url": server.url, "ids": ids, "seconds": seconds, "history": history, "connections": LOAD_CONNECTIONS,
            # A server that cannot keep up is given half as long again, then the rest is reported as not sent.
            "deadline_seconds": seconds * 1.5 + 5}
    load_before = os.getloadavg()[0]
    cpu_before = c.tree_cpu_seconds(server.process.pid)
    web_before = server.worker_cpu_seconds()
    generator = subprocess.run([c.PYTHON, str(Path(__file__).resolve()), "--loadgen"], input=json.dumps(spec),
                               capture_output=True, text=True, timeout=seconds * 3 + 300, cwd=c.ROOT,
                               env={**c.base_env(), KEY_ENV: key})
    if generator.returncode != 0:
        raise RuntimeError(f"load generator failed ({generator.returncode}):\n{generator.stderr[-3000:]}")
    result = json.loads(generator.stdout.strip().splitlines()[-1])
    server_cpu = c.tree_cpu_seconds(server.process.pid) - cpu_before
    web_cpu = server.worker_cpu_seconds() - web_before

    def stored(client: Client, i: int) -> int:
        status, body, _ = client.call("GET", f"/monitors/{ids[i]}?points=0")
        return body["point_count"] if status == 200 else -1

    counts = _parallel(server.url, key, monitors, stored)
    acked = result.pop("acked")
    result["lost"] = sum(max(0, history + a - n) for a, n in zip(acked, counts, strict=True))
    # Stored but not acknowledged: a request the client gave up on after the server committed it.
    result["extra"] = sum(max(0, n - history - a) for a, n in zip(acked, counts, strict=True))
    result["unreadable"] = sum(1 for n in counts if n < 0)
    span = result["last_answer"] - result["first_answer"]
    result["sustained"] = (result["ok"] - 1) / span if span > 0 else 0.0
    result["backlog_end"] = result["last_answer"] - result["last_due"]
    result["server_cpu_ms_per_point"] = server_cpu / max(1, result["ok"]) * 1000
    result["server_cores"] = server_cpu / max(1e-9, result["last_answer"])
    # The web process alone: one Python process, so one core at most (the GIL) for what it does itself.
    result["web_cores"] = web_cpu / max(1e-9, result["last_answer"])
    result["web_cpu_ms_per_point"] = web_cpu / max(1, result["ok"]) * 1000
    result.update(monitors=monitors, seconds=seconds, history=history, seed_seconds=seed_seconds,
                  load_before=load_before, load_after=os.getloadavg()[0])
    return result


def load_met(load: dict) -> bool:
    """Every offered point answered on time and stored: no error, no loss, p99 within the target, and the answers
    kept pace (the last one within a second of the last point's due time, so the rate equals the offered one)."""
    return (load["ok"] == load["scheduled"] and load["errors"] == 0 and load["lost"] == 0
            and load["p99"] <= TARGET_P99 and load["backlog_end"] <= 1.0
            and load["monitors"] >= TARGET_RATE)


# ---------------------------------------------------------------------------------------------- receiver outage

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


# ---------------------------------------------------------------------------------------------- one code base

def run_code(args: argparse.Namespace, app_root: Path | None, label: str, outage: bool) -> dict:
    """Cases 1-3 (and 4 when ``outage``) against one code base, on its own fresh database and gunicorn."""
    single_requests = 100 if args.quick else 400
    batch_requests = 30 if args.quick else 100
    seconds = 30 if args.quick else 60
    out: dict = {"label": label, "load_start": os.getloadavg()[0]}
    with c.temp_dir("bench-monitors-") as tmp, c.database(args.database, tmp, app_root) as url:
        key = c.create_key(url, "read,write,delete", app_root)
        # The default deployment, as `make run` starts it: one gunicorn process (gthread), FORECAST_WORKERS = cores;
        # or, with --web-processes, that many gunicorn processes sharing their rate limits in Redis.
        # ALLOW_PRIVATE_WEBHOOKS lets the outage case's receiver live on loopback; nothing else changes.
        scaled: dict[str, str] = {}
        if args.web_processes > 1:
            metrics_dir = tmp / "metrics"
            metrics_dir.mkdir()
            scaled = {"WEB_CONCURRENCY": str(args.web_processes), "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
        with c.gunicorn(url, tmp, name=f"monitors-{label.split()[0]}", workers=os.cpu_count() or 1,
                        app_root=app_root, redis_url=args.redis, ALLOW_PRIVATE_WEBHOOKS="1", **scaled) as server:
            client = Client(server.url, key)
            single_id = create_monitor(client, "single")
            seed(client, single_id, 4000)
            out["single"] = append_latency(client, single_id, 4000, 1, single_requests, warmup=20)
            batch_id = create_monitor(client, "batch")
            seed(client, batch_id, 4000)
            out["batch"] = append_latency(client, batch_id, 4000, 100, batch_requests, warmup=5)
            print(json.dumps({"code": label, "single_p50": c.percentile(out["single"], 50),
                              "batch_p50": c.percentile(out["batch"], 50)}), flush=True)
            out["load"] = steady_load(server, key, args.monitors, seconds, args.history)
            print(json.dumps({"code": label, **out["load"]}), flush=True)
            if outage:
                out["outage"] = receiver_outage(server.url, key, 10.0 if args.quick else 120.0)
    return out


def state_note(history: int, seconds: int, monitors: int) -> str:
    """What the web process keeps per monitor with this code (its detector state), against the cache bound: a
    state that falls out of the cache is rebuilt from stored points on the next append."""
    try:
        if str(c.APP_ROOT) not in sys.path:
            sys.path.insert(0, str(c.APP_ROOT))
        import inspect

        from app.compute.detect.streaming import WINDOW_ROWS, StreamingDetector
        from app.monitors.state.cache import HistoryCache

        bound = inspect.signature(HistoryCache.__init__).parameters["max_points"].default
        detector = StreamingDetector(data_frequency="Seconds")
        sizes = {}
        for rows in (history + seconds, WINDOW_ROWS + history):
            state = detector.initial_state()
            detector.update(state, [float(k) for k in range(rows)], stream_values(0, rows))
            sizes[rows] = StreamingDetector.size(state)
    except Exception as exc:  # noqa: BLE001 - a note, not a measurement: say why it is missing
        return f"detector state size: not computed ({type(exc).__name__}: {exc})"
    (now_rows, now), (full_rows, full) = sizes.items()
    return (f"this code's per-monitor detector state (one-second data, period 60 rows): {now:,} numbers after "
            f"{now_rows} rows, {full:,} once its error window is full ({full_rows} rows); the web process's state "
            f"cache holds {bound:,} numbers, so {bound // now:,} monitors' states fit now and {bound // full:,} "
            f"with full windows ({monitors:,} here; a state evicted is rebuilt from stored points on the next append)")


# ---------------------------------------------------------------------------------------------- report

def _ms(seconds: float) -> str:
    return c.fmt_ms(seconds, 1)


def _latency_cell(latencies: list[float]) -> str:
    return f"p50 {_ms(c.percentile(latencies, 50))} / p99 {_ms(c.percentile(latencies, 99))} ms"


def _load_cell(load: dict) -> str:
    return (f"p50 {_ms(load['p50'])} / p99 {_ms(load['p99'])} ms; sustained {load['sustained']:.0f} points/s of "
            f"{load['monitors']} offered ({load['ok']:,} of {load['scheduled']:,} answered, "
            f"{load['scheduled'] - load['sent']:,} not sent by the deadline); errors {load['errors']}; "
            f"lost {load['lost']}")


def write_report(args: argparse.Namespace, ours: dict, reference: dict | None, notes_extra: list[str]) -> None:
    single_p50 = c.percentile(ours["single"], 50)
    batch_p50 = c.percentile(ours["batch"], 50)
    load = ours["load"]
    ref_or = (lambda f: f(reference) if reference else "not run")  # noqa: E731
    rows = [
        ["1. append 1 point to a monitor holding 4,000", _latency_cell(ours["single"]),
         ref_or(lambda r: _latency_cell(r["single"])), "p50 <= 25 ms", "met" if single_p50 <= 0.025 else "MISSED"],
        ["2. append a batch of 100 to a monitor holding 4,000", _latency_cell(ours["batch"]),
         ref_or(lambda r: _latency_cell(r["batch"])), "p50 <= 150 ms", "met" if batch_p50 <= 0.150 else "MISSED"],
        [f"3. {load['monitors']:,} monitors x 1 point/s for {load['seconds']} s (history {load['history']} points "
         "each)", _load_cell(load), ref_or(lambda r: _load_cell(r["load"])),
         f">= {TARGET_RATE:,.0f} points/s sustained, p99 <= {TARGET_P99 * 1000:.0f} ms, no error, no lost point",
         "met" if load_met(load) else "MISSED"],
    ]
    if "outage" in ours:
        outage = ours["outage"]
        rows.append([
            f"4. receiver down {outage['outage_seconds']:.0f} s (connection refused), then back: {outage['events']} "
            "alert events from 5 monitors",
            f"{outage['received']} received, in order: {outage['in_order']}; drained {outage['drained_seconds']:.1f} "
            f"s after the return; {outage['repeats']} repeats", "not run", "every event, in order per monitor",
            "met" if outage["received"] == outage["events"] and outage["in_order"] else "MISSED"])

    detail_header = ["code", "offered/s", "sent", "answered ok", "errors", "lost", "stored unacked", "p50 ms",
                     "p90 ms", "p99 ms", "max ms", "p99 from due time ms", "sent >50 ms late", "answers/s: min, median "
                     "over whole seconds", "last answer after last due (s)", "server CPU ms/point (web process)",
                     "server cores busy (web process)", "load generator cores", "1-min load before/after",
                     "seeding (s)"]

    def detail(run: dict) -> list[object]:
        ld = run["load"]
        return [run["label"], ld["monitors"], f"{ld['sent']:,}", f"{ld['ok']:,}", ld["errors"], ld["lost"],
                ld["extra"], _ms(ld["p50"]), _ms(ld["p90"]), _ms(ld["p99"]), _ms(ld["max"]), _ms(ld["from_due_p99"]),
                ld["late_50ms"], f"{ld['bucket_min']}, {ld['bucket_median']:.0f}", f"{ld['backlog_end']:.2f}",
                f"{ld['server_cpu_ms_per_point']:.2f} ({ld['web_cpu_ms_per_point']:.2f})",
                f"{ld['server_cores']:.2f} ({ld['web_cores']:.2f})", f"{ld['loadgen_cores']:.2f}",
                f"{ld['load_before']:.2f}/{ld['load_after']:.2f}", f"{ld['seed_seconds']:.0f}"]

    detail_rows = [detail(ours)] + ([detail(reference)] if reference else [])
    error_notes = [f"errors ({run['label']}): {run['load']['error_samples']}" for run in [ours, reference]
                   if run and run["load"]["errors"]]
    processes = ("gunicorn.conf.py defaults (1 worker process, gthread, 32 threads)" if args.web_processes == 1
                 else f"{args.web_processes} gunicorn worker processes (WEB_CONCURRENCY), gthread, 32 threads each")
    notes = [
        f"Database: {args.database}. Each code base on its own fresh database and gunicorn with {processes}, "
        f"FORECAST_WORKERS = cores ({os.cpu_count()}); "
        + (f"rate limits in Redis ({args.redis})" if args.redis else "memory rate-limit storage")
        + "; a key with limits of 10,000,000. This code: the working tree, snapshotted; reference: "
        + (f"commit {args.reference} from a git worktree, same venv" if reference else "not run") + ".",
        "End to end: HTTP/1.1 keep-alive on loopback, from sending the request to reading the whole answer, which "
        "includes the verdicts of the new points and the commit of points and alert events. Cases 1 and 2: one "
        "client, sequential, one point a minute (daily wave, noise, rare spikes), after uncounted warm-up requests.",
        f"Case 3: {args.monitors:,} monitors (data_frequency Seconds), each first given {args.history} points in one "
        "batch (past the detector's warm-up), then each sent one point a second, the monitors spread evenly over "
        f"the second (offered: {args.monitors:,} points/s), from a separate load-generator process: asyncio, "
        f"{LOAD_CONNECTIONS} keep-alive connections, every request encoded before the clock starts; a connection "
        "takes the next due point when free, so points sent late show the generator's (or the server's) lag. "
        "Latency percentiles are of answered appends, from send to answer; 'from due time' adds the wait for a "
        "free connection. Sustained = answered points / time from first to last answer. A server that falls "
        "behind gets half as long again, then the rest is not sent. Afterwards every monitor's stored point "
        "count is read: lost = acknowledged but not stored.",
        "Met (case 3) means every offered point answered with 200 and stored, p99 within the target, and the "
        "answers keeping pace (the last answer within 1 s of the last point's due time).",
        "Server CPU: user + system time of gunicorn's whole process tree (web process and worker pool) during "
        "the load, per answered point; server cores busy = that CPU over the run's length; in brackets the web "
        "process" + ("es" if args.web_processes > 1 else "") + " alone; one Python process does its own work on "
        "one core at most (the GIL), so 1,000 ms / its CPU per point bounds the points/s one process can answer. "
        "The load generator runs on the same 2 cores.",
        *notes_extra,
        *error_notes,
        f"1-min load average when each code base's cases started: this code {ours['load_start']:.2f}"
        + (f", reference {reference['load_start']:.2f}" if reference else "")
        + " (2 cores shared with other engineers' test runs).",
    ]
    if "outage" in ours:
        notes.append("Case 4: default retry policy (exponential backoff from 1 s, waits capped at 60 s, give up "
                     "after an hour); points with spikes keep arriving during the outage, so events queue behind "
                     "each monitor's oldest undelivered one; the receiver acknowledges everything once back. "
                     "Repeats (the same event id twice) are allowed by at-least-once delivery and counted.")
    detail_table = ["## Case 3 in detail", "", "| " + " | ".join(detail_header) + " |",
                    "|" + "---|" * len(detail_header)]
    detail_table += ["| " + " | ".join(str(v) for v in row) + " |" for row in detail_rows]
    c.write_table(args.name, "Monitor point appends", notes,
                  ["case", "this code", f"reference ({args.reference})" if reference else "reference", "target",
                   "met? (this code)"], rows, extra="\n".join(detail_table))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--monitors", type=int, default=1000)
    parser.add_argument("--history", type=int, default=300)
    parser.add_argument("--reference", default=REFERENCE, help="commit to measure beside this code")
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--web-processes", type=int, default=1,
                        help="gunicorn processes (WEB_CONCURRENCY); more than 1 needs --redis")
    parser.add_argument("--redis", default=None, help="REDIS_URL for the rate limits (a database the run may flush)")
    parser.add_argument("--name", default="monitors", help="the table goes to bench/results/<name>.md")
    parser.add_argument("--loadgen", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.web_processes > 1 and not args.redis:
        parser.error("--web-processes above 1 needs --redis (the service refuses to start without it)")
    if args.loadgen:
        loadgen_main()
        return
    with c.code_snapshot() as code_line:
        c.CODE_LINE = code_line
        ours = run_code(args, None, "this code", outage=True)
        notes_extra = [state_note(args.history, 30 if args.quick else 60, args.monitors)]
        reference = None
        if not args.no_reference:
            with c.git_worktree(args.reference, prefix="bench-monitors-ref-") as tree:
                reference = run_code(args, tree, f"reference {args.reference}", outage=False)
    write_report(args, ours, reference, notes_extra)


if __name__ == "__main__":
    main()
