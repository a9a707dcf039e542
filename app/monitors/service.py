"""Monitor operations. Every function is keyword-only and works in its own database transaction.

Appending points is serialized per monitor: a process-local lock, plus on PostgreSQL a row lock on the
monitor (``SELECT ... FOR UPDATE``) held from reading the stored state to the commit, so writers in other
processes or hosts wait too. Every append also bumps the monitor's ``revision`` with a compare-and-set,
which makes a lost race visible on any database (SQLite across processes included): the loser retries
against the new state, so no point is lost and none is judged twice.
"""

from __future__ import annotations

import queue as queue_module
import secrets
import threading
import time
from array import array
from bisect import bisect_right
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Integer, Row, bindparam, delete, func, select
from sqlalchemy.orm import Session

from app.compute.detect.jobs import DetectJob
from app.compute.detect.results import DEFAULT_DETECTOR, DetectionResult, confidence_for_sensitivity
from app.compute.detect.streaming import WARMUP, StreamingDetector, Verdicts, lookback_rows
from app.compute.pool import PoolBusy, PoolError, WorkerPool
from app.db import Database, Prepared
from app.monitors import alertmanager, queue, sources
from app.monitors.cache import History, HistoryCache, JudgeState, MonitorLocks
from app.monitors.records import DeliveryAttemptRecord, MonitorEventRecord, MonitorPointRecord, MonitorRecord
from app.monitors.schemas import IncomingPoints
from app.monitors.webhooks import new_secret
from app.series.frequencies import MAX_PERIOD_ROWS
from app.web.errors import DataValidationError, InternalError, NotFound

# anomaly-model-2 (the rolling median) reads the series' first rows (its nominal spacing) and the last
# rows before each judged one: the first HEAD_ROWS points plus the last TAIL_ROWS are sent with new points.
HEAD_ROWS = 16
TAIL_ROWS = 64
NOT_ANOMALY = "not_anomaly"
# anomaly-model-1 keeps its state in this process; after a restart (or another process's write) the state is
# rebuilt by replaying the last REBUILD_ROWS stored points: what the state holds at the longest season.
REBUILD_ROWS = lookback_rows(MAX_PERIOD_ROWS)


def tail_rows(monitor: MonitorState) -> int:
    return min(TAIL_ROWS, monitor.retention_points)


# A saturated pool is a moment's queue, not a failure of the write: retry for this long before a 500.
POOL_BUSY_PATIENCE_SECONDS = 30.0
APPEND_ATTEMPTS = 5


@dataclass
class MonitorRuntime:
    """What one process keeps for monitors: the judging-state cache, the per-monitor locks, the sender."""

    cache: HistoryCache
    locks: MonitorLocks
    sender: Any  # DeliverySender; typed loosely so this module does not import threads it never starts
    # Appends waiting for the worker pool queue here, leaving the pool's own queue room for /forecast and
    # /anomalies, instead of being turned away as "saturated" under a burst of writes.
    judge_slots: JudgeSlots
    # SQLite only: this process's write transactions take turns here. SQLite has one writer, and a thread
    # that finds it busy sleeps in SQLite's busy handler for up to 100 ms at a time; a lock hands over at once.
    write_lock: threading.Lock | None = None


class _StaleRevision(Exception):
    """Another process changed the monitor between our read and our write."""


@dataclass
class MonitorState:
    """The monitor row as the append path reads it: a plain Core row copy, without the ORM's per-object
    bookkeeping (which cost more than the rest of the append's own work)."""

    id: str
    account_id: str
    name: str
    data_frequency: str
    confidence: float
    model: str | None
    retention_points: int
    webhook_url: str | None
    point_count: int
    first_epoch: int | None
    last_epoch: int | None
    revision: int
    relearn_revision: int
    event_seq: int
    open_anomaly_epoch: int | None
    sensitivity: int | None
    min_deviation: float
    min_relative_deviation: float
    alertmanager_url: str | None
    prometheus_query: str | None

    def detector(self) -> StreamingDetector:
        confidence = self.confidence if self.sensitivity is None else confidence_for_sensitivity(self.sensitivity)
        return StreamingDetector(
            data_frequency=self.data_frequency,
            confidence=confidence,
            floor=(self.min_deviation, self.min_relative_deviation),
        )


_STATE_COLUMNS = [MonitorRecord.__table__.c[name] for name in MonitorState.__dataclass_fields__]

