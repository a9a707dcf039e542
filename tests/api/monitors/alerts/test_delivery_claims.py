"""The alert queue's claim order and the sender's in-flight caps, on SQLite and PostgreSQL: new events before
retries, accounts taking turns, one monitor in order, and a full destination that cannot hide other events."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from flask import Flask
from sqlalchemy import insert

from app.db import Database
from app.monitors.alerts import queue
from app.monitors.alerts.queue import ClaimedEvent, RetryPolicy
from app.monitors.alerts.sender import CONCURRENCY, PER_ACCOUNT, PER_DESTINATION, InFlight
from app.monitors.records import monitor_events_table, monitors_table
from tests.support import build_app, services_of, settings_for

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
POLICY = RetryPolicy()


@pytest.fixture
def database(database_url: str) -> Iterator[Database]:
    app: Flask = build_app(settings_for(database_url))
    yield services_of(app).database
    services_of(app).close()


def add_monitor(database: Database, monitor_id: str, *, account: str, url: str | None) -> None:
    with database.transaction() as connection:
        connection.execute(insert(monitors_table).values(
            id=monitor_id, account_id=account, name=monitor_id, data_frequency="Minutes", confidence=0.99,
            retention_points=100, webhook_url=url, webhook_secret="whsec_test", created_at=NOW, updated_at=NOW))


def add_event(database: Database, monitor_id: str, seq: int, *, attempts: int = 0, due_ago: float = 1.0,
              series: int = 0) -> str:
    """An event of the monitor's ``series``-th series due ``due_ago`` seconds before NOW; ``attempts`` > 0 makes it a
    retry."""
    event_id = f"evt_{monitor_id}_{series}_{seq}" if series else f"evt_{monitor_id}_{seq}"
    with database.transaction() as connection:
        connection.execute(insert(monitor_events_table).values(
            id=event_id, monitor_id=monitor_id, series_id=zlib.crc32(monitor_id.encode()) * 100 + series, seq=seq,
            kind="anomaly",
            payload=json.dumps({"id": event_id, "monitor_id": monitor_id, "sequence": seq}),
            webhook_url="", status="pending", attempts=attempts,
            created_at=NOW - timedelta(seconds=600), next_attempt_at=NOW - timedelta(seconds=due_ago)))
    return event_id


def claim(database: Database, limit: int, gate: InFlight | None = None) -> list[ClaimedEvent]:
    return queue.claim(database, limit=limit, policy=POLICY, now=NOW, gate=gate)


def test_new_events_are_claimed_before_retries_and_a_monitor_stays_in_order(database: Database) -> None:
    add_monitor(database, "mon_retry", account="acct-a", url="http://127.0.0.1:9/down")
    add_monitor(database, "mon_new", account="acct-a", url="http://127.0.0.1:9/up")
    retry = add_event(database, "mon_retry", 1, attempts=3, due_ago=300)  # due long before the new one
    behind = add_event(database, "mon_retry", 2, due_ago=200)  # never attempted, but behind its monitor's head
    fresh = add_event(database, "mon_new", 1, due_ago=1)

    assert [e.id for e in claim(database, 1)] == [fresh]
    taken = claim(database, 5)
    assert [e.id for e in taken] == [retry]  # the head's successor is not claimable while the head is active
    assert taken[0].attempt == 4
    assert behind not in {e.id for e in claim(database, 5)}


def test_each_series_of_a_monitor_keeps_its_own_order_and_holds_up_no_other(database: Database) -> None:
    add_monitor(database, "mon_fleet", account="acct-a", url="http://127.0.0.1:9/fleet")
    head = add_event(database, "mon_fleet", 1, series=1, attempts=2, due_ago=300)
    behind = add_event(database, "mon_fleet", 2, series=1, due_ago=200)
    other = add_event(database, "mon_fleet", 1, series=2, due_ago=100)  # numbered on its own

    taken = {e.id for e in claim(database, 5)}
    assert taken == {head, other}  # the other series' event is not held up by the first series' head
    assert behind not in taken


def test_accounts_take_turns_however_large_one_accounts_backlog(database: Database) -> None:
    for i in range(100):
        add_monitor(database, f"mon_a{i}", account="acct-a", url=f"http://127.0.0.1:9/a{i}")
        add_event(database, f"mon_a{i}", 1, due_ago=500 - i)
    add_monitor(database, "mon_b", account="acct-b", url="http://127.0.0.1:9/b")
    b_event = add_event(database, "mon_b", 1, due_ago=1)  # due after all of account A's

    assert [e.id for e in claim(database, 2)] == ["evt_mon_a0_1", b_event]


def test_a_full_destination_cannot_hide_another_destinations_event(database: Database) -> None:
    # More events for one dead receiver, on more distinct paths, than one claim window holds, all due before
    # the same account's event for a healthy receiver.
    dead = queue.CLAIM_WINDOW * 2 + 20
    for i in range(dead):
        add_monitor(database, f"mon_d{i}", account="acct-a", url=f"http://tarpit.example:8080/hook/{i}")
        add_event(database, f"mon_d{i}", 1, due_ago=1000 - i)
    add_monitor(database, "mon_ok", account="acct-a", url="https://receiver.example/hook")
    healthy = add_event(database, "mon_ok", 1, due_ago=1)
    gate = InFlight(total=CONCURRENCY, per_destination=PER_DESTINATION, per_account=PER_ACCOUNT)

    taken = claim(database, CONCURRENCY, gate)
    assert healthy in {e.id for e in taken}
    assert sum(1 for e in taken if e.monitor_id.startswith("mon_d")) == PER_DESTINATION
    assert gate.free() == CONCURRENCY - PER_DESTINATION - 1

    # The dead receiver gets another delivery only once one of its own ends.
    assert claim(database, CONCURRENCY, gate) == []
    gate.release(taken[0].id)
    again = claim(database, CONCURRENCY, gate)
    assert len(again) == 1 and again[0].monitor_id.startswith("mon_d")


def test_one_account_holds_at_most_its_share_of_the_sender(database: Database) -> None:
    # Dead receivers on distinct hosts: the per-destination cap alone would let them take every slot.
    for i in range(CONCURRENCY * 2):
        add_monitor(database, f"mon_h{i}", account="acct-a", url=f"http://tarpit-{i}.example/hook")
        add_event(database, f"mon_h{i}", 1, due_ago=1000 - i)
    add_monitor(database, "mon_b", account="acct-b", url="https://receiver.example/hook")
    b_event = add_event(database, "mon_b", 1, due_ago=1)
    gate = InFlight(total=CONCURRENCY, per_destination=PER_DESTINATION, per_account=PER_ACCOUNT)

    taken = claim(database, CONCURRENCY, gate)
    assert b_event in {e.id for e in taken}
    assert sum(1 for e in taken if e.monitor_id.startswith("mon_h")) == PER_ACCOUNT
