"""A monitor's rows in SQL: the monitor as the append path reads it, its stored points, and the one transaction
that writes judged points, their events and retention.

Appending is serialized per monitor: a process-local lock (app.monitors.cache), plus on PostgreSQL a row lock on
the monitor (``SELECT ... FOR UPDATE``) held from reading the stored state to the commit, so writers in other
processes or hosts wait too. Every write also bumps the monitor's ``revision`` with a compare-and-set, which
makes a lost race visible on any database (SQLite across processes included): the loser retries against the
new state, so no point is lost and none is judged twice.
"""

from __future__ import annotations

import secrets
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Integer, bindparam, func, select
from sqlalchemy.orm import Session

from app.compute.detect.budget import budget_for_sensitivity
from app.compute.detect.streaming import StreamingDetector, lookback_rows
from app.db import Prepared
from app.monitors import queue
from app.monitors.cache import History, JudgeState
from app.monitors.records import MonitorPointRecord, MonitorRecord
from app.monitors.schemas import IncomingPoints
from app.series.frequencies import MAX_PERIOD_ROWS
from app.web.errors import DataValidationError, NotFound

if TYPE_CHECKING:
    from app.monitors.incidents import IncidentPlan
    from app.monitors.judge import Verdict

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


class StaleRevision(Exception):
    """Another process changed the monitor between our read and our write."""


@dataclass
class MonitorState:
    """The monitor row as the append path reads it: a plain Core row copy, without the ORM's per-object
    bookkeeping (which cost more than the rest of the append's own work)."""

    id: str
    account_id: str
    name: str
    data_frequency: str
    confidence: float | None
    false_alarms_per_week: float | None
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
        return detector_of(self)


def threshold_of(monitor: MonitorState | MonitorRecord) -> tuple[float | None, float | None]:
    """(confidence, false_alarms_per_week) as a monitor's settings give them to a detector."""
    if monitor.sensitivity is not None:
        return None, budget_for_sensitivity(monitor.sensitivity)
    return monitor.confidence, monitor.false_alarms_per_week


