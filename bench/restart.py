"""What a restart costs monitors with a long history, through a real gunicorn (SQLite, one process), beside the
reference commit (the code before detector states were saved in the database) in the same run.

    python bench/restart.py [--quick] [--reference COMMIT]

SERIES pushed monitors of 1-minute points (a daily season) are given HISTORY points each (bulk, 2,000 points a
request); then gunicorn is stopped (SIGTERM) and started again on the same database, and one point for every monitor
arrives in one POST /monitors/points. Figures: that first request's time after the restart (the process holds no
detector state: the reference rebuilt each monitor's state from its stored points, this code restores the saved one
and replays the points stored since), the next request's time (states held again), and, measured in this process: a
saved state's size, and encoding and decoding it.

Rebuild: the same with every saved state deleted before the restart (what a release whose detector keeps another
state sees: each series is rebuilt from its stored points), for REBUILD_SERIES monitors of REBUILD_HISTORY points at
each step of REBUILD_STEPS, this code beside REBUILD_REFERENCE (which replayed the longest season's 71,621 points
whatever the step): the first request, and the points replayed a series (/metrics).
Writes bench/results/restart.md.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import sqlite3  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import timeit  # noqa: E402
import urllib.request  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import common as c  # noqa: E402

REFERENCE = "1f6f6ce"  # main before detector states were saved
REBUILD_REFERENCE = "aaacdba"  # main before a rebuild replayed only what the series' step and season need
# Prometheus' default scrape interval, one minute, five minutes: (data_frequency, seconds apart).
REBUILD_STEPS = (("Seconds", 15), ("Minutes", 60), ("Minutes", 300))
REBUILD_HISTORY = 75_000  # more than the 71,621 the reference replays
START = datetime(2026, 1, 1, tzinfo=UTC)
BODY_POINTS = 2_000


def value(series: int, minute: int, noise: random.Random) -> float:
    return 100 + 10 * series + 30 * math.sin(2 * math.pi * minute / 1440) + noise.gauss(0, 2)


def post(url: str, key: str, rows: list[dict[str, object]]) -> float:
    request = urllib.request.Request(url + "/monitors/points", data=json.dumps({"points": rows}).encode(),
                                     headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=3600) as response:
        answer = json.loads(response.read())
    elapsed = time.perf_counter() - started
    assert answer["failed_rows"] == 0, answer
    return elapsed


def rows_at(ids: list[str], row: int, noise: random.Random, step: int = 60) -> list[dict[str, object]]:
    stamp = (START + timedelta(seconds=row * step)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [{"monitor_id": m, "timestamp": stamp, "value": value(i, row * step // 60, noise)}
            for i, m in enumerate(ids)]


def rebuilt_points(url: str, key: str) -> float:
    """Stored points judged again to rebuild states, from /metrics."""
    request = urllib.request.Request(url + "/metrics", headers={"Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(request, timeout=60) as response:
        lines = response.read().decode().splitlines()
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines
               if line.startswith("forecast_monitor_points_rejudged_total{") and 'reason="rebuild"' in line)


def restart_case(label: str, app_root: Path | None, *, series: int, history: int, frequency: str = "Minutes",
                 step: int = 60, refuse_saved: bool = False) -> list[object]:
    """One case's row; ``refuse_saved``: every saved state is deleted before the restart, so each is rebuilt."""
    with c.temp_dir("bench-restart-") as tmp, c.database("sqlite", tmp, app_root) as database_url:
        key = c.create_key(database_url, "read,write,admin", app_root)
        noise = random.Random(7)
        with c.gunicorn(database_url, tmp, workers=1, name="first", app_root=app_root) as server:
            ids = []
            for i in range(series):
                request = urllib.request.Request(
                    server.url + "/monitors", headers={"Authorization": f"Bearer {key}",
                                                       "Content-Type": "application/json"},
                    data=json.dumps({"name": f"m{i}", "data_frequency": frequency,
                                     "retention_points": history + 100}).encode())
                with urllib.request.urlopen(request, timeout=60) as response:
                    ids.append(json.loads(response.read())["id"])
            per_body = max(1, BODY_POINTS // series)
            seeded = time.perf_counter()
            for first in range(0, history, per_body):
                post(server.url, key, [row for index in range(first, min(history, first + per_body))
                                       for row in rows_at(ids, index, noise, step)])
            seeding = time.perf_counter() - seeded
        if refuse_saved:
            with sqlite3.connect(database_url.removeprefix("sqlite:///")) as connection:
                connection.execute("DELETE FROM monitor_snapshots")
        with c.gunicorn(database_url, tmp, workers=1, name="second", app_root=app_root) as server:
            cold = post(server.url, key, rows_at(ids, history, noise, step))
            replayed = rebuilt_points(server.url, key) / series
            warm = post(server.url, key, rows_at(ids, history + 1, noise, step))
    print(label, f"seeding {seeding:.0f} s, first request {cold:.2f} s, next {warm * 1000:.0f} ms", flush=True)
    return [label, f"{series} x {history:,}", f"{replayed:,.0f}", f"{cold:.2f}", f"{cold / series * 1000:,.0f}",
            c.fmt_ms(warm)]


def state_costs(history: int) -> tuple[int, float, float]:
    """(bytes, encode ms, decode ms) of a state after ``history`` 1-minute rows, as the service saves it."""
    sys.path.insert(0, str(c.APP_ROOT))
    from app.compute.detect import snapshot
    from app.compute.detect.streaming import StreamingDetector

    noise = random.Random(7)
    detector = StreamingDetector(data_frequency="Minutes")
    state = detector.initial_state()
    base = START.timestamp()
    detector.update(state, [base + 60 * m for m in range(history)], [value(0, m, noise) for m in range(history)])
    data = snapshot.encode(state)
    encode = min(timeit.repeat(lambda: snapshot.encode(state), number=20, repeat=3)) / 20
    decode = min(timeit.repeat(lambda: snapshot.decode(data), number=20, repeat=3)) / 20
    return len(data), encode * 1000, decode * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reference", default=REFERENCE)
    parser.add_argument("--rebuild-reference", default=REBUILD_REFERENCE)
    args = parser.parse_args()
    series, history = (4, 33_000) if args.quick else (20, 33_000)
    rebuild_series = 2 if args.quick else 4
    rows, rebuilds = [], []
    with c.git_worktree(args.reference) as tree:
        rows.append(restart_case(f"reference ({args.reference}): rebuilt from the stored points", tree,
                                 series=series, history=history))
    rows.append(restart_case("this code: the saved state, then the points stored since", None,
                             series=series, history=history))
    with c.git_worktree(args.rebuild_reference) as tree:
        for frequency, step in REBUILD_STEPS:
            for label, root in ((f"reference ({args.rebuild_reference})", tree), ("this code", None)):
                rebuilds.append([f"{step} s ({frequency})"] + restart_case(
                    label, root, series=rebuild_series, history=REBUILD_HISTORY, frequency=frequency, step=step,
                    refuse_saved=True))
    size, encode_ms, decode_ms = state_costs(history)
    from app.monitors.state.snapshots import SNAPSHOT_ROWS

    notes = [
        f"{series} pushed monitors of 1-minute points (daily season), {history:,} points each, stored through "
        "POST /monitors/points; gunicorn stopped and started again on the same SQLite database; then one point for "
        "every monitor in one POST /monitors/points (first request), and again (next request).",
        f"A saved state after {history:,} rows: {size:,} bytes, encoded in {encode_ms:.2f} ms, decoded in "
        f"{decode_ms:.2f} ms (this process); saved once per {SNAPSHOT_ROWS:,} points of a series: "
        f"{size / SNAPSHOT_ROWS:.0f} bytes and {encode_ms * 1000 / SNAPSHOT_ROWS:.1f} us a point.",
        f"{c.describe_code()}",
    ]
    header = ["code", "series x stored points", "points replayed a series", "first request s", "ms a series",
              "next request ms"]
    rebuild = [
        "## Rebuild: every saved state refused, as after a release whose detector keeps another state", "",
        f"- {rebuild_series} pushed monitors a step, {REBUILD_HISTORY:,} points each (a daily season); every row of "
        "monitor_snapshots deleted while gunicorn was stopped; then one point for every monitor (first request: each "
        "series rebuilt from its stored points), and again (next request).",
        '- points replayed a series: forecast_monitor_points_rejudged_total{reason="rebuild"} (/metrics) after the '
        "first request, over the series.", "",
        "| step | " + " | ".join(header) + " |", "|" + "---|" * (len(header) + 1),
        *("| " + " | ".join(str(cell) for cell in row) + " |" for row in rebuilds),
    ]
    c.write_table("restart", "Restart: the first request after a restart, monitors with a long history", notes,
                  header, rows, extra="\n".join(rebuild))

if __name__ == "__main__":
    main()
