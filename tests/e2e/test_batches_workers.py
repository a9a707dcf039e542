"""Batches on a real gunicorn and real `jobs worker` processes: JSON and CSV batches give what POST /forecast
gives, a failing series among good ones, cancellation, and the two scale-out drills: a worker killed with
SIGKILL in the middle of a batch (two workers, one Redis queue, PostgreSQL), and the whole service restarted
mid-batch (the default embedded queue). Every series' result must come out exactly once."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import create_engine, text

from app.settings import Settings
from tests.support import (
    REDIS_URL,
    JobWorker,
    Server,
    batch_finished,
    batch_status,
    bearer,
    cli_in_process,
    flush_redis,
    missing_service,
    postgres_database,
    redis_available,
    served_with_jobs,
    wait_for,
)

pytestmark = pytest.mark.slow

FIELDS = {"forecast_horizon": 4, "data_frequency": "Daily", "forecast_frequency": "Daily"}
# Small chunks and short leases, so that a drill has many chunks in flight and recovers within seconds.
BASE_ENV = {"FORECAST_WORKERS": "1", "LOG_LEVEL": "WARNING", "BATCH_LEASE_SECONDS": "3", "BATCH_CHUNK_SERIES": "2"}
# The job store of the scale-out drill: this test process's Redis database (from TEST_REDIS_URL, one per xdist
# worker, so two suites given different URLs never share it; the test flushes it).
SCALE_OUT_REDIS = REDIS_URL


def create_key(env: dict[str, str]) -> str:
    out = cli_in_process("keys", "create", "--permissions", "read,write,delete", "--per-minute", "100000",
                         "--per-hour", "1000000", "--per-day", "10000000", "--json", env=env).stdout
    return json.loads(out)["key"]


def series(identifier: str, count: int = 120, seed: int = 0) -> dict[str, Any]:
    start = datetime(2025, 1, 1)
    return {
        "id": identifier,
        "timestamps": [(start + timedelta(days=i)).strftime("%Y-%m-%dT%H:%M:%S") for i in range(count)],
        "values": [20 + seed + 4 * math.sin(2 * math.pi * i / 7) + 0.05 * i * (1 + seed % 3) + math.cos(i * seed)
                   for i in range(count)],
    }


def submit(server: Server, key: str, body: dict[str, Any]) -> str:
    answer = requests.post(f"{server.url}/batches", json=body, headers=bearer(key), timeout=60)
    assert answer.status_code == 202, answer.text
    return answer.json()["id"]


def results(server: Server, key: str, batch_id: str) -> list[dict[str, Any]]:
    with requests.get(f"{server.url}/batches/{batch_id}/results", headers=bearer(key), timeout=60,
                      stream=True) as answer:
        assert answer.status_code == 200, answer.text
        assert answer.headers["Content-Type"].startswith("application/x-ndjson")
        return [json.loads(line) for line in answer.iter_lines() if line]


@pytest.fixture
def sqlite_service(tmp_path: Path) -> Iterator[tuple[Server, JobWorker, str, dict[str, str]]]:
    env = {**BASE_ENV, "DATABASE_URL": f"sqlite:///{tmp_path / 'batches.sqlite3'}"}
    with served_with_jobs(env, tmp_path, processes=2) as (server, worker):
        yield server, worker, create_key(env), env


def test_json_and_csv_batches_give_post_forecast_answers(
    sqlite_service: tuple[Server, JobWorker, str, dict[str, str]],
) -> None:
    server, worker, key, _ = sqlite_service
    good = [series(f"shop-{i}", seed=i) for i in range(5)]
    short = {"id": "short", "timestamps": good[0]["timestamps"][:6], "values": good[0]["values"][:6]}
    body = {"series": [*good[:2], short, *good[2:]], **FIELDS}
    json_id = submit(server, key, body)
    csv_text = "unique_id,timestamp,value\n" + "".join(
        f"{s['id']},{stamp},{value!r}\n" for s in body["series"] for stamp, value in zip(s["timestamps"], s["values"],
                                                                                        strict=True))
    answer = requests.post(f"{server.url}/batches", params=FIELDS, data=csv_text.encode(), timeout=60,
                           headers={**bearer(key), "Content-Type": "text/csv"})
    assert answer.status_code == 202, answer.text
    csv_id = answer.json()["id"]

    for batch_id in (json_id, csv_id):
        done = batch_finished(server, key, batch_id)
        assert done["status"] == "done", worker.log()
        assert done["progress"] == {"total": 6, "done": 5, "failed": 1}
    from_json, from_csv = results(server, key, json_id), results(server, key, csv_id)
    assert [r["id"] for r in from_json] == ["shop-0", "shop-1", "short", "shop-2", "shop-3", "shop-4"]
    assert from_csv == from_json

    for row, one in zip(from_json, body["series"], strict=True):
        single = requests.post(f"{server.url}/forecast", headers=bearer(key), timeout=60, json={
            "series": [{"timestamps": one["timestamps"], "values": one["values"]}], **FIELDS})
        if one["id"] == "short":
            assert single.status_code == 422
            assert row["error"] == single.json()["error"] | {"details": {
                **single.json()["error"]["details"], "field": "series[2]"}}
            continue
        assert single.status_code == 200, single.text
        assert {name: row[name] for name in single.json()} == single.json()

    csv_answer = requests.get(f"{server.url}/batches/{json_id}/results", headers={**bearer(key), "Accept": "text/csv"},
                              timeout=60)
    rows = csv_answer.text.splitlines()
    assert rows[0] == "unique_id,timestamp,lower,median,upper,error" and len(rows) == 1 + 5 * 4 + 1


def test_delete_cancels_a_running_batch(sqlite_service: tuple[Server, JobWorker, str, dict[str, str]]) -> None:
    server, worker, key, env = sqlite_service
    batch_id = submit(server, key, {"series": [series(f"s{i}", seed=i) for i in range(200)], **FIELDS})
    wait_for(lambda: batch_status(server, key, batch_id)["progress"]["done"] > 0, 180, "the batch to start")
    assert requests.delete(f"{server.url}/batches/{batch_id}", headers=bearer(key), timeout=10).status_code == 204
    cancelled = batch_status(server, key, batch_id)
    assert cancelled["status"] == "cancelled"
    done_then = cancelled["progress"]["done"]
    engine = create_engine(Settings(database_url=env["DATABASE_URL"]).database_url_for_sqlalchemy)
    try:
        # The workers finish the chunks they hold and store nothing of them; the queue's other chunks find
        # nothing to do. Watched for a few seconds: nothing of the batch comes back.
        for _ in range(4):
            with engine.connect() as connection:
                assert connection.execute(text("SELECT count(*) FROM batch_chunks WHERE batch_id = :b"),
                                          {"b": batch_id}).scalar() == 0
            time.sleep(1)
    finally:
        engine.dispose()
    later = batch_status(server, key, batch_id)
    assert later["status"] == "cancelled" and later["progress"]["done"] == done_then
    assert requests.get(f"{server.url}/batches/{batch_id}/results", headers=bearer(key), timeout=10).status_code == 404
    assert "Traceback" not in worker.log()


def chunk_attempts(database_url: str, batch_id: str) -> list[int]:
    engine = create_engine(Settings(database_url=database_url).database_url_for_sqlalchemy)
    try:
        with engine.connect() as connection:
            return [row[0] for row in connection.execute(
                text("SELECT attempts FROM batch_chunks WHERE batch_id = :b ORDER BY seq"), {"b": batch_id})]
    finally:
        engine.dispose()


def leased_chunks(database_url: str, batch_id: str) -> int:
    engine = create_engine(Settings(database_url=database_url).database_url_for_sqlalchemy)
    try:
        with engine.connect() as connection:
            return connection.execute(text(
                "SELECT count(*) FROM batch_chunks WHERE batch_id = :b AND status = 'pending' "
                "AND lease_token IS NOT NULL"), {"b": batch_id}).scalar() or 0
    finally:
        engine.dispose()


def exactly_once(rows: list[dict[str, Any]], expected_ids: list[str]) -> None:
    counts = Counter(row["id"] for row in rows)
    assert sorted(counts) == sorted(expected_ids)
    assert set(counts.values()) == {1}, {k: v for k, v in counts.items() if v != 1}
    assert all("median" in row for row in rows), [row for row in rows if "error" in row][:2]


def test_a_worker_killed_mid_batch_loses_no_series_and_repeats_none(tmp_path: Path) -> None:
    if not redis_available(SCALE_OUT_REDIS):
        missing_service(f"Redis is not reachable at {SCALE_OUT_REDIS}")
    flush_redis(SCALE_OUT_REDIS)
    with postgres_database() as database_url:
        # A lease long enough that no live worker loses one on a loaded machine: only the victim's runs out.
        env = {**BASE_ENV, "DATABASE_URL": database_url, "REDIS_URL": SCALE_OUT_REDIS, "BATCH_CHUNK_SERIES": "3",
               "BATCH_LEASE_SECONDS": "10"}
        cli_in_process("db", "upgrade", env=env)
        key = create_key(env)
        server = Server(env, log_path=tmp_path / "server.log")
        survivor = JobWorker(env, log_path=tmp_path / "survivor.log")
        victim = JobWorker(env, log_path=tmp_path / "victim.log")
        try:
            server.wait_ready()
            ids = [f"series-{i:03d}" for i in range(60)]
            batch_id = submit(server, key, {"series": [series(name, seed=i) for i, name in enumerate(ids)],
                                            **FIELDS})
            # The victim is killed in the middle of a chunk. Frozen, it cannot give its chunk back, and the survivor
            # (one process) holds one chunk at most: two chunks leased then mean one is the victim's. Seen unfrozen,
            # the victim could finish its chunk before the kill reached it, and the test would prove nothing.
            def victim_holds_a_chunk() -> bool:
                if batch_status(server, key, batch_id)["progress"]["done"] < 6:
                    return False
                victim.freeze()
                if leased_chunks(database_url, batch_id) == 2:
                    return True
                victim.thaw()
                return False

            wait_for(victim_holds_a_chunk, 240, "the victim frozen holding a chunk", interval=0.05)
            victim.kill()
            done = batch_finished(server, key, batch_id)
            assert done["status"] == "done" and done["progress"] == {"total": 60, "done": 60, "failed": 0}, (
                survivor.log())
            exactly_once(results(server, key, batch_id), ids)
            # The killed worker's chunk was taken again (a second attempt).
            attempts = chunk_attempts(database_url, batch_id)
            assert 2 in attempts, attempts
        finally:
            survivor.stop()
            victim.kill()
            server.stop()
            flush_redis(SCALE_OUT_REDIS)


def test_a_batch_finishes_after_the_whole_service_restarts(tmp_path: Path) -> None:
    env = {**BASE_ENV, "DATABASE_URL": f"sqlite:///{tmp_path / 'restart.sqlite3'}", "BATCH_CHUNK_SERIES": "3"}
    cli_in_process("db", "upgrade", env=env)
    key = create_key(env)
    ids = [f"series-{i:03d}" for i in range(45)]
    server = Server(env, log_path=tmp_path / "server-1.log")
    worker = JobWorker(env, log_path=tmp_path / "worker-1.log", processes=2)
    try:
        server.wait_ready()
        batch_id = submit(server, key, {"series": [series(name, seed=i) for i, name in enumerate(ids)], **FIELDS})
        wait_for(lambda: batch_status(server, key, batch_id)["progress"]["done"] >= 6, 240, "the batch to be under way")
    finally:
        worker.stop()
        server.stop()
    midway = status_from_database(env["DATABASE_URL"], batch_id)
    assert midway[0] == "running" and midway[1] < 45

    server = Server(env, log_path=tmp_path / "server-2.log")
    worker = JobWorker(env, log_path=tmp_path / "worker-2.log", processes=2)
    try:
        server.wait_ready()
        done = batch_finished(server, key, batch_id)
        assert done["status"] == "done" and done["progress"]["done"] == 45, worker.log()
        exactly_once(results(server, key, batch_id), ids)
    finally:
        worker.stop()
        server.stop()


def status_from_database(database_url: str, batch_id: str) -> tuple[str, int]:
    engine = create_engine(Settings(database_url=database_url).database_url_for_sqlalchemy)
    try:
        with engine.connect() as connection:
            row = connection.execute(text("SELECT status, series_done FROM batches WHERE id = :b"),
                                     {"b": batch_id}).one()
            return row[0], row[1]
    finally:
        engine.dispose()
