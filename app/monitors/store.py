"""A monitor's series in SQL: a series as the append path reads it (with its monitor's settings), its stored
points, and the one transaction that writes the judged points of many series, their events and retention.

Appending is serialized per series: a process-local lock (app.monitors.state.cache), plus on PostgreSQL a row lock on
the series (``SELECT ... FOR UPDATE``, in id order) held from reading the stored state to the commit, so writers
in other processes or hosts wait too. Every write also bumps the series' ``revision`` with a compare-and-set, which
makes a lost race visible on any database (SQLite across processes included): the loser retries against the
new state, so no point is lost and none is judged twice.
"""

from __future__ import annotations

import secrets
from array import array
from bisect import bisect_right
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Integer, Row, bindparam, func, select

from app.compute.detect.streaming import lookback_rows
from app.db import Prepared
from app.errors import InvalidInput, NotFound
from app.monitors.alerts.events import enqueue_events
from app.monitors.intake.points import IncomingPoints
from app.monitors.records import monitor_points_table, monitor_series_table, monitors_table
from app.monitors.state import snapshots
from app.monitors.state.cache import History, JudgeState
from app.monitors.types import IncidentPlan, SeriesState, Verdict
from app.series import instants
from app.series.frequencies import MAX_PERIOD_ROWS

# anomaly-model-2 (the rolling median) reads the series' first rows (its nominal spacing) and the last
# rows before each judged one: the first HEAD_ROWS points plus the last TAIL_ROWS are sent with new points.
HEAD_ROWS = 16
TAIL_ROWS = 64
NOT_ANOMALY = "not_anomaly"


def standing_anomaly(point: Any) -> Any:
    """Of a point table's columns (or its record's attributes): judged anomalous and not marked normal by a user."""
    return point.is_anomaly.is_(True) & (point.feedback.is_(None) | (point.feedback != NOT_ANOMALY))


def peak_first(point: Any) -> tuple[Any, Any]:
    """An incident's anomalies ordered furthest from what was expected first (the earliest among equals)."""
    return func.abs(point.value - point.expected).desc(), point.epoch

# anomaly-model-1 keeps its state in this process; after a restart (or another process's write) the state is
# rebuilt by replaying the last REBUILD_ROWS stored points: what the state holds at the longest season.
REBUILD_ROWS = lookback_rows(MAX_PERIOD_ROWS)


def tail_rows(monitor: SeriesState) -> int:
    return min(TAIL_ROWS, monitor.retention_points)


class StaleRevision(Exception):
    """Another process changed the monitor between our read and our write."""


_MONITORS = monitors_table
_SERIES = monitor_series_table
_POINTS = monitor_points_table
_POINT = _POINTS.c
_MONITOR_FIELDS = ("account_id", "name", "data_frequency", "confidence", "false_alarms_per_week", "model",
                   "retention_points", "webhook_url", "sensitivity", "min_deviation", "min_relative_deviation",
                   "alertmanager_url", "prometheus_query")
_SERIES_FIELDS = ("labels", "point_count", "first_epoch", "last_epoch", "revision", "relearn_revision", "event_seq",
                  "open_anomaly_epoch")
_STATE_COLUMNS = [_SERIES.c.monitor_id, *(_MONITORS.c[name] for name in _MONITOR_FIELDS),
                  _SERIES.c.id, *(_SERIES.c[name] for name in _SERIES_FIELDS)]
assert [c.name for c in _STATE_COLUMNS] == ["monitor_id", *_MONITOR_FIELDS, "id", *_SERIES_FIELDS]
_STATES = select(*_STATE_COLUMNS).select_from(_SERIES.join(_MONITORS, _MONITORS.c.id == _SERIES.c.monitor_id))
# The append path's statements, built and compiled once (Prepared) and run on the transaction's DBAPI cursor:
# building a statement per append and SQLAlchemy's execution machinery cost more per append than the database's
# own work and the detector together.
_READ_STATE = Prepared(_STATES.where(_SERIES.c.id == bindparam("series_id")).with_for_update(of=_SERIES))
# Many series in one statement of STATES_CHUNK ids (padded with 0, no series' id), locked in id order (two writers
# of overlapping sets never wait on each other in a circle), run on the DBAPI cursor as the other hot statements.
STATES_CHUNK = 256
_STATE_IDS = [f"s{i}" for i in range(STATES_CHUNK)]
_READ_STATES = Prepared(_STATES.where(_SERIES.c.id.in_([bindparam(name) for name in _STATE_IDS]))
                        .order_by(_SERIES.c.id).with_for_update(of=_SERIES))
