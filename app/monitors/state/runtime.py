"""What one process keeps for monitors, built in one place for the web process and the Prometheus reader alike."""

from __future__ import annotations

import queue as queue_module
import threading
from dataclasses import dataclass
from typing import Any

from app.db import Database
from app.monitors.label_sets import SeriesIds
from app.monitors.state.cache import HistoryCache, MonitorLocks
from app.settings import Settings


class JudgeSlots:
    """``count`` slots that appends take turns in, as tokens in a queue.SimpleQueue: taking and returning one are
    single C calls, where threading.Semaphore runs a Python Condition (a new lock for every waiter), and every
    thread of a busy server queues here."""

    def __init__(self, count: int) -> None:
        self._tokens: queue_module.SimpleQueue[None] = queue_module.SimpleQueue()
        for _ in range(count):
            self._tokens.put(None)

    def acquire(self, timeout: float) -> bool:
        try:
            self._tokens.get(timeout=timeout)
        except queue_module.Empty:
            return False
        return True

    def release(self) -> None:
        self._tokens.put(None)


@dataclass
class MonitorRuntime:
    """The judging-state cache, the per-series locks, the series ids by labels, the alert sender and the judge slots
    of one process."""

    cache: HistoryCache
    locks: MonitorLocks
    series_ids: SeriesIds
    sender: Any  # DeliverySender; typed loosely so this module does not import threads it never starts
    # Appends waiting for the worker pool queue here, leaving the pool's own queue room for /forecast and
    # /anomalies, instead of being turned away as "saturated" under a burst of writes.
    judge_slots: JudgeSlots
    # SQLite only: this process's write transactions take turns here. SQLite has one writer, and a thread
    # that finds it busy sleeps in SQLite's busy handler for up to 100 ms at a time; a lock hands over at once.
    write_lock: threading.Lock | None = None


def build_runtime(database: Database, settings: Settings, *, judge_slots: int, public_url: str | None = None
                  ) -> MonitorRuntime:
    """A process's runtime; its sender is started by whoever serves alerts (the web process), never here."""
    from app.monitors.alerts.queue import RetryPolicy
    from app.monitors.alerts.sender import DeliverySender

    return MonitorRuntime(
        cache=HistoryCache(),
        locks=MonitorLocks(),
        series_ids=SeriesIds(),
        sender=DeliverySender(database, allow_private=settings.allow_private_webhooks,
                              policy=RetryPolicy.from_settings(settings), public_url=public_url),
        judge_slots=JudgeSlots(judge_slots),
        write_lock=threading.Lock() if database.engine.dialect.name == "sqlite" else None,
    )
