"""Usage counting: each key's running total and hourly outcome buckets, batched in memory by UsageRecorder and
written in the background so that an outage delays counts but loses none; the history the API and dashboard chart."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, bindparam, delete, or_, select, update

from app.db import Database, Prepared, dialect_insert
from app.keys.records import OUTCOME_COLUMNS, OUTCOMES, api_keys_table, key_usage_buckets_table, outcome_of

log = logging.getLogger("app.keys")

_KEYS = api_keys_table
_BUCKETS = key_usage_buckets_table


# The usage flusher's statements, built and compiled once (Prepared): every web process runs them each second, and
# building and compiling them through SQLAlchemy each time would redo work whose result never changes.
_ADD_COUNT = Prepared(
    update(_KEYS).where(_KEYS.c.id == bindparam("key_id")).values(usage_count=_KEYS.c.usage_count + bindparam("count"))
)
# Two replicas may flush out of order; last_used_at only ever moves forward.
_USED_AT = bindparam("used_at", type_=_KEYS.c.last_used_at.type)
_ADVANCE_LAST_USED = Prepared(
    update(_KEYS)
    .where(_KEYS.c.id == bindparam("key_id"), or_(_KEYS.c.last_used_at.is_(None), _KEYS.c.last_used_at < _USED_AT))
    .values(last_used_at=_USED_AT)
)
_UPSERT_BUCKETS: dict[str, Prepared] = {}


def add_usage(connection: Connection, *, key_id: str, count: int, last_used_at: datetime) -> None:
    _ADD_COUNT.execute(connection, {"key_id": key_id, "count": count}).close()
    _ADVANCE_LAST_USED.execute(connection, {"key_id": key_id, "used_at": last_used_at}).close()


def hour_of(moment: datetime) -> datetime:
    if moment.tzinfo is not UTC:  # the request path passes UTC already; skip the conversion then
        moment = moment.astimezone(UTC)
    return moment.replace(minute=0, second=0, microsecond=0)


def add_usage_buckets(connection: Connection, *, key_id: str, hour: datetime, counts: dict[str, int]) -> None:
    """Adds outcome counts to one key-hour bucket, creating it when it is new."""
    add_usage_bucket_batch(connection, {(key_id, hour): counts})


def add_usage_bucket_batch(connection: Connection, buckets: dict[tuple[str, datetime], dict[str, int]]) -> None:
    """Adds outcome counts to many key-hour buckets, creating the ones that are new.

    An upsert, because two replicas may flush the same key-hour at the same moment.
    """
    if not buckets:
        return
    rows = [
        {"key_id": key_id, "hour": hour_of(hour),
         **{OUTCOME_COLUMNS[outcome]: counts.get(outcome, 0) for outcome in OUTCOMES}}
        for (key_id, hour), counts in buckets.items()
    ]
    _upsert_buckets(connection.dialect.name).executemany(connection, rows).close()


def _upsert_buckets(dialect: str) -> Prepared:
    prepared = _UPSERT_BUCKETS.get(dialect)
    if prepared is None:
        statement = dialect_insert(dialect, _BUCKETS)
        statement = statement.on_conflict_do_update(
            index_elements=[_BUCKETS.c.key_id, _BUCKETS.c.hour],
            set_={column: _BUCKETS.c[column] + statement.excluded[column] for column in OUTCOME_COLUMNS.values()},
        )
        prepared = _UPSERT_BUCKETS[dialect] = Prepared(statement)
    return prepared


@dataclass(frozen=True)
class UsageBucket:
    hour: datetime
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def usage_history(connection: Connection, *, key_id: str, hours: int, now: datetime | None = None) -> list[UsageBucket]:
    """One bucket per hour for the last ``hours`` hours (the current hour included), oldest first, zeros kept
    so a chart's x axis is even."""
    now = now or datetime.now(UTC)
    end = hour_of(now)
    start = end - timedelta(hours=hours - 1)
    rows = connection.execute(
        select(_BUCKETS)
        .where(_BUCKETS.c.key_id == key_id)
        .where(_BUCKETS.c.hour >= start)
        .where(_BUCKETS.c.hour <= end)
    )
    found = {
        row.hour: {outcome: int(getattr(row, column)) for outcome, column in OUTCOME_COLUMNS.items()} for row in rows
    }
    buckets = []
    for offset in range(hours):
        hour = start + timedelta(hours=offset)
        buckets.append(UsageBucket(hour=hour, counts=found.get(hour, dict.fromkeys(OUTCOMES, 0))))
    return buckets