# The compare-and-set on revision: it comes first among the writes, and on SQLite it also takes the write lock.
_CLAIM_REVISION = Prepared(
    _SERIES.update()
    .where(_SERIES.c.id == bindparam("series_id"), _SERIES.c.revision == bindparam("old_revision"))
    .values(
        revision=bindparam("new_revision"),
        point_count=bindparam("new_point_count"),
        first_epoch=bindparam("new_first_epoch"),
        last_epoch=bindparam("new_last_epoch"),
        event_seq=bindparam("new_event_seq"),
        open_anomaly_epoch=bindparam("new_open_anomaly_epoch"),
        last_seen_at=bindparam("new_last_seen_at"),
    )
)
_CLAIM_NAMES = ("series_id", "old_revision", "new_revision", "new_point_count", "new_first_epoch", "new_last_epoch",
                "new_event_seq", "new_open_anomaly_epoch", "new_last_seen_at")
_INSERT_POINTS = Prepared(_POINTS.insert())
_POINT_NAMES = ("monitor_id", "series_id", "epoch", "timestamp", "value", "expected", "lower", "upper", "score",
                "is_anomaly", "direction", "warmup", "feedback", "reason")
_IN_SERIES = (_POINT.monitor_id == bindparam("monitor_id")) & (_POINT.series_id == bindparam("series_id"))
_STORED_RANGE = select(_POINTS).where(_IN_SERIES, _POINT.epoch >= bindparam("first"), _POINT.epoch <= bindparam("last"))
_HEAD = Prepared(select(_POINT.epoch, _POINT.value).where(_IN_SERIES).order_by(_POINT.epoch).limit(HEAD_ROWS))
_TAIL_AFTER = Prepared(
    select(_POINT.epoch, _POINT.value)
    .where(_IN_SERIES, _POINT.epoch > bindparam("after"))
    .order_by(_POINT.epoch.desc())
    .limit(bindparam("rows", type_=Integer))
)
# The points another process stored after the last one a cached state has seen, oldest first: one more than a
# rebuild reads, so that a longer gap is rebuilt instead.
_POINTS_AFTER = Prepared(
    select(_POINT.epoch, _POINT.value, _POINT.feedback)
    .where(_IN_SERIES, _POINT.epoch > bindparam("after"))
    .order_by(_POINT.epoch)
    .limit(REBUILD_ROWS + 1)
)
_REBUILD = Prepared(
    select(_POINT.epoch, _POINT.value, _POINT.feedback)
    .where(_IN_SERIES)
    .order_by(_POINT.epoch.desc())
    .limit(REBUILD_ROWS)
)
# Retention: the newest of the ``dropped`` oldest points, then everything up to it.
_RETENTION_CUTOFF = Prepared(
    select(_POINT.epoch).where(_IN_SERIES).order_by(_POINT.epoch).offset(bindparam("skip", type_=Integer)).limit(1)
)
_DROP_THROUGH = Prepared(_POINTS.delete().where(_IN_SERIES, _POINT.epoch <= bindparam("cutoff")))
_SET_FIRST_EPOCH = Prepared(
    _SERIES.update().where(_SERIES.c.id == bindparam("series_id")).values(first_epoch=bindparam("new_first_epoch"))
)
_ANOMALIES_SINCE = Prepared(
    select(func.count())
    .select_from(_POINTS)
    .where(_IN_SERIES, _POINT.epoch >= bindparam("since"), _POINT.is_anomaly.is_(True))
)
# The incident's peak: its anomaly furthest from what was expected (a user's "not an anomaly" does not count).
_PEAK_SINCE = Prepared(
    select(_POINT.epoch)
    .where(_IN_SERIES, _POINT.epoch >= bindparam("since"), standing_anomaly(_POINT))
    .order_by(*peak_first(_POINT))
    .limit(1)
)
_POINT_AT = Prepared(
    select(_POINT.timestamp, _POINT.value, _POINT.expected, _POINT.lower, _POINT.upper, _POINT.score,
           _POINT.direction, _POINT.reason)
    .where(_IN_SERIES, _POINT.epoch == bindparam("epoch"))
)
_TIMESTAMP_AT = Prepared(select(_POINT.timestamp).where(_IN_SERIES, _POINT.epoch == bindparam("epoch")))


def _one(cursor: Any) -> Any:
    """The first column of the cursor's first row, or None when there is no row."""
    row = cursor.fetchone()
    return None if row is None else row[0]


def _where(series: SeriesState) -> dict[str, Any]:
    return {"monitor_id": series.monitor_id, "series_id": series.series_id}


def series_state(connection: Connection, series_id: int) -> SeriesState | None:
    row = _READ_STATE.execute(connection, {"series_id": series_id}).fetchone()
    return None if row is None else SeriesState(*row)


