"""The alert queue: events stored in the database, taken by any server's sender, one monitor in order.

An event is "pending" until a sender claims it; a claim sets it to "sending" with a lease (its
``next_attempt_at`` becomes the lease's end) and commits, so the HTTP call happens outside any
transaction. A sender that dies mid-send leaves a lease that runs out, and the event is claimed again:
delivery is at least once, and every event carries a stable id for the receiver to drop repeats.

Order per series and destination (its monitor's webhook, its Alertmanager): only the oldest undelivered event
of a series' destination (lowest ``seq`` among pending/sending) can be claimed, so a receiver sees a series'
events in order even across retries and servers, and one series' backlog holds up none of its monitor's other
series. On PostgreSQL the claim is ``SELECT ... FOR UPDATE SKIP
LOCKED``: two servers never take the same event and never wait on each other. SQLite has one writer at a
time, which serializes claims by itself.

Which due event goes first: events never attempted before retries (a receiver that is down must not make
everyone else's fresh alerts queue behind its backlog), the accounts taking turns, then by due time. A
sender passes a ``ClaimGate`` that admits only events it has room for (its per-destination and per-account
caps); events it has no room for stay pending for another sender or a later claim, and the query leaves out
the webhook URLs and accounts already full, so one dead receiver's backlog cannot hide other events.
"""

from __future__ import annotations

import json
import random
import secrets
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any, Protocol

from sqlalchemy import Connection, Select, and_, bindparam, case, exists, func, insert, literal, or_, select, update

from app.db import Database, Prepared
from app.monitors.alerts.webhooks import DeliveryOutcome
from app.monitors.records import delivery_attempts_table, monitor_events_table, monitors_table
from app.settings import Settings

ACTIVE = ("pending", "sending")
# Due events one claim reads at a time (when a gate may turn some down), and how many such reads it makes.
CLAIM_WINDOW = 64
CLAIM_ROUNDS = 4


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff from ``base_seconds``, each wait capped at ``max_delay_seconds``, giving up once
    an event is ``max_age_seconds`` old; built from the settings (MONITOR_* variables), which tests and
    drills shorten."""

    base_seconds: float = 1.0
    # A receiver that comes back waits at most this long for its backlog to start flowing again.
    max_delay_seconds: float = 60.0
    max_age_seconds: float = 3600.0
    lease_seconds: float = 60.0
    request_timeout_seconds: float = 10.0

    @classmethod
    def from_settings(cls, settings: Settings) -> RetryPolicy:
        return cls(
            base_seconds=settings.monitor_retry_base_seconds,
            max_delay_seconds=settings.monitor_retry_max_delay_seconds,
            max_age_seconds=settings.monitor_delivery_max_age_seconds,
            lease_seconds=settings.monitor_delivery_lease_seconds,
            request_timeout_seconds=settings.monitor_webhook_timeout_seconds,
        )

    def delay(self, attempt: int) -> float:
        # Jitter spreads the retries of many events that failed together (a receiver outage).
        raw = min(self.base_seconds * 2 ** max(0, attempt - 1), self.max_delay_seconds)
        return raw * random.uniform(0.85, 1.0)


def new_event_id() -> str:
    return "evt_" + secrets.token_hex(16)


_EVENTS = monitor_events_table
_events = monitor_events_table.c
_monitors = monitors_table.c
_INSERT_EVENT = _EVENTS.insert()


def enqueue(
    connection: Connection,
    *,
    monitor_id: str,
    series_id: int,
    webhook_url: str,
    seq: int,
    kind: str,
    payload: dict[str, Any],
    now: datetime,
    destination: str = "webhook",
) -> None:
    """Adds one event in the caller's transaction (the one that stores the points that caused it)."""
    connection.execute(_INSERT_EVENT, {
        "id": payload["id"],
        "monitor_id": monitor_id,
        "series_id": series_id,
        "seq": seq,
        "kind": kind,
        "payload": json.dumps(payload, separators=(",", ":")),
        "webhook_url": webhook_url,
        "destination": destination,
        "status": "pending",
        "attempts": 0,
        "created_at": now,
        "next_attempt_at": now,
        "last_attempt_at": None,
        "delivered_at": None,
        "last_status_code": None,
        "last_error": None,
    })


@dataclass(frozen=True)
class ClaimedEvent:
    id: str
    monitor_id: str
    seq: int
    attempt: int
    body: bytes
    url: str | None
    secret: str
    created_at: datetime
    destination: str = "webhook"


@dataclass(frozen=True)
class Candidate:
    """A due event as the claim sees it before taking it: what a gate needs to decide whether there is room."""

    id: str
    url: str | None
    account_id: str


