"""Reading Prometheus-backed monitors: each due monitor's query is read and its new points judged with the same
append as POST /monitors/{id}/points (the poller that runs the rounds is app.monitors.prometheus.poller).

Each round claims the monitors whose next read is due, a batch at a time, by a
compare-and-set on ``source_due_at`` (which becomes the claim's lease), and reads them READ_CONCURRENCY at a time.

A read asks ``query_range`` (app.monitors.prometheus.promql: the window of steps, the call, the answer parsed) for
the steps after the last one read (``source_read_until``); a new monitor starts BACKFILL_POINTS steps back. Every
series the query yields is one of the monitor's series (by its labels), all judged in one batch. A read that fails (no
series, Prometheus unreachable, slow, or answering an error) is stored as the monitor's source status and
message, and the next read starts from the same place, so an outage leaves no gap once Prometheus answers again."""

from __future__ import annotations

import logging
import math
import os
import secrets
import time
from collections import Counter, deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from datetime import UTC, datetime, timedelta
from functools import cache
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import bindparam, func, select, update

from app.db import Database
from app.errors import InvalidInput, NotFound, ServiceError
from app.monitors import sources
from app.monitors.intake.points import IncomingPoints
from app.monitors.label_sets import label_problem
from app.monitors.prometheus.promql import (
    ERROR,
    NO_SERIES,
    OK,
    SETTLE_SECONDS,
    TIMEOUT,
    UNREACHABLE,
    Claimed,
    ReadResult,
    Window,
    query_range,
    step_text,
    window,
)
from app.monitors.records import monitor_series_table, monitors_table
from app.settings import Settings

log = logging.getLogger("app.monitors.prometheus")

POLL_SECONDS = 2.0
CLAIM_BATCH = 200
# A claimed monitor is this poller's for this long; a poller that dies mid-read leaves it to the next.
CLAIM_LEASE_SECONDS = 60.0
READ_CONCURRENCY = 8
# One account's monitors are read by at most this many readers at once: its sources hanging cost the others a
# quarter of the readers, not all of them.
ACCOUNT_READERS = 2
# A poller round stops claiming after this long, so it renews its lease (POLLER_LEASE_SECONDS) in time.
ROUND_SECONDS = 10.0
# While reads are under way a round looks for monitors fallen due this often (one UPDATE when none are).
RECLAIM_SECONDS = 0.5
# A Prometheus that was unreachable or slow is not asked again by the same account's other reads for this long.
FAILURE_MEMORY_SECONDS = 5.0
# Past this many remembered failures, the expired ones are forgotten.
FAILURES_KEPT = 1024
# A read's outcome message is stored and logged at most this long.
MESSAGE_CHARS = 500



def _now() -> datetime:
    return datetime.now(UTC)


_TABLE = monitors_table
_SERIES = monitor_series_table
_SERIES_COUNT = (select(func.count()).select_from(_SERIES).where(_SERIES.c.monitor_id == _TABLE.c.id)
                 .scalar_subquery())
_CLAIMED_COLUMNS = (_TABLE.c.id, _TABLE.c.account_id, _TABLE.c.data_frequency, _TABLE.c.retention_points,
                    _TABLE.c.prometheus_url, _TABLE.c.prometheus_query, _SERIES_COUNT,
                    _TABLE.c.source_read_until, _TABLE.c.source_claim)


@cache
def _claim_statement(row_locks: bool, limit: int) -> Any:
    due = (
        select(_TABLE.c.id)
        .where(_TABLE.c.prometheus_query.is_not(None), _TABLE.c.source_due_at <= bindparam("now"))
        .order_by(_TABLE.c.source_due_at)
        .limit(limit)
    )
    if row_locks:
        due = due.with_for_update(skip_locked=True)
    # The due condition again outside: on PostgreSQL a row another claim updated meanwhile is re-checked.
    return (
        update(_TABLE)
        .where(_TABLE.c.id.in_(due.scalar_subquery()), _TABLE.c.source_due_at <= bindparam("now"))
        .values(source_due_at=bindparam("lease_end"), source_claim=bindparam("token"))
    )