def detector_of(monitor: MonitorState | MonitorRecord) -> StreamingDetector:
    """The default detector as a monitor's settings configure it."""
    confidence, budget = threshold_of(monitor)
    return StreamingDetector(
        data_frequency=monitor.data_frequency,
        confidence=confidence,
        false_alarms_per_week=budget,
        floor=(monitor.min_deviation, monitor.min_relative_deviation),
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
_POINT_AT = Prepared(
    select(_POINT.timestamp, _POINT.value, _POINT.expected, _POINT.lower, _POINT.upper, _POINT.score,
           _POINT.direction)
    .where(_POINT.monitor_id == bindparam("monitor_id"), _POINT.epoch == bindparam("epoch"))
)
_TIMESTAMP_AT = Prepared(
    select(_POINT.timestamp).where(_POINT.monitor_id == bindparam("monitor_id"), _POINT.epoch == bindparam("epoch"))
)


def _one(cursor: Any) -> Any:
    """The first column of the cursor's first row, or None when there is no row."""
    row = cursor.fetchone()
    return None if row is None else row[0]


def owned_state(connection: Connection, *, account_id: str, monitor_id: str) -> MonitorState:
    row = _READ_STATE.execute(connection, {"monitor_id": monitor_id}).fetchone()
    state = None if row is None else MonitorState(*row)
    if state is None or state.account_id != account_id:
        raise NotFound("No such monitor.", details={"field": "monitor_id", "issue": "not found", "provided":
                                                    monitor_id[:64]})
    return state


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def epoch_text(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_monitor_id() -> str:
    return "mon_" + secrets.token_hex(12)


def owned(session: Session, *, account_id: str, monitor_id: str, for_update: bool = False) -> MonitorRecord:
    statement = select(MonitorRecord).where(MonitorRecord.id == monitor_id)
    if for_update:
        statement = statement.with_for_update()
    monitor = session.execute(statement).scalar_one_or_none()
    # Another account's monitor is answered exactly like a missing one, so ids reveal nothing.
    if monitor is None or monitor.account_id != account_id:
        raise NotFound("No such monitor.", details={"field": "monitor_id", "issue": "not found", "provided":
                                                    monitor_id[:64]})
    return monitor


def last_points(session: Session, monitor_id: str, count: int) -> list[MonitorPointRecord]:
    if count <= 0:
        return []
    rows = session.execute(
        select(MonitorPointRecord)
        .where(MonitorPointRecord.monitor_id == monitor_id)
        .order_by(MonitorPointRecord.epoch.desc())
        .limit(count)
    ).scalars()
    return list(reversed(list(rows)))


def open_anomaly_points(session: Session, monitor: MonitorRecord, limit: int = 100) -> list[MonitorPointRecord]:
    """The open incident's anomalies, less those a user marked normal."""
    if monitor.open_anomaly_epoch is None:
        return []
    rows = session.execute(
        select(MonitorPointRecord)
        .where(
            MonitorPointRecord.monitor_id == monitor.id,
            MonitorPointRecord.epoch >= monitor.open_anomaly_epoch,
            MonitorPointRecord.is_anomaly.is_(True),
            MonitorPointRecord.feedback.is_(None) | (MonitorPointRecord.feedback != NOT_ANOMALY),
        )
        .order_by(MonitorPointRecord.epoch)
        .limit(limit)
    ).scalars()
    return list(rows)


def load_history(connection: Connection, monitor: MonitorState) -> History:
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


def stored_rows(
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
                         "newest_stored": epoch_text(monitor.last_epoch or 0)},
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


def stored_or_dropped(
    connection: Connection, monitor: MonitorState, points: IncomingPoints, count: int
) -> tuple[list[Any], dict[str, int]]:
    """As stored_rows, for senders that cannot be refused point by point (remote write): the stored rows of the
    first ``count`` points that are stored with the same value, and how many of the others were dropped."""
    stored = {
        p.epoch: p
        for p in connection.execute(
            _STORED_RANGE, {"monitor_id": monitor.id, "first": points.epochs[0], "last": points.epochs[count - 1]}
        )
    }
    out: list[Any] = []
    dropped = {"out_of_order": 0, "conflict": 0}
    for index in range(count):
        record = stored.get(points.epochs[index])
        if record is None:
            dropped["out_of_order"] += 1
        elif record.value != points.values[index]:
            dropped["conflict"] += 1
        else:
            out.append(record)
    return out, dropped


def anomalies_since(connection: Connection, monitor_id: str, epoch: int) -> int:
    return int(_one(_ANOMALIES_SINCE.execute(connection, {"monitor_id": monitor_id, "since": epoch})))


def timestamp_at(connection: Connection, monitor_id: str, epoch: int, epochs: list[int], texts: list[str]) -> str:
    position = bisect_right(epochs, epoch) - 1
    if position >= 0 and epochs[position] == epoch:
        return texts[position]
    text = _one(_TIMESTAMP_AT.execute(connection, {"monitor_id": monitor_id, "epoch": epoch}))
    return text or epoch_text(epoch)


def write_judged(
    connection: Connection,
    monitor: MonitorState,
    epochs: list[int],
    texts: list[str],
    values: list[float],
    verdicts: list[Verdict],
    judged: History | JudgeState,
    plan: IncidentPlan,
) -> None:
    """Writes the judged points, the events planned for them, retention, and the monitor's new state; updates
    ``judged`` in place to the new revision (the caller caches it only once this transaction commits). Raises
    StaleRevision when another process wrote first."""
    now = utc_now()
    old_revision = monitor.revision
    stored_after = monitor.point_count + len(epochs)
    dropped = max(0, stored_after - monitor.retention_points)
    claimed = _CLAIM_REVISION.execute(connection, {
        "monitor_id": monitor.id,
        "old_revision": old_revision,
        "new_revision": old_revision + 1,
        "new_point_count": stored_after - dropped,
        "new_first_epoch": monitor.first_epoch if monitor.first_epoch is not None else epochs[0],
        "new_last_epoch": epochs[-1],
        "new_event_seq": plan.seq,
        "new_open_anomaly_epoch": plan.open_epoch,
        "new_updated_at": now,
    })
    if claimed.rowcount != 1:
        raise StaleRevision
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
    enqueue_events(connection, monitor, plan, now)
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


def points_after(connection: Connection, monitor_id: str, epoch: int) -> list[Any]:
    """(epoch, value, feedback) of the points stored after ``epoch``, oldest first, at most REBUILD_ROWS + 1."""
    return _POINTS_AFTER.execute(connection, {"monitor_id": monitor_id, "after": epoch}).fetchall()


def newest_points(connection: Connection, monitor_id: str) -> list[Any]:
    """(epoch, value, feedback) of the newest REBUILD_ROWS stored points, oldest first."""
    rows = _REBUILD.execute(connection, {"monitor_id": monitor_id}).fetchall()
    rows.reverse()
    return rows


def alert_point(connection: Connection, monitor_id: str, epoch: int) -> dict[str, Any] | None:
    """A stored point as an alert describes it (the fields of a point in an event), or None."""
    row = _POINT_AT.execute(connection, {"monitor_id": monitor_id, "epoch": epoch}).fetchone()
    if row is None:
        return None
    timestamp, value, expected, lower, upper, score, direction = row
    return {"timestamp": timestamp, "value": value, "expected": expected, "lower_bound": lower,
            "upper_bound": upper, "anomaly_score": score, "direction": direction}


def enqueue_events(executor: Connection | Session, monitor: MonitorState | MonitorRecord, plan: IncidentPlan,
                   now: datetime) -> None:
    """The planned events into the delivery queue, in the caller's transaction."""
    for event_seq, kind, extra, destination in plan.events:
        event_id = queue.new_event_id()
        payload = {"id": event_id, "type": kind, "monitor_id": monitor.id, "monitor_name": monitor.name,
                   "sequence": event_seq, "created_at": iso(now), **extra}
        url = monitor.webhook_url if destination == "webhook" else monitor.alertmanager_url
        queue.enqueue(executor, monitor_id=monitor.id, webhook_url=url or "", seq=event_seq, kind=kind,
                      payload=payload, now=now, destination=destination)