class ClaimGate(Protocol):
    """A sender's limits on what it has in flight, consulted by ``claim`` for each due event before taking it."""

    def excluded(self) -> tuple[Collection[str], Collection[str]]:
        """Webhook URLs and account ids with no room now; the claim's query leaves their events out."""
        ...

    def admit(self, candidate: Candidate) -> bool:
        """Reserves room for the candidate; False leaves the event pending."""
        ...

    def release(self, event_id: str) -> None:
        """Gives back the room of an admitted event (also one the claim then could not take)."""
        ...


def _destination_url() -> Any:
    """The URL an event goes to now: its monitor's webhook or Alertmanager, whichever the event is for."""
    return case((_events.destination == "alertmanager", _monitors.alertmanager_url),
                else_=_monitors.webhook_url)


@cache
def _due_statement(limit: int, row_locks: bool) -> Select[tuple[str, str | None, str]]:
    """The events a sender may claim at the bound ``now`` (minus the bound ``skip_urls`` and ``skip_accounts``),
    built once: every sender asks each second, and building the statement (an alias, an EXISTS, a window, a
    dozen comparisons) cost more than running it.

    Order: never-attempted events before retries; within each, the accounts take turns (every account's first
    due event, then every account's second, ...), so one account's backlog cannot fill the window ahead of
    another account's alert; then by due time."""
    earlier = _EVENTS.alias("earlier").c
    blocked = exists().where(
        and_(
            earlier.series_id == _events.series_id,
            earlier.destination == _events.destination,
            earlier.seq < _events.seq,
            earlier.status.in_(ACTIVE),
        )
    )
    retry = case((_events.attempts == 0, 0), else_=1)
    # The turns are numbered in a subquery: PostgreSQL allows no FOR UPDATE beside a window function.
    ranked = (
        select(
            _events.id.label("id"),
            retry.label("retry"),
            func.row_number()
            .over(partition_by=_monitors.account_id,
                  order_by=(retry, _events.next_attempt_at, _events.seq))
            .label("turn"),
        )
        .join(monitors_table, _monitors.id == _events.monitor_id)
        .where(
            _events.status.in_(ACTIVE),
            _events.next_attempt_at <= bindparam("now"),
            ~blocked,
            # NOT IN is unknown for a NULL url, and an event whose webhook was removed must still be claimed
            # (to be cancelled).
            or_(_destination_url().is_(None),
                _destination_url().not_in(bindparam("skip_urls", expanding=True))),
            _monitors.account_id.not_in(bindparam("skip_accounts", expanding=True)),
        )
        .subquery()
    )
    due = (
        select(_events.id, _destination_url(), _monitors.account_id)
        .join(ranked, ranked.c.id == _events.id)
        .join(monitors_table, _monitors.id == _events.monitor_id)
        .order_by(ranked.c.retry, ranked.c.turn, _events.next_attempt_at, _events.seq)
        .limit(limit)
    )
    if row_locks:
        due = due.with_for_update(skip_locked=True, of=_EVENTS)
    return due


def claim(
    database: Database,
    *,
    limit: int,
    policy: RetryPolicy,
    now: datetime | None = None,
    gate: ClaimGate | None = None,
) -> list[ClaimedEvent]:
    """Takes up to ``limit`` due events (new ones first), each only if ``gate`` admits it, and leases them."""
    now = now or datetime.now(UTC)
    window = limit if gate is None else max(limit, CLAIM_WINDOW)
    due = _due_statement(window, database.engine.dialect.name == "postgresql")
    claimed: list[ClaimedEvent] = []
    lease_end = now + timedelta(seconds=policy.lease_seconds)
    with database.transaction() as connection:
        for _ in range(CLAIM_ROUNDS):
            skip_urls, skip_accounts = gate.excluded() if gate is not None else ((), ())
            rows = connection.execute(
                due, {"now": now, "skip_urls": list(skip_urls), "skip_accounts": list(skip_accounts)}
            ).all()
            for event_id, url, account_id in rows:
                if len(claimed) >= limit:
                    break
                if gate is not None and not gate.admit(Candidate(event_id, url, account_id)):
                    continue
                event = _take(connection, event_id, now=now, lease_end=lease_end)
                if event is not None:
                    claimed.append(event)
                elif gate is not None:
                    gate.release(event_id)
            if gate is None or len(claimed) >= limit or len(rows) < window:
                break
            # A full window the gate turned (partly) down: read again without what it has just learned is
            # full; when it learned nothing, the same rows would come back.
            after_urls, after_accounts = gate.excluded()
            if len(after_urls) + len(after_accounts) <= len(skip_urls) + len(skip_accounts):
                break
    return claimed


