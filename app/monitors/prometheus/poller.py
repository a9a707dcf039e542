"""The Prometheus poller on the job engine: one runs at a time (whoever holds the "prometheus-poller" lease); it
re-schedules itself every POLL_SECONDS, and a periodic task (every minute, in every consumer that runs the
scheduler) restarts it when its lease ran out (a killed worker). Each round is app.monitors.prometheus.reader's."""

from __future__ import annotations

import gc
import os
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

from sqlalchemy import insert, select, update
from sqlalchemy.exc import IntegrityError

from app.db import Database
from app.monitors.prometheus.reader import POLL_SECONDS, READ_CONCURRENCY, Reader
from app.monitors.records import job_leases_table
from app.settings import Settings

if TYPE_CHECKING:
    from huey import Huey

LEASE_NAME = "prometheus-poller"
# The poller's own lease: renewed every round, so a dead poller is replaced within a minute.
POLLER_LEASE_SECONDS = 30.0
# Huey's task priority for the poller (higher runs first).
PRIORITY = 100


def _now() -> datetime:
    return datetime.now(UTC)


# ------------------------------------------------------------------------------------------------ the lease


def take_lease(database: Database, *, holder: str, now: datetime | None = None, renew: bool = False) -> bool:
    """The poller's lease for ``holder``: renewed if it holds it, taken if it ran out (or never existed)."""
    now = now or _now()
    expires = now + timedelta(seconds=POLLER_LEASE_SECONDS)
    table = job_leases_table
    with database.transaction() as connection:
        condition = table.c.holder == holder if renew else (table.c.holder == holder) | (table.c.expires_at < now)
        result = connection.execute(
            update(table).where(table.c.name == LEASE_NAME, condition).values(holder=holder, expires_at=expires)
        )
        if result.rowcount == 1:  # type: ignore[attr-defined]
            return True
        if renew or connection.execute(select(table.c.name).where(table.c.name == LEASE_NAME)).first() is not None:
            return False
    try:
        with database.transaction() as connection:
            connection.execute(insert(table).values(name=LEASE_NAME, holder=holder, expires_at=expires))
        return True
    except IntegrityError:
        return False


# ------------------------------------------------------------------------------------------------ the tasks


@dataclass
class _Tasks:
    kick: Callable[[], Any]


_TASKS: WeakKeyDictionary[Huey, _Tasks] = WeakKeyDictionary()
_readers: dict[int, Reader] = {}
_executors: dict[int, ThreadPoolExecutor] = {}


def _reader(settings: Settings) -> Reader:
    pid = os.getpid()
    reader = _readers.get(pid)
    if reader is None:
        _readers.clear()
        reader = _readers[pid] = Reader(settings)
        gc.freeze()  # as a web process does (app/serving/hooks.py): full collections skip what lives as long
    return reader


def _executor() -> ThreadPoolExecutor:
    pid = os.getpid()
    executor = _executors.get(pid)
    if executor is None:
        _executors.clear()
        executor = _executors[pid] = ThreadPoolExecutor(READ_CONCURRENCY, thread_name_prefix="prometheus-read")
    return executor


def start_poller(engine: Huey) -> None:
    """Starts the poller now unless one runs (a new Prometheus-backed monitor backfills at once)."""
    tasks = _TASKS.get(engine)
    if tasks is not None:
        tasks.kick()


def register(engine: Huey, settings: Settings) -> None:
    from huey import crontab  # Huey loads with the engine, not with this module

    from app.monitors import retirement
    from app.monitors.alerts import alertmanager

    # Above the batch tasks that share the queue: a read waiting behind them is a late verdict.
    @engine.task(name="monitors.prometheus.poll", priority=PRIORITY)
    def poll(holder: str) -> None:
        reader = _reader(settings)
        if not take_lease(reader.database, holder=holder, renew=True):
            return  # another poller took over (this one's lease had run out)
        executor = _executor()
        reader.round(executor)
        # Reads fall due together (every monitor of a frequency on the same step); one due within a round's
        # pace is waited for here, to the moment, rather than through the scheduler's one-second ticks.
        due = reader.next_due()
        wait = POLL_SECONDS if due is None else (due - _now()).total_seconds()
        if 0 < wait < POLL_SECONDS:
            time.sleep(wait)
            if not take_lease(reader.database, holder=holder, renew=True):
                return
            reader.round(executor)
            due = reader.next_due()
            wait = POLL_SECONDS if due is None else (due - _now()).total_seconds()
        poll.schedule((holder,), delay=min(POLL_SECONDS, max(0.0, wait)))

    @engine.task(name="monitors.prometheus.kick", priority=PRIORITY)
    def kick() -> None:
        holder = secrets.token_hex(8)
        if take_lease(_reader(settings).database, holder=holder):
            poll(holder)

    @engine.periodic_task(crontab(minute="*"), name="monitors.prometheus.watchdog")
    def watchdog() -> None:
        kick.call_local()

    @engine.periodic_task(crontab(minute="*"), name="monitors.alertmanager.refresh")
    def refresh() -> None:
        alertmanager.refresh_alerts(_reader(settings).database)

    @engine.periodic_task(crontab(minute="*"), name="monitors.series.retire")
    def retire() -> None:
        retirement.retire_series(_reader(settings).database, retire_seconds=settings.monitor_series_retire_seconds)

    @engine.on_startup(name="monitors.prometheus.start")
    def started() -> None:
        kick()

    _TASKS[engine] = _Tasks(kick=kick)