def series_states(connection: Connection, series_ids: list[int]) -> dict[int, SeriesState]:
    """The series' states (and row locks on PostgreSQL), by id; a retired series is missing."""
    if len(series_ids) == 1:
        state = series_state(connection, series_ids[0])
        return {} if state is None else {state.series_id: state}
    ordered = sorted(series_ids)
    states: dict[int, SeriesState] = {}
    for start in range(0, len(ordered), STATES_CHUNK):
        chunk = ordered[start:start + STATES_CHUNK]
        chunk += [0] * (STATES_CHUNK - len(chunk))
        for row in _READ_STATES.execute(connection, dict(zip(_STATE_IDS, chunk, strict=True))).fetchall():
            state = SeriesState(*row)
            states[state.series_id] = state
    return states


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else instants.moment_text(moment, microseconds=True)


def epoch_text(epoch: int) -> str:
    # Four-digit years: strftime writes year 1 as "1-01-01", which no parser of the API reads back.
    return instants.epoch_text(epoch)


def new_monitor_id() -> str:
    return "mon_" + secrets.token_hex(12)


def owned(connection: Connection, *, account_id: str, monitor_id: str, for_update: bool = False) -> Row[Any]:
    statement = select(_MONITORS).where(_MONITORS.c.id == monitor_id)
    if for_update:
        statement = statement.with_for_update()
    monitor = connection.execute(statement).first()
    # Another account's monitor is answered exactly like a missing one, so ids reveal nothing.
    if monitor is None or monitor.account_id != account_id:
        raise NotFound("No such monitor.", details={"field": "monitor_id", "issue": "not found", "provided":
                                                    monitor_id[:64]})
    return monitor


def load_history(connection: Connection, series: SeriesState) -> History:
    head = _HEAD.execute(connection, _where(series)).fetchall()
    tail: list[Any] = []
    if head and series.point_count > len(head):
        tail = _TAIL_AFTER.execute(
            connection, {**_where(series), "after": head[-1][0], "rows": tail_rows(series)}
        ).fetchall()
        tail.reverse()
    return History(
        revision=series.revision,
        head_epochs=[int(e) for e, _ in head],
        head_values=[float(v) for _, v in head],
        tail_epochs=array("q", (int(e) for e, _ in tail)),
        tail_values=array("d", (float(v) for _, v in tail)),
        after_head=max(0, series.point_count - len(head)),
    )


def _stored_by_epoch(connection: Connection, series: SeriesState, points: IncomingPoints, count: int) -> dict[int, Any]:
    return {p.epoch: p for p in connection.execute(
        _STORED_RANGE, {**_where(series), "first": points.epochs[0], "last": points.epochs[count - 1]})}


def stored_rows(
    connection: Connection, series: SeriesState, points: IncomingPoints, count: int
) -> list[Any]:
    """The stored rows of the first ``count`` incoming points (all at or before the newest stored one);
    a 422 naming the index for one that conflicts or is older than the newest and not stored."""
    stored = _stored_by_epoch(connection, series, points, count)
    out: list[Any] = []
    for index in range(count):
        record = stored.get(points.epochs[index])
        if record is None:
            raise InvalidInput(
                "Invalid points: timestamp is older than the newest stored point.",
                details={"field": "timestamps", "issue": "older than the newest stored point and not stored",
                         "provided": points.texts[index], "index": index,
                         "newest_stored": epoch_text(series.last_epoch or 0)},
            )
        if record.value != points.values[index]:
            raise InvalidInput(
                "Invalid points: timestamp already stored with a different value.",
                details={"field": "values", "issue": "conflicts with the value stored for this timestamp",
                         "provided": points.values[index], "index": index, "stored": record.value,
                         "timestamp": record.timestamp},
            )
        out.append(record)
    return out


def stored_or_dropped(
    connection: Connection, series: SeriesState, points: IncomingPoints, count: int
) -> tuple[list[Any], dict[str, int]]:
    """As stored_rows, for senders that cannot be refused point by point (remote write): the stored rows of the
    first ``count`` points that are stored with the same value, and how many of the others were dropped."""
    stored = _stored_by_epoch(connection, series, points, count)
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


def anomalies_since(connection: Connection, series: SeriesState, epoch: int) -> int:
    return int(_one(_ANOMALIES_SINCE.execute(connection, {**_where(series), "since": epoch})))


def peak_since(connection: Connection, series: SeriesState, epoch: int) -> dict[str, Any] | None:
    """The stored peak of an incident that opened at ``epoch``, as an alert describes a point."""
    peak = _one(_PEAK_SINCE.execute(connection, {**_where(series), "since": epoch}))
    return None if peak is None else alert_point(connection, series, peak)