# The append path's statements, built and compiled once (Prepared) and run on the transaction's DBAPI cursor:
# building a statement per append, the ORM session's bookkeeping and SQLAlchemy's execution machinery cost
# more per append than the database's own work and the detector together.
_MONITORS = MonitorRecord.__table__
_POINTS = MonitorPointRecord.__table__
_POINT = _POINTS.c
_READ_STATE = Prepared(select(*_STATE_COLUMNS).where(_MONITORS.c.id == bindparam("monitor_id")).with_for_update())
# The compare-and-set on revision: it comes first among the writes, and on SQLite it also takes the write lock.
_CLAIM_REVISION = Prepared(
    _MONITORS.update()
    .where(_MONITORS.c.id == bindparam("monitor_id"), _MONITORS.c.revision == bindparam("old_revision"))
    .values(
        revision=bindparam("new_revision"),
        point_count=bindparam("new_point_count"),
        first_epoch=bindparam("new_first_epoch"),
        last_epoch=bindparam("new_last_epoch"),
        event_seq=bindparam("new_event_seq"),
        open_anomaly_epoch=bindparam("new_open_anomaly_epoch"),
        updated_at=bindparam("new_updated_at"),
    )
)
_INSERT_POINTS = Prepared(_POINTS.insert())
_STORED_RANGE = select(_POINTS).where(
    _POINT.monitor_id == bindparam("monitor_id"), _POINT.epoch >= bindparam("first"), _POINT.epoch <= bindparam("last")
)
_HEAD = Prepared(
    select(_POINT.epoch, _POINT.value)
    .where(_POINT.monitor_id == bindparam("monitor_id"))
    .order_by(_POINT.epoch)
    .limit(HEAD_ROWS)
)
_TAIL_AFTER = Prepared(
    select(_POINT.epoch, _POINT.value)
    .where(_POINT.monitor_id == bindparam("monitor_id"), _POINT.epoch > bindparam("after"))
    .order_by(_POINT.epoch.desc())
    .limit(bindparam("rows", type_=Integer))
)
# The points another process stored after the last one a cached state has seen, oldest first: one more than a
# rebuild reads, so that a longer gap is rebuilt instead.
_POINTS_AFTER = Prepared(
    select(_POINT.epoch, _POINT.value, _POINT.feedback)
    .where(_POINT.monitor_id == bindparam("monitor_id"), _POINT.epoch > bindparam("after"))
    .order_by(_POINT.epoch)
    .limit(REBUILD_ROWS + 1)
)
_REBUILD = Prepared(
    select(_POINT.epoch, _POINT.value, _POINT.feedback)
    .where(_POINT.monitor_id == bindparam("monitor_id"))
    .order_by(_POINT.epoch.desc())
    .limit(REBUILD_ROWS)
)
# Retention: the newest of the ``dropped`` oldest points, then everything up to it.
_RETENTION_CUTOFF = Prepared(
    select(_POINT.epoch)
    .where(_POINT.monitor_id == bindparam("monitor_id"))
    .order_by(_POINT.epoch)
    .offset(bindparam("skip", type_=Integer))
    .limit(1)
)
_DROP_THROUGH = Prepared(
    _POINTS.delete().where(_POINT.monitor_id == bindparam("monitor_id"), _POINT.epoch <= bindparam("cutoff"))
)
_SET_FIRST_EPOCH = Prepared(
    _MONITORS.update().where(_MONITORS.c.id == bindparam("monitor_id")).values(first_epoch=bindparam("new_first_epoch"))
)
_ANOMALIES_SINCE = Prepared(
    select(func.count())
    .select_from(_POINTS)
    .where(_POINT.monitor_id == bindparam("monitor_id"), _POINT.epoch >= bindparam("since"),
           _POINT.is_anomaly.is_(True))
)
_TIMESTAMP_AT = Prepared(
    select(_POINT.timestamp).where(_POINT.monitor_id == bindparam("monitor_id"), _POINT.epoch == bindparam("epoch"))
)


def _one(cursor: Any) -> Any:
    """The first column of the cursor's first row, or None when there is no row."""
    row = cursor.fetchone()
    return None if row is None else row[0]