@cache
def _claimed_statement() -> Any:
    return select(*_CLAIMED_COLUMNS).where(_TABLE.c.source_claim == bindparam("token"))


@cache
def _record_statement(checked: bool) -> Any:
    """A read's outcome and the next due time, releasing the claim; only while the claim is still this one's
    and the query still the one read (a PATCH in between made the monitor due again at once)."""
    values: dict[str, Any] = {"source_due_at": bindparam("b_due"), "source_read_until": bindparam("b_read_until"),
                              "source_claim": None}
    if checked:
        values.update(source_status=bindparam("b_status"), source_message=bindparam("b_message"),
                      source_checked_at=bindparam("b_checked"))
    return (
        update(_TABLE)
        .where(_TABLE.c.id == bindparam("b_id"), _TABLE.c.prometheus_query == bindparam("b_query"),
               _TABLE.c.prometheus_url == bindparam("b_url"), _TABLE.c.source_claim == bindparam("b_claim"))
        .values(**values)
    )


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def _storable(message: str | None) -> str:
    """An outcome message as stored and logged: Prometheus' own error text is the server's to choose, so it is
    cut short and rid of what a database column cannot hold (PostgreSQL refuses NUL) or a log should not carry."""
    text = (message or "")[:MESSAGE_CHARS]
    return "".join(ch if ch.isprintable() else " " for ch in text)