def _take(connection: Connection, event_id: str, *, now: datetime, lease_end: datetime) -> ClaimedEvent | None:
    """Leases one due event in the claim's transaction; None when another sender took it first."""
    # The status/lease condition again: on SQLite another process may have claimed it since the SELECT (on
    # PostgreSQL the row lock already excludes that).
    result = connection.execute(
        update(_EVENTS)
        .where(
            _events.id == event_id,
            _events.status.in_(ACTIVE),
            _events.next_attempt_at <= now,
        )
        .values(status="sending", next_attempt_at=lease_end, attempts=_events.attempts + 1)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return None
    event = connection.execute(
        select(_events.id, _events.monitor_id, _events.seq, _events.attempts, _events.payload,
               _events.created_at, _events.destination, _destination_url().label("url"),
               _monitors.webhook_secret)
        .join(monitors_table, _monitors.id == _events.monitor_id)
        .where(_events.id == event_id)
    ).one_or_none()
    if event is None:
        return None
    return ClaimedEvent(
        id=event.id,
        monitor_id=event.monitor_id,
        seq=event.seq,
        attempt=event.attempts,
        body=event.payload.encode(),
        url=event.url,
        secret=event.webhook_secret,
        created_at=event.created_at,
        destination=event.destination,
    )


def complete(
    database: Database,
    *,
    event: ClaimedEvent,
    outcome: DeliveryOutcome | None,
    policy: RetryPolicy,
    sender: str,
    now: datetime | None = None,
) -> str:
    """Records one attempt and the event's next state; ``outcome`` None means the webhook was removed."""
    now = now or datetime.now(UTC)
    values: dict[str, Any] = {"last_attempt_at": now}
    if outcome is None:
        status = "cancelled"
        target = "an Alertmanager" if event.destination == "alertmanager" else "a webhook"
        values.update(status=status, last_error=f"the monitor no longer has {target}")
    elif outcome.acknowledged:
        status = "delivered"
        values.update(status=status, delivered_at=now, last_status_code=outcome.status_code, last_error=None)
    else:
        age = (now - event.created_at).total_seconds()
        delay = policy.delay(event.attempt)
        status = "failed" if age + delay > policy.max_age_seconds else "pending"
        values.update(
            status=status,
            next_attempt_at=now + timedelta(seconds=delay),
            last_status_code=outcome.status_code,
            last_error=outcome.error,
        )
    if event.url:
        values["webhook_url"] = event.url
    with database.transaction() as connection:
        # Only while our lease holds: a sender whose lease ran out must not overwrite the new holder's state.
        result = connection.execute(
            update(_EVENTS)
            .where(
                _events.id == event.id,
                _events.status == "sending",
                _events.attempts == event.attempt,
            )
            .values(**values)
        )
        if outcome is not None and result.rowcount == 1:  # type: ignore[attr-defined]
            connection.execute(
                insert(delivery_attempts_table).values(
                    event_id=event.id,
                    monitor_id=event.monitor_id,
                    attempt=event.attempt,
                    attempted_at=now,
                    duration_ms=round(outcome.duration_ms, 3),
                    status_code=outcome.status_code,
                    error=outcome.error,
                    sender=sender[:64],
                )
            )
    return status


# Whether any event waits or is being sent: an idle sender asks only this each second (a claim and a look for the
# next due time cost it ten times as much, in every web process, with nothing to find).
_ANY_ACTIVE = Prepared(
    select(literal(1)).select_from(_EVENTS)
    .where(or_(_events.status == "pending", _events.status == "sending"))
    .limit(1)
)


def any_active(database: Database) -> bool:
    with database.engine.begin() as connection:
        cursor = _ANY_ACTIVE.execute(connection)
        try:
            return cursor.fetchone() is not None
        finally:
            cursor.close()


def next_due(database: Database, *, after: datetime | None = None) -> datetime | None:
    """When the earliest pending event falls due (the sender sleeps until then, or until woken); with ``after``,
    the earliest falling due later than that (the sender's last claim saw the earlier ones)."""
    statement = (
        select(_events.next_attempt_at)
        .where(or_(_events.status == "pending", _events.status == "sending"))
        .order_by(_events.next_attempt_at)
        .limit(1)
    )
    if after is not None:
        statement = statement.where(_events.next_attempt_at > after)
    with database.transaction() as connection:
        return connection.execute(statement).scalar_one_or_none()
