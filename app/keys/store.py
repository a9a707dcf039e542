"""Key lookups with a short cache and batched usage counting (totals and hourly outcome buckets) that loses nothing."""

from __future__ import annotations

import hmac
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from app.db import Database
from app.keys import crud
from app.keys.records import OUTCOMES, ApiKey, outcome_of

log = logging.getLogger("app.keys")

# Compared against when a key is unknown, so a miss costs what a hit costs.
_DUMMY_HASH = crud.hash_key("ak_" + "0" * 64)


class KeyStore:
    def __init__(self, database: Database, *, cache_seconds: float, clock: Callable[[], float] = time.monotonic):
        self._database = database
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._cache: dict[str, tuple[float, ApiKey]] = {}
        self._lock = threading.Lock()

    def lookup(self, plain_key: str) -> ApiKey | None:
        """The key record for a presented key, or None; found by hash, confirmed in constant time."""
        key_hash = crud.hash_key(plain_key)
        now = self._clock()
        with self._lock:
            cached = self._cache.get(key_hash)
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        with self._database.transaction() as connection:
            key = crud.find_by_hash(connection, key_hash=key_hash)
        if key is None:
            hmac.compare_digest(key_hash, _DUMMY_HASH)
            return None
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[key_hash] = (now, key)
        return key

    def get_by_id(self, key_id: str) -> ApiKey | None:
        """The key with this id (for callers that hold a server-side reference, never the plain key)."""
        now = self._clock()
        cache_id = "id:" + key_id
        with self._lock:
            cached = self._cache.get(cache_id)
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        with self._database.transaction() as connection:
            try:
                key = crud.get_key(connection, key_id=key_id)
            except crud.KeyInputError:
                return None
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[cache_id] = (now, key)
        return key

    def forget(self) -> None:
        with self._lock:
            self._cache.clear()


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
                slot = (key_id, crud.hour_of(at))
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
                        crud.add_usage(connection, key_id=key_id, count=count, last_used_at=last_used)
                    crud.add_usage_bucket_batch(connection, buckets)
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
                crud.prune_usage(connection, keep=self._retention)
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
