"""Hourly usage buckets by outcome: batched like usage_count, nothing lost on a failed flush, 90 days kept."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.db import Database
from app.keys import store, usage
from app.keys.records import outcome_of
from app.keys.usage import UsageRecorder
from tests.support import migrate, postgres_database, settings_for


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    if request.param == "sqlite":
        settings = settings_for(f"sqlite:///{tmp_path / 'usage.sqlite3'}")
        migrate(settings)
        db = Database(settings)
        yield db
        db.dispose()
        return
    with postgres_database() as url:
        settings = settings_for(url)
        migrate(settings)
        db = Database(settings)
        yield db
        db.dispose()


def make_key(database: Database) -> str:
    with database.transaction() as connection:
        return store.create_key(connection, permissions=("read",)).key.id


def history(database: Database, key_id: str, hours: int = 3, now: datetime | None = None) -> list[usage.UsageBucket]:
    with database.transaction() as connection:
        return usage.usage_history(connection, key_id=key_id, hours=hours, now=now)


@pytest.mark.parametrize(
    ("status", "outcome"), [(200, "2xx"), (201, "2xx"), (304, "2xx"), (400, "4xx"), (404, "4xx"), (403, "4xx"),
                            (422, "4xx"), (429, "429"), (500, "5xx"), (503, "5xx")],
)
def test_outcome_classes(status: int, outcome: str) -> None:
    assert outcome_of(status) == outcome


def test_buckets_split_by_outcome_and_hour(database: Database) -> None:
    key_id = make_key(database)
    recorder = UsageRecorder(database, flush_seconds=60)
    now = datetime.now(UTC)
    an_hour_ago = now - timedelta(hours=1)
    for status in (200, 200, 200, 404, 429, 429, 500):
        recorder.record(key_id, at=now, status=status)
    recorder.record(key_id, at=an_hour_ago, status=200)
    recorder.record(key_id, at=now)  # status unknown: counted in the total only
    assert recorder.flush()
    buckets = history(database, key_id, hours=3, now=now)
    assert [b.hour for b in buckets] == [usage.hour_of(now) - timedelta(hours=h) for h in (2, 1, 0)]
    assert buckets[0].counts == {"2xx": 0, "4xx": 0, "429": 0, "5xx": 0}
    assert buckets[1].counts == {"2xx": 1, "4xx": 0, "429": 0, "5xx": 0}
    assert buckets[2].counts == {"2xx": 3, "4xx": 1, "429": 2, "5xx": 1}
    with database.transaction() as connection:
        assert store.get_key(connection, key_id=key_id).usage_count == 9

    # A second flush adds to the same rows (an upsert, as another replica's flush would).
    recorder.record(key_id, at=now, status=200)
    recorder.record(key_id, at=now, status=429)
    assert recorder.flush()
    assert history(database, key_id, hours=1, now=now)[0].counts == {"2xx": 4, "4xx": 1, "429": 3, "5xx": 1}
    recorder.close()


def test_failed_flush_keeps_buckets_for_the_next_attempt(database: Database, monkeypatch: pytest.MonkeyPatch) -> None:
    key_id = make_key(database)
    recorder = UsageRecorder(database, flush_seconds=60)
    now = datetime.now(UTC)
    for status in (200, 500, 429):
        recorder.record(key_id, at=now, status=status)

    real = usage.add_usage_bucket_batch

    def outage(*args: object, **kwargs: object) -> None:
        raise ConnectionError("database went away")

    monkeypatch.setattr(usage, "add_usage_bucket_batch", outage)
    assert not recorder.flush()
    recorder.record(key_id, at=now, status=200)  # arrives during the outage
    assert recorder.pending_buckets() == {(key_id, usage.hour_of(now)): {"2xx": 2, "4xx": 0, "429": 1, "5xx": 1}}
    monkeypatch.setattr(usage, "add_usage_bucket_batch", real)
    recorder.close()  # the shutdown flush writes what the failed one kept
    assert recorder.pending_buckets() == {}
    assert history(database, key_id, hours=1, now=now)[0].counts == {"2xx": 2, "4xx": 0, "429": 1, "5xx": 1}
    with database.transaction() as connection:
        # The totals rolled back with the buckets and were written once, not twice.
        assert store.get_key(connection, key_id=key_id).usage_count == 4


def test_buckets_older_than_90_days_are_pruned(database: Database) -> None:
    key_id = make_key(database)
    now = datetime.now(UTC)
    with database.transaction() as connection:
        usage.add_usage_buckets(connection, key_id=key_id, hour=now - timedelta(days=91), counts={"2xx": 5})
        usage.add_usage_buckets(connection, key_id=key_id, hour=now - timedelta(days=89), counts={"4xx": 2})
    recorder = UsageRecorder(database, flush_seconds=0.05)
    recorder.record(key_id, at=now, status=200)  # starts the flusher thread, which also prunes
    deadline = time.monotonic() + 10
    while sum(b.total for b in history(database, key_id, hours=24 * 92, now=now)) != 3:
        assert time.monotonic() < deadline, "the flusher did not prune"
        time.sleep(0.05)
    with database.transaction() as connection:
        assert usage.prune_usage(connection, keep=timedelta(days=90)) == 0  # the flusher already pruned
        kept = usage.usage_history(connection, key_id=key_id, hours=24 * 92, now=now)
    assert sum(b.total for b in kept) == 3
    assert [b.counts for b in kept if b.total] == [
        {"2xx": 0, "4xx": 2, "429": 0, "5xx": 0},
        {"2xx": 1, "4xx": 0, "429": 0, "5xx": 0},
    ]
    recorder.close()


def test_a_flush_of_many_keys_and_hours_writes_them_all(database: Database) -> None:
    key_ids = [make_key(database) for _ in range(30)]
    recorder = UsageRecorder(database, flush_seconds=60)
    now = datetime.now(UTC)
    for hours_ago in range(24):  # 720 key-hours: more than one statement's worth
        for index, key_id in enumerate(key_ids):
            for _ in range(index % 3 + 1):
                recorder.record(key_id, at=now - timedelta(hours=hours_ago), status=200 if index % 2 else 503)
    assert recorder.flush()
    for index, key_id in enumerate(key_ids):
        buckets = history(database, key_id, hours=24, now=now)
        outcome = "2xx" if index % 2 else "5xx"
        assert [b.counts[outcome] for b in buckets] == [index % 3 + 1] * 24
        assert sum(b.total for b in buckets) == 24 * (index % 3 + 1)
    recorder.close()


@pytest.mark.slow
def test_buckets_survive_a_graceful_gunicorn_restart(tmp_path: Path) -> None:
    """Through a real server: every counted request lands in its bucket, the last ones flushed on SIGTERM."""
    import json

    import requests

    from tests.support import Server, bearer, cli_in_process

    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'served.sqlite3'}", "DATA_DIR": str(tmp_path),
           "FORECAST_WORKERS": "1", "USAGE_FLUSH_SECONDS": "5", "LOG_LEVEL": "WARNING"}
    cli_in_process("db", "upgrade", env=env)
    key = json.loads(cli_in_process("keys", "create", "--permissions", "read", "--per-minute", "20", "--json",
                                    env=env).stdout)
    server = Server(env, log_path=tmp_path / "gunicorn.log")
    try:
        server.wait_ready()
        statuses = [requests.get(server.url + "/verify", headers=bearer(key["key"]), timeout=10).status_code
                    for _ in range(5)]
        statuses += [requests.get(server.url + "/nowhere", headers=bearer(key["key"]), timeout=10).status_code
                     for _ in range(23)]
        assert requests.get(server.url + "/verify", headers=bearer("ak_" + "3" * 64), timeout=10).status_code == 401
    finally:
        assert server.stop() == 0
    assert statuses == [200] * 5 + [404] * 20 + [429] * 3
    database = Database(settings_for(env["DATABASE_URL"]))
    try:
        buckets = history(database, key["id"], hours=2)
        assert {outcome: sum(b.counts[outcome] for b in buckets) for outcome in ("2xx", "4xx", "429", "5xx")} == {
            "2xx": 5, "4xx": 20, "429": 3, "5xx": 0
        }
        with database.transaction() as connection:
            assert store.get_key(connection, key_id=key["id"]).usage_count == 28
    finally:
        database.dispose()
