"""Points for many monitors per request (issue 45): Prometheus remote write and POST /monitors/points, through a real
gunicorn, with the embedded default (SQLite, one process) and with PostgreSQL + Redis (two processes).

    python bench/remote_write.py [--quick] [--database sqlite|postgres|both]

For each database, MONITORS pushed monitors (each with a remote_write_selector on its own series) take four loads
in turn, each for DURATION seconds from 2 client threads (each owning half the series, so no two requests wait on
one series), bodies encoded before the clock starts:
  bulk, 20 points/series   POST /monitors/points, each body 20 consecutive seconds of 100 monitors (2,000 points)
  remote write, 20 points  POST /api/v1/write, the same points as Prometheus sends them (one TimeSeries entry per
                           sample, snappy block format)
  bulk, 1 point/series     one second of each of the client's 500 monitors per body: a fleet at its scrape
  remote write, 1 point    the same by remote write
then ONE monitor whose selector matches FLEET_SERIES series takes the two 1-point loads (each series a series of
that monitor; bulk rows name theirs with "labels"), after a history of HISTORY_POINTS points a series (bulk, 20 a
request) so every series' state is past its first, costlier rows, as a fleet's is.
Figures: points stored and judged per second (counted by the server's answers), request p50/p99, errors, lost
points (every series' count checked against what was sent, after each load), and the web processes' CPU per
point stored (gunicorn's workers, user + system, over the load), beside the detector's own cost per row measured
in this process in the same run. Meanwhile one client appends a single point to its own monitor every 100 ms
(POST /monitors/{id}/points): its p99.
The reference commit (REFERENCE, or --reference; a git worktree, its detector compiled) takes the same loads in the
same invocation, right after this code on each database, with fresh databases and servers of its own: a figure
beside it compares the code, not the hour. Writes bench/results/remote-write.md.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import http.client  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from urllib.parse import urlsplit  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402

sys.path.insert(0, str(c.APP_ROOT))  # the generated remote-write messages, from the code under test

START = datetime(2026, 1, 1, tzinfo=UTC)
START_MS = int(START.timestamp() * 1000)
CLIENTS = 2
TARGET_RATE = 20_000
TARGET_P99 = 1.0
TARGET_SINGLE_P99 = 0.050
# Points per request, for bulk bodies too: Prometheus' queue_config max_samples_per_send (2.42, Debian 12's,
# defaults to 500 and sends smaller requests; 2,000 is what later versions default to).
BODY_POINTS = 2_000
FLEET_SERIES = 2_000
HISTORY_POINTS = 300
# The commit measured beside this code: main before the detector took a stream's second week's turns (the intake's
# code is the same, so a difference between the two is the detector's or the run's).
REFERENCE = "f29ce7a"


def stamp(second: int) -> str:
    return (START + timedelta(seconds=second)).strftime("%Y-%m-%dT%H:%M:%SZ")


def value(monitor: int, second: int) -> float:
    rng = random.Random(monitor * 100_003 + second)
    return 50 + 10 * math.sin(2 * math.pi * second / 3600 + monitor) + rng.gauss(0, 1)


class Conn:
    def __init__(self, url: str, key: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.auth = f"Bearer {key}"
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        all_headers = {"Authorization": self.auth, **(headers or {})}
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=body, headers=all_headers)
                response = self.conn.getresponse()
                return response.status, dict(response.getheaders()), response.read()
            except (http.client.HTTPException, OSError):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, payload: object | None = None) -> tuple[int, object]:
        body = None if payload is None else json.dumps(payload).encode()
        status, _, data = self.request(method, path, body, {"Content-Type": "application/json"})
        return status, json.loads(data) if data else None


# A series of the load: (its number, its monitor's id, the metric its remote-written samples have, whether bulk rows
# name it with labels: the fleet monitor's series).
Series = tuple[int, str, str, bool]


def labels_of(series: Series) -> dict[str, str]:
    return {"__name__": series[2], "instance": f"host-{series[0]}", "job": "bench"}


def bulk_body(group: list[Series], first_second: int, points: int) -> tuple[bytes, int]:
    rows = []
    for s in range(first_second, first_second + points):
        for one in group:
            row: dict[str, object] = {"monitor_id": one[1], "timestamp": stamp(s), "value": value(one[0], s)}
            if one[3]:
                row["labels"] = labels_of(one)
            rows.append(row)
    return json.dumps({"points": rows}).encode(), len(rows)


def remote_write_body(group: list[Series], first_second: int, points: int) -> tuple[bytes, int]:
    import cramjam

    from app.monitors.intake.prompb.remote_pb2 import WriteRequest

    request = WriteRequest()
    for s in range(first_second, first_second + points):
        for one in group:
            series = request.timeseries.add()  # one entry per sample, as Prometheus sends them
            for name, label in sorted(labels_of(one).items()):
                entry = series.labels.add()
                entry.name, entry.value = name, label
            sample = series.samples.add()
            sample.timestamp, sample.value = START_MS + s * 1000, value(one[0], s)
    return bytes(cramjam.snappy.compress_raw(request.SerializeToString())), points * len(group)


@dataclass
class LoadResult:
    sent_points: int = 0
    stored: int = 0
    latencies: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    seconds: float = 0.0
    web_cpu: float = 0.0
    busiest_share: float = 1.0  # the busiest web process's part of web_cpu
    restarted: bool = False  # a web process was replaced during the load (its cached states went with it)


def run_load(server: c.Gunicorn, key: str, shares: list[list[Series]], next_second: dict[Series, int],
             sent: dict[Series, int], *, kind: str, points: int, duration: float, single: SingleProbe | None,
             assumed_rate: float | None = None) -> LoadResult:
    """Each client sends its pre-encoded bodies back to back until they run out or ``duration`` passes. A body
    holds at most BODY_POINTS points: a client's series are taken in groups that fit, in turn."""
    url = server.url
    group_size = max(1, min(len(shares[0]), BODY_POINTS // points))
    # Enough bodies to outlast the duration at a rate above what this machine reaches (a load that runs out early
    # is measured over its shorter wall time); never encoded on the clock. One point a series has reached 13,500.
    assumed_rate = assumed_rate or (30_000 if points > 1 else 16_000)
    bodies_per_client = max(2, math.ceil(duration * assumed_rate / CLIENTS / (points * group_size)))
    encode = bulk_body if kind == "bulk" else remote_write_body
    prepared: list[list[tuple[bytes, int, list[Series], int]]] = []
    for share in shares:
        groups = [share[g:g + group_size] for g in range(0, len(share), group_size)]
        planned = {one: next_second[one] for one in share}
        bodies = []
        for b in range(bodies_per_client):
            group = groups[b % len(groups)]
            # The group's series may have got different numbers of points in the previous load: go on after
            # the furthest (a hole is accepted; lost points are counted from what was sent, not from seconds).
            first = max(planned[one] for one in group)
            data, count = encode(group, first, points)
            for one in group:
                planned[one] = first + points
            bodies.append((data, count, group, first))
        prepared.append(bodies)
    result = LoadResult()
    lock = threading.Lock()
    deadline = time.monotonic() + duration
    path = "/monitors/points" if kind == "bulk" else "/api/v1/write"
    headers = ({"Content-Type": "application/json"} if kind == "bulk" else
               {"Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
                "X-Prometheus-Remote-Write-Version": "0.1.0"})

    def client(index: int) -> None:
        conn = Conn(url, key)
        for data, count, group, first in prepared[index]:
            if time.monotonic() >= deadline:
                break
            started = time.perf_counter()
            status, response_headers, body = conn.request("POST", path, data, headers)
            elapsed = time.perf_counter() - started
            with lock:
                result.latencies.append(elapsed)
                result.sent_points += count
                for one in group:
                    next_second[one] = first + points
                    sent[one] += points
                if kind == "bulk" and status == 200:
                    result.stored += json.loads(body)["stored_points"]
                elif kind != "bulk" and status == 204:
                    result.stored += int(response_headers.get("X-Samples-Stored", "0"))
                else:
                    result.errors.append(f"{status}: {body[:200]!r}")

    if single is not None:
        single.start()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(CLIENTS)]
    pids = server.worker_pids()
    cpu0 = [c.process_cpu_seconds(pid) for pid in pids]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result.seconds = time.perf_counter() - started
    result.restarted = sorted(server.worker_pids()) != sorted(pids)
    used = [c.process_cpu_seconds(pid) - before for pid, before in zip(pids, cpu0, strict=True)]
    result.web_cpu = sum(used)
    result.busiest_share = max(used) / result.web_cpu if result.web_cpu > 0 else 1.0
    if single is not None:
        single.stop()
    return result


class SingleProbe:
    """One client appending one point to its own pushed monitor every 100 ms: the latency a pushed append sees
    while the loads run."""

    def __init__(self, url: str, key: str, monitor_id: str) -> None:
        self.conn = Conn(url, key)
        self.monitor_id = monitor_id
        self.second = 0
        self.latencies: list[float] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            payload = {"timestamps": [stamp(self.second)], "values": [value(-1, self.second)]}
            self.second += 1
            started = time.perf_counter()
            status, _ = self.conn.json("POST", f"/monitors/{self.monitor_id}/points", payload)
            self.latencies.append(time.perf_counter() - started)
            if status != 200:
                self.errors += 1


def point_counts(url: str, key: str, fleet_id: str | None) -> tuple[dict[str, int], dict[int, int]]:
    """Every monitor's point_count by id, and the fleet monitor's series' by their host number."""
    conn = Conn(url, key)
    counts: dict[str, int] = {}
    after = ""
    while True:
        status, body = conn.json("GET", f"/monitors?limit=1000{'&after=' + after if after else ''}")
        assert status == 200, body
        for monitor in body["monitors"]:  # type: ignore[index]
            counts[monitor["id"]] = monitor["point_count"]
        after = body["next_after"]  # type: ignore[index]
        if not after:
            break
    in_fleet: dict[int, int] = {}
    after = "0"
    while fleet_id is not None and after:
        status, body = conn.json("GET", f"/monitors/{fleet_id}/series?limit=1000&after={after}")
        assert status == 200, body
        for one in body["series"]:  # type: ignore[index]
            in_fleet[int(one["labels"]["instance"].removeprefix("host-"))] = one["point_count"]
        after = str(body["next_after"] or "")  # type: ignore[index]
    return counts, in_fleet


def server_counts(url: str, key: str) -> Counter[str]:
    """From /metrics: stored points the web processes judged a second time ("rejudged": a cached state brought up to
    date over points another process stored, or rebuilt), and remote-written samples by outcome."""
    status, _, body = Conn(url, key).request("GET", "/metrics")
    assert status == 200, body[:200]
    counts: Counter[str] = Counter()
    for line in body.decode().splitlines():
        if line.startswith("forecast_monitor_points_rejudged_total{"):
            points = float(line.rsplit(" ", 1)[1])
            counts["rejudged"] += points
            if 'reason="rebuild"' in line:
                counts["rebuilt"] += points
        elif line.startswith('forecast_remote_write_samples_total{outcome="'):
            counts[line.split('"')[1]] += float(line.rsplit(" ", 1)[1])
    return counts


def detector_us_per_row(rows: int = 3000) -> float:
    """The default detector alone, one row per call on a state past its first rows (this process, this run)."""
    from app.compute.detect.streaming import StreamingDetector

    detector = StreamingDetector(data_frequency="Seconds", confidence=None, false_alarms_per_week=None,
                                 floor=(0.0, 0.0))
    state = detector.initial_state()
    for s in range(1000):
        detector.update(state, [float(s)], [value(0, s)])
    began = time.process_time()
    for s in range(1000, 1000 + rows):
        detector.update(state, [float(s)], [value(0, s)])
    return (time.process_time() - began) / rows * 1e6


def bench_database(kind: str, *, monitors: int, fleet_series: int, duration: float, code: str,
                   app_root: Path | None = None) -> list[list[object]]:
    """The loads on one database, run by the checkout at ``app_root`` (this code if None), named ``code``."""
    rows: list[list[object]] = []
    deployment = ("SQLite, 1 process" if kind == "sqlite" else "PostgreSQL + Redis, 2 processes") + f", {code}"
    with c.temp_dir("bench-rw-") as tmp, c.database(kind, tmp, app_root) as database_url:
        key = c.create_key(database_url, "read,write,admin", app_root)
        # One /metrics for every web process: what the processes judged again is read after each load.
        metrics_dir = tmp / "metrics"
        metrics_dir.mkdir()
        extra = {"PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
        redis_url = None
        if kind == "postgres":
            c.flush_redis()
            redis_url = c.REDIS_URL
            extra["WEB_CONCURRENCY"] = "2"
        with c.gunicorn(database_url, tmp, redis_url=redis_url, workers=1, app_root=app_root, **extra) as server:
            conn = Conn(server.url, key)
            ids: list[Series] = []
            for i in range(monitors):
                status, body = conn.json("POST", "/monitors", {
                    "name": f"host {i}", "data_frequency": "Seconds",
                    "remote_write_selector": f'bench_load{{instance="host-{i}"}}'})
                assert status == 201, body
                ids.append((i, body["id"], "bench_load", False))  # type: ignore[index]
            status, body = conn.json("POST", "/monitors", {"name": "single", "data_frequency": "Seconds"})
            assert status == 201, body
            single = SingleProbe(server.url, key, body["id"])  # type: ignore[index]
            status, body = conn.json("POST", "/monitors", {"name": "fleet", "data_frequency": "Seconds",
                                                           "remote_write_selector": 'bench_fleet{job="bench"}'})
            assert status == 201, body
            fleet_id = body["id"]  # type: ignore[index]
            fleet = [(i, fleet_id, "bench_fleet", True) for i in range(fleet_series)]
            next_second = {one: 0 for one in ids + fleet}
            sent = {one: 0 for one in ids + fleet}

            def measure(name: str, layout: list[Series], load: str, points: int, *, probe: bool = True) -> None:
                shares = [layout[k::CLIENTS] for k in range(CLIENTS)]
                single.latencies.clear()
                counts_before = server_counts(server.url, key)
                result = run_load(server, key, shares, next_second, sent, kind="bulk" if load == "bulk" else "rw",
                                  points=points, duration=duration, single=single if probe else None)
                counts, in_fleet = point_counts(server.url, key, fleet_id)
                held = {one: (in_fleet.get(one[0], 0) if one[3] else counts[one[1]]) for one in layout}
                lost = sum(max(0, sent[one] - held[one]) for one in layout)
                extra_points = sum(max(0, held[one] - sent[one]) for one in layout)
                counted = server_counts(server.url, key)
                counted.subtract(counts_before)
                # Samples the server answered as dropped, by outcome (stored and duplicate ones count as stored).
                dropped = {k: int(v) for k, v in counted.items()
                           if k not in ("rejudged", "rebuilt", "stored", "duplicate") and v}
                rate = result.stored / result.seconds if result.seconds else 0.0
                lat = result.latencies
                rows.append([
                    deployment, f"{name}: {load}, {points} point{'s' if points > 1 else ''}/series/request",
                    f"{len(lat)}", f"{result.seconds:.1f}", f"{result.stored:,}", f"{rate:,.0f}",
                    c.fmt_ms(c.percentile(lat, 50)) if lat else "-", c.fmt_ms(c.percentile(lat, 99)) if lat else "-",
                    str(len(result.errors)), f"{lost}" + (f" (+{extra_points} extra)" if extra_points else "")
                    + (" (dropped: " + ", ".join(f"{k} {v:,}" for k, v in sorted(dropped.items())) + ")"
                       if dropped else ""),
                    c.fmt_ms(c.percentile(single.latencies, 99)) if single.latencies else "-",
                    f"{result.web_cpu / result.stored * 1e6:.0f}" if result.stored else "-",
                    f"{counted['rejudged']:,.0f}"
                    + (f" ({counted['rebuilt']:,.0f} rebuilt)" if counted["rebuilt"] else "")
                    + (" (a web process restarted)" if result.restarted else ""),
                    f"{result.busiest_share:.0%}",
                ])
                print(rows[-1], result.errors[:3], flush=True)

            for load, points in (("bulk", 20), ("remote write", 20), ("bulk", 1), ("remote write", 1)):
                measure(f"{monitors:,} monitors", ids, load, points)
            # The fleet's history first (not measured), then its loads.
            shares = [fleet[k::CLIENTS] for k in range(CLIENTS)]
            while min(next_second[one] for one in fleet) < HISTORY_POINTS:
                run_load(server, key, shares, next_second, sent, kind="bulk", points=20, duration=5.0, single=None,
                         assumed_rate=20_000)
            for load in ("remote write", "bulk"):
                measure(f"1 monitor, {fleet_series:,} series", fleet, load, 1)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--database", choices=("sqlite", "postgres", "both"), default="both")
    parser.add_argument("--monitors", type=int, default=None)
    parser.add_argument("--reference", default=REFERENCE, help="commit to measure beside this code")
    parser.add_argument("--no-reference", action="store_true")
    args = parser.parse_args()
    monitors = args.monitors or (200 if args.quick else 1000)
    fleet_series = 400 if args.quick else FLEET_SERIES
    duration = 8.0 if args.quick else 20.0
    kinds = ("sqlite", "postgres") if args.database == "both" else (args.database,)
    detector_us = detector_us_per_row()
    rows: list[list[object]] = []
    sizes = {"monitors": monitors, "fleet_series": fleet_series, "duration": duration}
    reference = contextlib.nullcontext() if args.no_reference else c.git_worktree(args.reference, "bench-rw-ref-")
    with c.code_snapshot() as code_line, reference as tree:
        c.CODE_LINE = code_line
        for kind in kinds:
            rows += bench_database(kind, **sizes, code="this code")
            if tree is not None:
                rows += bench_database(kind, **sizes, code=f"reference {args.reference}", app_root=tree)
    c.write_table(
        "remote-write",
        "Remote write and bulk points: points stored and judged per second",
        [f"{monitors:,} pushed monitors, each with a remote_write_selector on its own series, then one monitor "
         f"following {fleet_series:,} series (after {HISTORY_POINTS} points of history a series); {CLIENTS} client "
         f"threads on keep-alive connections, each owning half the series; each load {duration:g} s (seconds: its "
         f"wall time, shorter where the prepared bodies ran out); at most {BODY_POINTS:,} points a request; "
         "bodies encoded before the clock starts; `Seconds` data, the default "
         "detector; the loads run in the order listed, each continuing the series' streams.",
         f"web us/point: the gunicorn workers' CPU (user + system) over the load per point stored; the detector "
         f"alone costs {detector_us:.1f} us a row in this run (one row per call, a state past its first rows, "
         "this process).",
         f"Targets (issue 45): >= {TARGET_RATE:,} points/s stored and judged, request p99 <= {TARGET_P99:g} s, "
         f"nothing lost; a single pushed append meanwhile p99 <= {TARGET_SINGLE_P99 * 1000:g} ms.",
         "points/s: points the answers say were stored (new, judged), over the load's wall time.",
         "lost: points sent and answered but not in the monitor's point_count afterwards (with the remote-write "
         "samples the server answered as dropped, by outcome, if any).",
         "single p99: POST /monitors/{id}/points with one point, every 100 ms, to another monitor during the load.",
         "rejudged: stored points the web processes judged a second time during the load, to bring a cached state up "
         "to date over points another process stored, or to rebuild one (forecast_monitor_points_rejudged_total; how "
         "many of them rebuilt states, and whether a web process was replaced during the load, in brackets).",
         "busiest process: the busiest web process's share of the web CPU (with two processes, 50% is an even split; "
         "each client's keep-alive connection stays on the process that accepted it)."],
        ["deployment", "load", "requests", "seconds", "points stored", "points/s", "p50 ms", "p99 ms", "errors", "lost",
         "single p99 ms", "web us/point", "rejudged", "busiest process"],
        rows,
    )


if __name__ == "__main__":
    main()