def timestamp_at(connection: Connection, series: SeriesState, epoch: int, epochs: list[int], texts: list[str]) -> str:
    position = bisect_right(epochs, epoch) - 1
    if position >= 0 and epochs[position] == epoch:
        return texts[position]
    text = _one(_TIMESTAMP_AT.execute(connection, {**_where(series), "epoch": epoch}))
    return text or epoch_text(epoch)


@dataclass
class JudgedPoints:
    """One series' new points, judged, with the events they raise: what write_judged stores."""

    series: SeriesState
    epochs: list[int]
    texts: list[str]
    values: list[float]
    verdicts: list[Verdict]
    judged: History | JudgeState
    plan: IncidentPlan


def write_judged(connection: Connection, batch: list[JudgedPoints]) -> None:
    """Writes the judged points of every series in ``batch``, the events planned for them, retention, and each
    series' new state, in the caller's transaction: one compare-and-set statement and one insert for them all.
    Updates each ``judged`` in place to its new revision (the caller caches them only once the transaction
    commits). Raises StaleRevision when another process wrote one of the series first."""
    now = utc_now()
    claims = []
    rows: list[tuple[Any, ...]] = []
    for item in batch:
        series, epochs = item.series, item.epochs
        claims.append((series.series_id, series.revision, series.revision + 1,
                       min(series.point_count + len(epochs), series.retention_points),
                       series.first_epoch if series.first_epoch is not None else epochs[0], epochs[-1],
                       item.plan.seq, item.plan.open_epoch, now))
        monitor_id, series_id = series.monitor_id, series.series_id
        rows.extend(
            (monitor_id, series_id, e, t, v, d.expected, d.lower, d.upper, d.score, d.is_anomaly, d.direction,
             d.warmup, None, d.reason)
            for e, t, v, d in zip(epochs, item.texts, item.values, item.verdicts, strict=True)
        )
    claimed = _CLAIM_REVISION.update_rows(connection, _CLAIM_NAMES, claims)
    if claimed != len(claims):
        raise StaleRevision
    _INSERT_POINTS.insert_rows(connection, _POINT_NAMES, rows)
    for item in batch:
        if item.plan.events:
            enqueue_events(connection, item.series, item.plan, now)
        _after_write(connection, item, now)


def _after_write(connection: Connection, item: JudgedPoints, now: datetime) -> None:
    """Retention of one written series, and its in-memory copies moved to the new revision."""
    series, judged = item.series, item.judged
    stored_after = series.point_count + len(item.epochs)
    dropped = max(0, stored_after - series.retention_points)
    history = judged if isinstance(judged, History) else None
    if history is not None:
        history.append(item.epochs, item.values, head_rows=HEAD_ROWS, tail_rows=tail_rows(series))
    if dropped:
        cutoff = _one(_RETENTION_CUTOFF.execute(connection, {**_where(series), "skip": dropped - 1}))
        if cutoff is not None:
            _DROP_THROUGH.execute(connection, {**_where(series), "cutoff": cutoff})
        head = _HEAD.execute(connection, _where(series)).fetchall()
        first = head[0][0] if head else None
        _SET_FIRST_EPOCH.execute(connection, {"series_id": series.series_id, "new_first_epoch": first})
        if history is not None:
            history.replace_head([int(e) for e, _ in head], [float(v) for _, v in head], stored_after - dropped)
    judged.revision = series.revision + 1
    if isinstance(judged, JudgeState):
        judged.last_epoch = item.epochs[-1]
        snapshots.save_if_due(connection, monitor_id=series.monitor_id, series_id=series.series_id, judged=judged,
                              points=len(item.epochs), now=now)
    series.revision += 1
    series.point_count = stored_after - dropped
    series.last_epoch = item.epochs[-1]


def points_after(connection: Connection, series: SeriesState, epoch: int) -> list[Any]:
    """(epoch, value, feedback) of the points stored after ``epoch``, oldest first, at most REBUILD_ROWS + 1."""
    return _POINTS_AFTER.execute(connection, {**_where(series), "after": epoch}).fetchall()


def newest_points(connection: Connection, series: SeriesState) -> list[Any]:
    """(epoch, value, feedback) of the newest REBUILD_ROWS stored points, oldest first."""
    rows = _REBUILD.execute(connection, _where(series)).fetchall()
    rows.reverse()
    return rows


def alert_point(connection: Connection, series: SeriesState, epoch: int) -> dict[str, Any] | None:
    """A stored point as an alert describes it (the fields of a point in an event), or None."""
    row = _POINT_AT.execute(connection, {**_where(series), "epoch": epoch}).fetchone()
    if row is None:
        return None
    timestamp, value, expected, lower, upper, score, direction, why = row
    return {"timestamp": timestamp, "value": value, "expected": expected, "lower_bound": lower,
            "upper_bound": upper, "anomaly_score": score, "direction": direction, "reason": why}