class Reader:
    """What one worker process needs to read and judge: the database, and the runtime and pool the append
    path takes. Built once per process (a forked worker must not share its parent's connections)."""

    def __init__(self, settings: Settings) -> None:
        from app.compute.pool import WorkerPool
        from app.monitors.state.runtime import build_runtime

        self.settings = settings
        self.database = Database(settings)
        # Only the non-default detectors use the pool; it spawns its worker on first use.
        self.pool = WorkerPool(workers=1, timeout_seconds=settings.forecast_timeout_seconds,
                               queue_limit=READ_CONCURRENCY)
        # Its sender is never started: the servers' senders find the events this process stores (they poll the
        # queue).
        self.runtime = build_runtime(self.database, settings, judge_slots=READ_CONCURRENCY)
        self.pid = os.getpid()
        # (account, Prometheus server: scheme, host and port) -> (until when, the failed read's outcome), shared by
        # the reader threads: an account's monitors on other paths of a server that hangs wait out the same
        # failure. Per account, since a timeout may be one account's heavy query rather than the server: another
        # account's healthy monitor on that server must not take it.
        self._failing: dict[tuple[str, str], tuple[float, ReadResult]] = {}

    def close(self) -> None:
        self.pool.close()
        self.database.dispose()

    # ------------------------------------------------------------------------------------------- claiming

    def claim(self, now: datetime, limit: int = CLAIM_BATCH) -> list[Claimed]:
        """Takes up to ``limit`` due monitors in one statement, marked with a fresh token, then reads them back
        by it. On PostgreSQL the due rows are locked with SKIP LOCKED, so two pollers never wait on each
        other; SQLite runs the statement under its one write lock. (One statement for all, not a compare-and-set
        UPDATE per monitor: claiming then costs no more statements than the monitors' read does.)"""
        token = secrets.token_hex(8)
        with self.database.transaction() as connection:
            connection.execute(_claim_statement(self.database.engine.dialect.name == "postgresql", limit),
                               {"now": now, "lease_end": now + timedelta(seconds=CLAIM_LEASE_SECONDS), "token": token})
            rows = connection.execute(_claimed_statement(), {"token": token}).all()
        return [Claimed(*row) for row in rows]

    def next_due(self) -> datetime | None:
        with self.database.transaction() as connection:
            return connection.execute(
                select(_TABLE.c.source_due_at).where(_TABLE.c.prometheus_query.is_not(None))
                .order_by(_TABLE.c.source_due_at).limit(1)
            ).scalar_one_or_none()

    # -------------------------------------------------------------------------------------------- reading

    def read(self, monitor: Claimed) -> None:
        """Reads and judges one claimed monitor, then records the outcome and when it is next due."""
        started = time.time()
        span = window(monitor, started)
        status, message, read_until = OK, None, monitor.read_until
        if span is None:
            step = sources.STEP_SECONDS[monitor.data_frequency]
            due = (math.floor((started - SETTLE_SECONDS) / step) + 1) * step + SETTLE_SECONDS
            self._record(monitor, status=None, message=None, read_until=read_until, due=due, checked=False)
            return
        result = self._query(monitor, span)
        while result.too_large and span.end > span.start:  # fewer steps until the answer fits
            span = window(monitor, started, most_steps=max(1, (span.end - span.start) // span.step // 2))
            assert span is not None
            result = self._query(monitor, span)
        status, message = result.status, result.message
        if result.status == OK:
            try:
                message += self._store(monitor, result)
            except NotFound:
                return  # deleted while it was read
            except ServiceError as exc:
                status, message = ERROR, f"The points read could not be judged: {exc}"
            if status == OK:
                read_until = span.end
        elif result.status == NO_SERIES and span.catching_up:
            read_until = span.end  # a stretch of history with no data at all: nothing there to wait for
        if status == OK and span.catching_up:
            due = time.time()
        elif status in (OK, NO_SERIES):
            due = span.latest + span.step + SETTLE_SECONDS
        else:
            # Prometheus failed: ask again soon (never more often than the poller's pace).
            due = time.time() + min(30.0, max(POLL_SECONDS, float(span.step)))
        self._record(monitor, status=status, message=message, read_until=read_until, due=due, checked=True)

    def _query(self, monitor: Claimed, span: Window) -> ReadResult:
        origin = (monitor.account_id, _origin(monitor.prometheus_url))
        remembered = self._failing.get(origin)
        if remembered is not None and remembered[0] >= time.time():
            return remembered[1]
        result = query_range(monitor, span, allow_private=self.settings.allow_private_webhooks,
                             timeout=self.settings.prometheus_timeout_seconds)
        if result.status in (UNREACHABLE, TIMEOUT):
            # Every monitor of the account on this Prometheus would wait out the same failure: they take this one's
            # outcome until their own retry, so a stalled server holds a few readers, not one per monitor.
            now = time.time()
            if len(self._failing) >= FAILURES_KEPT:
                self._failing = {k: v for k, v in self._failing.items() if v[0] >= now}
            self._failing[origin] = (now + FAILURE_MEMORY_SECONDS, result)
        else:
            self._failing.pop(origin, None)
        return result

    def _store(self, monitor: Claimed, result: ReadResult) -> str:
        """Judges and stores every series read, in batches of at most INGEST_POINTS points; what the outcome's
        message adds (series the cap or their labels refused)."""
        from app.monitors.intake import ingest, transactions

        batch: list[ingest.SeriesPoints] = []
        unusable = 0
        for read in result.series:
            if label_problem(dict(read.labels)) is not None:
                unusable += 1
                continue
            batch.append(ingest.SeriesPoints(monitor.id, read.labels, IncomingPoints(
                epochs=read.epochs, texts=[step_text(e) for e in read.epochs], values=read.values)))
        over_cap = unjudged = 0
        for outcome in transactions.append_chunked(database=self.database, pool=self.pool, runtime=self.runtime,
                                                   account_id=monitor.account_id, batch=batch, from_source=True,
                                                   lenient=True):
            if isinstance(outcome, ingest.PointsNotJudged):  # read again, they would fail again
                unjudged += 1
            elif isinstance(outcome, InvalidInput):
                over_cap += 1
            elif isinstance(outcome, ServiceError):
                raise outcome
        extra = ""
        if over_cap:
            extra += (f" {over_cap:,} series were not read: the monitor follows its most series "
                      f"(MAX_SERIES_PER_MONITOR, {self.settings.max_series_per_monitor:,}); their points are counted "
                      "in series_refused.")
        if unusable:
            extra += f" {unusable:,} series were skipped: their labels are too large."
        if unjudged:
            extra += (f" {unjudged:,} series' points could not be judged and were skipped; their detectors are "
                      "rebuilt from their stored points.")
        return extra

    def _record(self, monitor: Claimed, *, status: str | None, message: str | None, read_until: int | None,
                due: float, checked: bool) -> None:
        values: dict[str, Any] = {"b_id": monitor.id, "b_query": monitor.prometheus_query,
                                  "b_url": monitor.prometheus_url, "b_claim": monitor.claim,
                                  "b_due": datetime.fromtimestamp(due, UTC), "b_read_until": read_until}
        if checked:
            values.update(b_status=status, b_message=_storable(message), b_checked=_now())
        with self.database.transaction() as connection:
            connection.execute(_record_statement(checked), values)
        if status not in (None, OK):
            log.info("prometheus read failed", extra={"fields": {"monitor_id": monitor.id, "status": status,
                                                                 "message": _storable(message)}})

    def round(self, executor: ThreadPoolExecutor) -> int:
        """Reads monitors as they fall due, READ_CONCURRENCY at a time and at most ACCOUNT_READERS of one account
        at once, claiming more whenever a reader is free: a read that hangs holds its reader, not the monitors that
        fall due meanwhile (they waited for it, up to a whole timeout late). Starts no read after ROUND_SECONDS, so
        the round ends within that plus one read's timeout, well within the poller's lease, and hands back what it
        claimed and did not start (due again at once). Returns how many were read."""
        ends = time.monotonic() + ROUND_SECONDS
        waiting: deque[Claimed] = deque()
        running: dict[Future[None], Claimed] = {}
        per_account: Counter[str] = Counter()
        started, more_due, next_claim = 0, True, 0.0
        while True:
            now = time.monotonic()
            if now < ends:
                started += self._start(executor, waiting, running, per_account)
                if len(running) < READ_CONCURRENCY and (more_due or now >= next_claim):
                    claimed = self.claim(_now())
                    more_due, next_claim = len(claimed) == CLAIM_BATCH, now + RECLAIM_SECONDS
                    waiting.extend(claimed)
                    started += self._start(executor, waiting, running, per_account)
            if not running:
                if now < ends and more_due:
                    continue
                break  # nothing was due at the last claim, or the round is over
            done, _ = wait(running, timeout=RECLAIM_SECONDS, return_when=FIRST_COMPLETED)
            for future in done:
                per_account[running.pop(future).account_id] -= 1
        if waiting:
            self._release(list(waiting))
        return started

    def _start(self, executor: ThreadPoolExecutor, waiting: deque[Claimed], running: dict[Future[None], Claimed],
               per_account: Counter[str]) -> int:
        """Starts waiting monitors while readers are free, skipping (and keeping, in order) those whose account
        holds its ACCOUNT_READERS already."""
        held: list[Claimed] = []
        started = 0
        while waiting and len(running) < READ_CONCURRENCY:
            monitor = waiting.popleft()
            if per_account[monitor.account_id] >= ACCOUNT_READERS:
                held.append(monitor)
                continue
            running[executor.submit(self._safe_read, monitor)] = monitor
            per_account[monitor.account_id] += 1
            started += 1
        waiting.extendleft(reversed(held))
        return started

    def _release(self, monitors: list[Claimed]) -> None:
        with self.database.transaction() as connection:
            connection.execute(
                update(_TABLE)
                .where(_TABLE.c.id.in_([m.id for m in monitors]), _TABLE.c.source_claim == monitors[0].claim)
                .values(source_due_at=_now(), source_claim=None)
            )

    def _safe_read(self, monitor: Claimed) -> None:
        try:
            self.read(monitor)
        except Exception as exc:  # noqa: BLE001 - one monitor's failure must not stop the others
            log.exception("reading a Prometheus-backed monitor failed", extra={"fields": {"monitor_id": monitor.id}})
            # Said in the monitor's state and tried again later, never left pending with the claim to run out.
            try:
                step = float(sources.STEP_SECONDS[monitor.data_frequency])
                self._record(monitor, status=ERROR, message=f"The read failed unexpectedly ({type(exc).__name__}).",
                             read_until=monitor.read_until, due=time.time() + min(30.0, max(POLL_SECONDS, step)),
                             checked=True)
            except Exception:  # noqa: BLE001 - the database itself failed: the claim's lease runs out instead
                log.exception("recording a failed read failed", extra={"fields": {"monitor_id": monitor.id}})