def _owned_state(connection: Connection, *, account_id: str, monitor_id: str) -> MonitorState:
    row = _READ_STATE.execute(connection, {"monitor_id": monitor_id}).fetchone()
    state = None if row is None else MonitorState(*row)
    if state is None or state.account_id != account_id:
        raise NotFound("No such monitor.", details={"field": "monitor_id", "issue": "not found", "provided":
                                                    monitor_id[:64]})
    return state


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _epoch_text(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_monitor_id() -> str:
    return "mon_" + secrets.token_hex(12)


# ---------------------------------------------------------------------------------------------- reading


def _owned(session: Session, *, account_id: str, monitor_id: str, for_update: bool = False) -> MonitorRecord:
    statement = select(MonitorRecord).where(MonitorRecord.id == monitor_id)
    if for_update:
        statement = statement.with_for_update()
    monitor = session.execute(statement).scalar_one_or_none()
    # Another account's monitor is answered exactly like a missing one, so ids reveal nothing.
    if monitor is None or monitor.account_id != account_id:
        raise NotFound("No such monitor.", details={"field": "monitor_id", "issue": "not found", "provided":
                                                    monitor_id[:64]})
    return monitor


def point_view(point: MonitorPointRecord) -> dict[str, Any]:
    return {
        "timestamp": point.timestamp,
        "value": point.value,
        "expected": point.expected,
        "lower_bound": point.lower,
        "upper_bound": point.upper,
        "anomaly_score": point.score,
        "is_anomaly": point.is_anomaly,
        "direction": point.direction,
        "warmup": point.warmup,
        "feedback": point.feedback,
    }


def monitor_view(monitor: MonitorRecord, *, last_timestamp: str | None) -> dict[str, Any]:
    return {
        "id": monitor.id,
        "name": monitor.name,
        "data_frequency": monitor.data_frequency,
        "confidence": monitor.confidence,
        "sensitivity": monitor.sensitivity,
        "min_deviation": monitor.min_deviation,
        "min_relative_deviation": monitor.min_relative_deviation,
        "model": monitor.model or DEFAULT_DETECTOR,
        "retention_points": monitor.retention_points,
        "webhook_url": monitor.webhook_url,
        **sources.view(monitor),
        "created_at": _iso(monitor.created_at),
        "updated_at": _iso(monitor.updated_at),
        "point_count": monitor.point_count,
        "last_timestamp": last_timestamp,
    }


def _last_points(session: Session, monitor_id: str, count: int) -> list[MonitorPointRecord]:
    if count <= 0:
        return []
    rows = session.execute(
        select(MonitorPointRecord)
        .where(MonitorPointRecord.monitor_id == monitor_id)
        .order_by(MonitorPointRecord.epoch.desc())
        .limit(count)
    ).scalars()
    return list(reversed(list(rows)))


def _open_anomalies(session: Session, monitor: MonitorRecord, limit: int = 100) -> list[dict[str, Any]]:
    if monitor.open_anomaly_epoch is None:
        return []
    rows = session.execute(
        select(MonitorPointRecord)
        .where(
            MonitorPointRecord.monitor_id == monitor.id,
            MonitorPointRecord.epoch >= monitor.open_anomaly_epoch,
            MonitorPointRecord.is_anomaly.is_(True),
        )
        .order_by(MonitorPointRecord.epoch)
        .limit(limit)
    ).scalars()
    return [point_view(p) for p in rows]


def describe_monitor(session: Session, monitor: MonitorRecord, *, points: int) -> dict[str, Any]:
    last = _last_points(session, monitor.id, max(points, 1))
    view = monitor_view(monitor, last_timestamp=last[-1].timestamp if last else None)
    view["open_anomalies"] = _open_anomalies(session, monitor)
    if points > 0:
        view["points"] = [point_view(p) for p in last]
    return view


def get_monitor(*, database: Database, account_id: str, monitor_id: str, points: int) -> dict[str, Any]:
    with database.session() as session:
        monitor = _owned(session, account_id=account_id, monitor_id=monitor_id)
        return describe_monitor(session, monitor, points=points)


def list_monitors(
    *, database: Database, account_id: str, points: int, limit: int, after: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    with database.session() as session:
        statement = select(MonitorRecord).where(MonitorRecord.account_id == account_id)
        if after:
            statement = statement.where(MonitorRecord.id > after)
        monitors = list(session.execute(statement.order_by(MonitorRecord.id).limit(limit + 1)).scalars())
        more = len(monitors) > limit
        monitors = monitors[:limit]
        views = [describe_monitor(session, m, points=points) for m in monitors]
    return views, (monitors[-1].id if more and monitors else None)


def history_for_forecast(
    *, database: Database, account_id: str, monitor_id: str, max_points: int
) -> tuple[MonitorRecord, list[int], list[str], list[float]]:
    with database.session() as session:
        monitor = _owned(session, account_id=account_id, monitor_id=monitor_id)
        rows = _last_points(session, monitor_id, max_points)
    # The forecast ahead starts from what the monitor judged normal: a flagged point counts as its expected
    # value, so one spike at the end does not send the forecast up (unless a user said it was normal).
    values = [p.expected if p.is_anomaly and p.feedback != NOT_ANOMALY else p.value for p in rows]
    return monitor, [p.epoch for p in rows], [p.timestamp for p in rows], values


# ---------------------------------------------------------------------------------------------- writing


def create_monitor(*, database: Database, account_id: str, fields: dict[str, Any]) -> dict[str, Any]:
    now = _now()
    secret = new_secret()
    monitor = MonitorRecord(
        id=new_monitor_id(),
        account_id=account_id,
        name=fields["name"],
        data_frequency=fields["data_frequency"],
        confidence=fields["confidence"],
        sensitivity=fields.get("sensitivity"),
        min_deviation=fields.get("min_deviation", 0.0),
        min_relative_deviation=fields.get("min_relative_deviation", 0.0),
        model=fields.get("model"),
        retention_points=fields["retention_points"],
        webhook_url=fields.get("webhook_url"),
        webhook_secret=secret,
        created_at=now,
        updated_at=now,
        point_count=0,
        first_epoch=None,
        last_epoch=None,
        revision=0,
        event_seq=0,
        open_anomaly_epoch=None,
    )
    sources.set_on_create(monitor, fields, now)
    with database.session() as session:
        session.add(monitor)
        session.flush()
        view = describe_monitor(session, monitor, points=0)
    view["webhook_secret"] = secret
    return view


def update_monitor(*, database: Database, account_id: str, monitor_id: str, changes: dict[str, Any],
                   allow_private: bool = False) -> dict[str, Any]:
    with database.session() as session:
        monitor = _owned(session, account_id=account_id, monitor_id=monitor_id, for_update=True)
        sources.check_fields(changes, monitor, allow_private=allow_private)
        sources.apply_changes(monitor, changes, _now())
        for name in ("name", "confidence", "webhook_url", "sensitivity", "min_deviation", "min_relative_deviation"):
            if name in changes:
                setattr(monitor, name, changes[name])
        monitor.updated_at = _now()
        session.flush()
        return describe_monitor(session, monitor, points=0)


def mark_not_anomaly(
    *, database: Database, runtime: MonitorRuntime, account_id: str, monitor_id: str, epoch: int
) -> dict[str, Any]:
    """Records a user's "not an anomaly" on a stored point. Its verdict stays as it was given; the detector
    learns the point as normal from now on: the monitor's revision moves, so every process rebuilds its
    state from the stored points with this one among the normal ones."""
    with runtime.locks.lock_for(monitor_id), database.session() as session:
        monitor = _owned(session, account_id=account_id, monitor_id=monitor_id, for_update=True)
        point = session.get(MonitorPointRecord, (monitor_id, epoch))
        if point is None:
            raise NotFound("No stored point at that timestamp.",
                           details={"field": "timestamp", "issue": "no stored point", "provided": _epoch_text(epoch)})
        point.feedback = NOT_ANOMALY
        monitor.revision += 1
        monitor.relearn_revision = monitor.revision
        monitor.updated_at = _now()
        session.flush()
        view = point_view(point)
    runtime.cache.drop(monitor_id)
    return view


def rotate_secret(*, database: Database, account_id: str, monitor_id: str) -> str:
    secret = new_secret()
    with database.session() as session:
        monitor = _owned(session, account_id=account_id, monitor_id=monitor_id, for_update=True)
        monitor.webhook_secret = secret
        monitor.updated_at = _now()
    return secret


def delete_monitor(*, database: Database, runtime: MonitorRuntime, account_id: str, monitor_id: str) -> None:
    with runtime.locks.lock_for(monitor_id), database.session() as session:
        _owned(session, account_id=account_id, monitor_id=monitor_id, for_update=True)
        # Explicit deletes, children first: SQLite enforces no ON DELETE CASCADE without a pragma.
        session.execute(delete(DeliveryAttemptRecord).where(DeliveryAttemptRecord.monitor_id == monitor_id))
        session.execute(delete(MonitorEventRecord).where(MonitorEventRecord.monitor_id == monitor_id))
        session.execute(delete(MonitorPointRecord).where(MonitorPointRecord.monitor_id == monitor_id))
        session.execute(delete(MonitorRecord).where(MonitorRecord.id == monitor_id))
    runtime.cache.drop(monitor_id)


def deliveries(*, database: Database, account_id: str, monitor_id: str, limit: int) -> list[dict[str, Any]]:
    with database.session() as session:
        _owned(session, account_id=account_id, monitor_id=monitor_id)
        events = list(
            session.execute(
                select(MonitorEventRecord)
                .where(MonitorEventRecord.monitor_id == monitor_id)
                .order_by(MonitorEventRecord.seq.desc())
                .limit(limit)
            ).scalars()
        )
        attempts: dict[str, list[DeliveryAttemptRecord]] = {}
        if events:
            for attempt in session.execute(
                select(DeliveryAttemptRecord)
                .where(DeliveryAttemptRecord.event_id.in_([e.id for e in events]))
                .order_by(DeliveryAttemptRecord.id)
            ).scalars():
                attempts.setdefault(attempt.event_id, []).append(attempt)
    return [
        {
            "event_id": event.id,
            "type": event.kind,
            "destination": event.destination,
            "sequence": event.seq,
            "status": event.status,
            "created_at": _iso(event.created_at),
            "next_attempt_at": _iso(event.next_attempt_at) if event.status in queue.ACTIVE else None,
            "delivered_at": _iso(event.delivered_at),
            "attempts": [
                {
                    "attempt": a.attempt,
                    "attempted_at": _iso(a.attempted_at),
                    "duration_ms": a.duration_ms,
                    "status_code": a.status_code,
                    "error": a.error,
                }
                for a in attempts.get(event.id, [])
            ],
        }
        for event in events
    ]


# ---------------------------------------------------------------------------------------------- points


def _load_history(connection: Connection, monitor: MonitorState) -> History:
    head = _HEAD.execute(connection, {"monitor_id": monitor.id}).fetchall()
    tail: list[Any] = []
    if head and monitor.point_count > len(head):
        tail = _TAIL_AFTER.execute(
            connection, {"monitor_id": monitor.id, "after": head[-1][0], "rows": tail_rows(monitor)}
        ).fetchall()
        tail.reverse()
    return History(
        revision=monitor.revision,
        head_epochs=[int(e) for e, _ in head],
        head_values=[float(v) for _, v in head],
        tail_epochs=array("q", (int(e) for e, _ in tail)),
        tail_values=array("d", (float(v) for _, v in tail)),
        after_head=max(0, monitor.point_count - len(head)),
    )


def _judge(pool: WorkerPool, job: DetectJob) -> DetectionResult:
    deadline = time.monotonic() + POOL_BUSY_PATIENCE_SECONDS
    pause = 0.005
    while True:
        try:
            return pool.submit(job)
        except PoolBusy as exc:
            if time.monotonic() + pause > deadline:
                error = InternalError(str(exc))
                error.headers["Retry-After"] = str(exc.retry_after or 5)
                raise error from exc
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        except PoolError as exc:
            raise InternalError(f"The points could not be judged: {exc}") from exc


@dataclass(frozen=True)
class _Verdict:
    expected: float
    lower: float
    upper: float
    score: float
    is_anomaly: bool
    direction: str | None
    warmup: bool


def _stored_verdicts(
    connection: Connection, monitor: MonitorState, points: IncomingPoints, count: int
) -> list[Any]:
    """The stored rows of the first ``count`` incoming points (all at or before the newest stored one);
    a 422 naming the index for one that conflicts or is older than the newest and not stored."""
    stored = {
        p.epoch: p
        for p in connection.execute(
            _STORED_RANGE, {"monitor_id": monitor.id, "first": points.epochs[0], "last": points.epochs[count - 1]}
        )
    }
    out: list[Any] = []
    for index in range(count):
        record = stored.get(points.epochs[index])
        if record is None:
            raise DataValidationError(
                "Invalid points: timestamp is older than the newest stored point.",
                details={"field": "timestamps", "issue": "older than the newest stored point and not stored",
                         "provided": points.texts[index], "index": index,
                         "newest_stored": _epoch_text(monitor.last_epoch or 0)},
            )
        if record.value != points.values[index]:
            raise DataValidationError(
                "Invalid points: timestamp already stored with a different value.",
                details={"field": "values", "issue": "conflicts with the value stored for this timestamp",
                         "provided": points.values[index], "index": index, "stored": record.value,
                         "timestamp": record.timestamp},
            )
        out.append(record)
    return out


def append_points(
    *,
    database: Database,
    pool: WorkerPool,
    runtime: MonitorRuntime,
    account_id: str,
    monitor_id: str,
    points: IncomingPoints,
    from_source: bool = False,
) -> dict[str, Any]:
    """Judges and stores new points; ``from_source`` is the Prometheus reader's call (a Prometheus-backed
    monitor takes points from nothing else)."""
    for _ in range(APPEND_ATTEMPTS):
        try:
            return _append_once(
                database=database, pool=pool, runtime=runtime, account_id=account_id, monitor_id=monitor_id,
                points=points, from_source=from_source,
            )
        except _StaleRevision:
            runtime.cache.drop(monitor_id)
    raise InternalError("The monitor kept changing under concurrent writes; retry the request.")


def _append_once(
    *,
    database: Database,
    pool: WorkerPool,
    runtime: MonitorRuntime,
    account_id: str,
    monitor_id: str,
    points: IncomingPoints,
    from_source: bool,
) -> dict[str, Any]:
    events_added = False
    # The judge slot is taken before a database connection, so appends queued for the worker pool never
    # hold connections (on PostgreSQL, a burst of writers would otherwise drain the connection pool).
    with runtime.locks.lock_for(monitor_id), _JudgeSlot(runtime):
        try:
            # A Core connection, one transaction: committed below with the points, rolled back on closing
            # otherwise. The ORM session's unit of work would have nothing to track here but costs as much.
            with database.engine.connect() as connection:
                connection.begin()
                monitor = _owned_state(connection, account_id=account_id, monitor_id=monitor_id)
                if monitor.prometheus_query is not None and not from_source:
                    raise sources.pushed_to_reader(monitor_id)
                last = monitor.last_epoch
                split = 0 if last is None else bisect_right(points.epochs, last)
                old_records = _stored_verdicts(connection, monitor, points, split) if split else []
                new_epochs = points.epochs[split:]
                new_values = points.values[split:]
                new_texts = points.texts[split:]
                verdicts: list[_Verdict] = []
                period: int | None = None
                judged: History | JudgeState | None = None
                if new_epochs:
                    if (monitor.model or DEFAULT_DETECTOR) == DEFAULT_DETECTOR:
                        judged = _judge_state(connection, runtime, monitor)
                        verdicts, period = _judge_streaming(monitor, judged, new_epochs, new_values)
                    else:
                        judged = runtime.cache.get(monitor.id, monitor.revision)
                        if not isinstance(judged, History) or not judged.usable(tail_rows(monitor)):
                            judged = _load_history(connection, monitor)
                        verdicts, period = _judge_new(pool, monitor, judged, new_epochs, new_values)
                    with runtime.write_lock or nullcontext():
                        events_added = _store(connection, monitor, new_epochs, new_texts, new_values, verdicts,
                                              judged)
                        connection.commit()
        except BaseException:
            # Judging and _store change the cached state in place; a transaction that did not commit leaves it
            # wrong.
            runtime.cache.drop(monitor_id)
            raise
        if judged is not None:
            runtime.cache.put(monitor_id, judged)
    if events_added:
        runtime.sender.notify()
    return _points_answer(monitor, old_records, new_texts, new_values, verdicts, period)


class JudgeSlots:
    """``count`` slots that appends take turns in, as tokens in a queue.SimpleQueue: taking and returning one are
    single C calls, where threading.Semaphore runs a Python Condition (a new lock for every waiter), which cost
    several per cent of the web process's CPU with every thread of a busy server queueing here."""

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


class _JudgeSlot:
    """A judge slot held for a with block (a class: a generator-based context manager costs more per append)."""

    __slots__ = ("_slots",)

    def __init__(self, runtime: MonitorRuntime) -> None:
        self._slots = runtime.judge_slots

    def __enter__(self) -> None:
        if not self._slots.acquire(timeout=POOL_BUSY_PATIENCE_SECONDS):
            raise InternalError("The detector workers are saturated; retry shortly.", headers={"Retry-After": "5"})

    def __exit__(self, *_exc: object) -> None:
        self._slots.release()


def _judge_new(
    pool: WorkerPool, monitor: MonitorState, history: History, epochs: list[int], values: list[float]
) -> tuple[list[_Verdict], int | None]:
    import numpy as np
    hist_epochs, hist_values = history.series(tail_rows(monitor))
    job = DetectJob(
        epoch_seconds=np.concatenate([hist_epochs, np.asarray(epochs, dtype=np.int64)]),
        values=np.concatenate([hist_values, np.asarray(values, dtype=np.float64)]),
        data_frequency=monitor.data_frequency,
        confidence=monitor.confidence,
        detector=monitor.model,
        start=len(hist_epochs),
    )
    result = _judge(pool, job)
    return _verdicts(result, len(epochs), warm=result.warmup_points - len(hist_epochs)), result.period


def _verdicts(result: DetectionResult | Verdicts, count: int, *, warm: int) -> list[_Verdict]:
    """One _Verdict per judged row; the first ``warm`` of them are warm-up rows."""
    return [
        _Verdict(
            expected=result.expected[i],
            lower=result.lower[i],
            upper=result.upper[i],
            score=result.score[i],
            is_anomaly=bool(result.is_anomaly[i]),
            direction=result.direction[i],
            warmup=i < warm,
        )
        for i in range(count)
    ]


def _judge_state(connection: Connection, runtime: MonitorRuntime, monitor: MonitorState) -> JudgeState:
    """The detector's state after the stored points: this process's own; or its own advanced over the points
    other processes stored since (when nothing else changed), as if it had judged them itself; or rebuilt from
    the last REBUILD_ROWS stored points (feedback included), after a restart or a "not an anomaly"."""
    cached = runtime.cache.peek(monitor.id)
    if isinstance(cached, JudgeState):
        if cached.revision == monitor.revision:
            return cached
        if cached.revision >= monitor.relearn_revision and cached.last_epoch is not None:
            rows = _POINTS_AFTER.execute(connection, {"monitor_id": monitor.id, "after": cached.last_epoch}).fetchall()
            if len(rows) <= REBUILD_ROWS:
                _advance(monitor, cached, rows)
                return cached
    rows = _REBUILD.execute(connection, {"monitor_id": monitor.id}).fetchall()
    rows.reverse()
    judged = JudgeState(revision=monitor.revision, detector=monitor.detector().initial_state(), size=0)
    _advance(monitor, judged, rows)
    return judged


def _advance(monitor: MonitorState, judged: JudgeState, rows: Sequence[Row[Any]]) -> None:
    """Feeds stored (epoch, value, feedback) rows to the state; it is then the state at the monitor's revision."""
    if rows:
        monitor.detector().update(judged.detector, [float(r[0]) for r in rows], [float(r[1]) for r in rows],
                                  normal=[r[2] == NOT_ANOMALY for r in rows])
        judged.last_epoch = int(rows[-1][0])
    judged.revision = monitor.revision
    judged.size = StreamingDetector.size(judged.detector)


def _judge_streaming(
    monitor: MonitorState, judged: JudgeState, epochs: list[int], values: list[float]
) -> tuple[list[_Verdict], int | None]:
    state = judged.detector
    before = state.rows
    result = monitor.detector().update(state, [float(e) for e in epochs], values)
    judged.size = StreamingDetector.size(state)
    return _verdicts(result, len(epochs), warm=WARMUP - before), state.period or None


def _store(
    connection: Connection,
    monitor: MonitorState,
    epochs: list[int],
    texts: list[str],
    values: list[float],
    verdicts: list[_Verdict],
    judged: History | JudgeState,
) -> bool:
    """Writes the judged points, the events they raise, retention, and the monitor's new state; updates
    ``history`` in place to the new revision (the caller caches it only once this transaction commits)."""
    now = _now()
    old_revision = monitor.revision
    open_epoch = monitor.open_anomaly_epoch
    seq = monitor.event_seq
    planned: list[tuple[int, str, dict[str, Any], str]] = []
    run_count: int | None = None
    for epoch, text, value, verdict in zip(epochs, texts, values, verdicts, strict=True):
        if verdict.warmup:
            continue
        point = {"timestamp": text, "value": value, "expected": verdict.expected, "lower_bound": verdict.lower,
                 "upper_bound": verdict.upper, "anomaly_score": verdict.score, "direction": verdict.direction}
        if verdict.is_anomaly:
            if open_epoch is None:
                open_epoch, run_count = epoch, 0
            elif run_count is None:
                run_count = _anomalies_since(connection, monitor.id, open_epoch)
            if run_count == 0 and monitor.alertmanager_url:
                seq += 1
                planned.append((seq, "firing", alertmanager.firing(monitor, epoch, point), alertmanager.DESTINATION))
            run_count += 1
            if monitor.webhook_url:
                seq += 1
                planned.append((seq, "anomaly", {"point": point}, "webhook"))
        elif open_epoch is not None:
            if run_count is None:
                run_count = _anomalies_since(connection, monitor.id, open_epoch)
            if monitor.webhook_url:
                seq += 1
                run = {"started_at": _timestamp_at(connection, monitor.id, open_epoch, epochs, texts),
                       "ended_at": text, "anomalous_points": run_count}
                planned.append((seq, "anomaly_ended", {"run": run, "point": point}, "webhook"))
            if monitor.alertmanager_url:
                seq += 1
                planned.append((seq, "resolved", alertmanager.resolved(monitor, open_epoch, epoch, point),
                                alertmanager.DESTINATION))
            open_epoch, run_count = None, None

    stored_after = monitor.point_count + len(epochs)
    dropped = max(0, stored_after - monitor.retention_points)
    claimed = _CLAIM_REVISION.execute(connection, {
        "monitor_id": monitor.id,
        "old_revision": old_revision,
        "new_revision": old_revision + 1,
        "new_point_count": stored_after - dropped,
        "new_first_epoch": monitor.first_epoch if monitor.first_epoch is not None else epochs[0],
        "new_last_epoch": epochs[-1],
        "new_event_seq": seq,
        "new_open_anomaly_epoch": open_epoch,
        "new_updated_at": now,
    })
    if claimed.rowcount != 1:
        raise _StaleRevision
    rows = [
        {"monitor_id": monitor.id, "epoch": e, "timestamp": t, "value": v, "expected": d.expected,
         "lower": d.lower, "upper": d.upper, "score": d.score, "is_anomaly": d.is_anomaly,
         "direction": d.direction, "warmup": d.warmup, "feedback": None}
        for e, t, v, d in zip(epochs, texts, values, verdicts, strict=True)
    ]
    if len(rows) == 1:
        _INSERT_POINTS.execute(connection, rows[0])
    else:
        _INSERT_POINTS.executemany(connection, rows)
    for event_seq, kind, extra, destination in planned:
        event_id = queue.new_event_id()
        payload = {"id": event_id, "type": kind, "monitor_id": monitor.id, "monitor_name": monitor.name,
                   "sequence": event_seq, "created_at": _iso(now), **extra}
        url = monitor.webhook_url if destination == "webhook" else monitor.alertmanager_url
        queue.enqueue(connection, monitor_id=monitor.id, webhook_url=url or "", seq=event_seq, kind=kind,
                      payload=payload, now=now, destination=destination)
    history = judged if isinstance(judged, History) else None
    if history is not None:
        history.append(epochs, values, head_rows=HEAD_ROWS, tail_rows=tail_rows(monitor))
    if dropped:
        cutoff = _one(_RETENTION_CUTOFF.execute(connection, {"monitor_id": monitor.id, "skip": dropped - 1}))
        if cutoff is not None:
            _DROP_THROUGH.execute(connection, {"monitor_id": monitor.id, "cutoff": cutoff})
        head = _HEAD.execute(connection, {"monitor_id": monitor.id}).fetchall()
        first = head[0][0] if head else None
        _SET_FIRST_EPOCH.execute(connection, {"monitor_id": monitor.id, "new_first_epoch": first})
        if history is not None:
            history.replace_head([int(e) for e, _ in head], [float(v) for _, v in head], stored_after - dropped)
    judged.revision = old_revision + 1
    if isinstance(judged, JudgeState):
        judged.last_epoch = epochs[-1]
    monitor.revision = old_revision + 1
    monitor.point_count = stored_after - dropped
    monitor.last_epoch = epochs[-1]
    return bool(planned)


def _anomalies_since(connection: Connection, monitor_id: str, epoch: int) -> int:
    return int(_one(_ANOMALIES_SINCE.execute(connection, {"monitor_id": monitor_id, "since": epoch})))


def _timestamp_at(connection: Connection, monitor_id: str, epoch: int, epochs: list[int], texts: list[str]) -> str:
    position = bisect_right(epochs, epoch) - 1
    if position >= 0 and epochs[position] == epoch:
        return texts[position]
    text = _one(_TIMESTAMP_AT.execute(connection, {"monitor_id": monitor_id, "epoch": epoch}))
    return text or _epoch_text(epoch)


def _points_answer(
    monitor: MonitorState,
    old_records: list[Any],
    texts: list[str],
    values: list[float],
    verdicts: list[_Verdict],
    period: int | None,
) -> dict[str, Any]:
    rows = [point_view(r) for r in old_records] + [
        {"timestamp": t, "value": v, "expected": d.expected, "lower_bound": d.lower, "upper_bound": d.upper,
         "anomaly_score": d.score, "is_anomaly": d.is_anomaly, "direction": d.direction, "warmup": d.warmup}
        for t, v, d in zip(texts, values, verdicts, strict=True)
    ]
    warmup = 0
    while warmup < len(rows) and rows[warmup]["warmup"]:
        warmup += 1
    return {
        "monitor_id": monitor.id,
        "timestamps": [r["timestamp"] for r in rows],
        "values": [r["value"] for r in rows],
        "expected": [r["expected"] for r in rows],
        "lower_bound": [r["lower_bound"] for r in rows],
        "upper_bound": [r["upper_bound"] for r in rows],
        "anomaly_score": [r["anomaly_score"] for r in rows],
        "is_anomaly": [r["is_anomaly"] for r in rows],
        "direction": [r["direction"] for r in rows],
        "warmup_points": warmup,
        "period": period,
        "new_points": len(verdicts),
        "duplicate_points": len(old_records),
        "point_count": monitor.point_count,
    }