def prune_usage(connection: Connection, *, keep: timedelta, now: datetime | None = None) -> int:
    cutoff = hour_of(now or datetime.now(UTC)) - keep
    result = connection.execute(delete(_BUCKETS).where(_BUCKETS.c.hour < cutoff))
    return int(result.rowcount or 0)


USAGE_RETENTION = timedelta(days=90)
# How often one process deletes buckets past the retention; any replica doing it is enough.
_PRUNE_EVERY_SECONDS = 3600.0

_Buckets = dict[tuple[str, datetime], dict[str, int]]


class UsageRecorder:
    """Counts requests per key in memory and adds them to the database in the background.

    Two things are counted: the key's running total (usage_count, last_used_at) and, when the response
    status is known, the key's hourly bucket for that outcome. A failed flush keeps both for the next
    attempt, so an outage delays counts but loses none.
    """

    def __init__(
        self,
        database: Database,
        *,
        flush_seconds: float,
        retention: timedelta = USAGE_RETENTION,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._database = database
        self._flush_seconds = flush_seconds
        self._retention = retention
        self._clock = clock
        self._pruned_at: float | None = None
        self._pending: dict[str, tuple[int, datetime]] = {}
        self._pending_buckets: _Buckets = {}
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self, key_id: str, at: datetime | None = None, *, status: int | None = None, count: int = 1) -> None:
        """Counts ``count`` requests of ``key_id`` (a batch counts its series); with their response ``status``
        they also land in an hourly bucket."""
        at = at or datetime.now(UTC)
        with self._lock:
            pending, last = self._pending.get(key_id, (0, at))
            self._pending[key_id] = (pending + count, max(last, at))
            if status is not None:
                slot = (key_id, hour_of(at))
                bucket = self._pending_buckets.get(slot)
                if bucket is None:
                    bucket = self._pending_buckets[slot] = dict.fromkeys(OUTCOMES, 0)
                bucket[outcome_of(status)] += count
        self._ensure_thread()

    def pending(self) -> dict[str, int]:
        with self._lock:
            return {key_id: count for key_id, (count, _) in self._pending.items()}

    def pending_buckets(self) -> _Buckets:
        with self._lock:
            return {slot: dict(counts) for slot, counts in self._pending_buckets.items()}

    def flush(self) -> bool:
        """Writes pending counts; True when nothing is left pending."""
        with self._flush_lock:
            with self._lock:
                batch, self._pending = self._pending, {}
                buckets, self._pending_buckets = self._pending_buckets, {}
            if not batch and not buckets:
                return True
            try:
                # One transaction: totals and buckets land together or are retried together.
                with self._database.transaction() as connection:
                    for key_id, (count, last_used) in batch.items():
                        add_usage(connection, key_id=key_id, count=count, last_used_at=last_used)
                    add_usage_bucket_batch(connection, buckets)
            except Exception:
                log.warning("usage flush failed; %d key(s) kept for the next attempt", len(batch), exc_info=True)
                with self._lock:
                    for key_id, (count, last_used) in batch.items():
                        pending_count, pending_last = self._pending.get(key_id, (0, last_used))
                        self._pending[key_id] = (pending_count + count, max(pending_last, last_used))
                    for slot, counts in buckets.items():
                        pending_counts = self._pending_buckets.setdefault(slot, dict.fromkeys(OUTCOMES, 0))
                        for outcome, value in counts.items():
                            pending_counts[outcome] += value
                return False
            return True

    def prune_if_due(self) -> None:
        """Deletes buckets past the retention, at most once an hour (from the flusher thread, never at exit)."""
        now = self._clock()
        if self._pruned_at is not None and now - self._pruned_at < _PRUNE_EVERY_SECONDS:
            return
        self._pruned_at = now
        try:
            with self._database.transaction() as connection:
                prune_usage(connection, keep=self._retention)
        except Exception:
            # Retention is housekeeping; the next hour tries again.
            log.warning("pruning old usage buckets failed", exc_info=True)

    def _ensure_thread(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="usage-flusher", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._flush_seconds):
            self.flush()
            self.prune_if_due()

    def close(self, *, attempts: int = 5) -> None:
        self._stop.set()
        for attempt in range(attempts):
            if self.flush():
                return
            time.sleep(min(0.2 * 2**attempt, 2.0))
        lost = self.pending()
        if lost or self.pending_buckets():
            log.error("usage counts could not be written at shutdown", extra={"fields": {"pending": lost}})
