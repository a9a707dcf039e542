"""Monitor management, the monitors' front door for routes and the dashboard: create, change, read, delete, mark a
point normal, rotate the webhook secret, list deliveries. Every function is keyword-only and runs in its own
transaction; new points come in through app.monitors.intake.ingest."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Row, delete, func, insert, select, update

from app.compute.detect.budget import THRESHOLD_FIELDS, threshold_fields_given
from app.db import Database
from app.errors import NotFound, QuotaExceeded
from app.monitors import sources
from app.monitors.alerts import incidents, queue
from app.monitors.alerts.events import enqueue_events
from app.monitors.alerts.webhooks import new_secret
from app.monitors.intake.selectors import Selector
from app.monitors.judge import relearn_last_append
from app.monitors.label_sets import stored_labels
from app.monitors.payloads import reads
from app.monitors.payloads.views import alert_view, incident_view, monitor_view, point_view, series_view
from app.monitors.records import (
    delivery_attempts_table,
    monitor_events_table,
    monitor_points_table,
    monitor_series_table,
    monitor_snapshots_table,
    monitors_table,
)
from app.monitors.state.cache import JudgeState
from app.monitors.state.runtime import MonitorRuntime
from app.monitors.store import (
    NOT_ANOMALY,
    epoch_text,
    iso,
    new_monitor_id,
    owned,
    utc_now,
)
from app.monitors.types import EventSource, detector_of

_MONITOR = monitors_table.c
_SERIES = monitor_series_table.c
_POINT = monitor_points_table.c
_EVENT = monitor_events_table.c


def describe_monitor(connection: Connection, monitor: Row[Any], *, points: int, totals: reads.Totals,
                     series: int = 0) -> dict[str, Any]:
    """The monitor; its points and open anomalies are its only series' (every series' open anomalies when it has
    several, whose points are each series' own); with ``series`` a first page of its series."""
    view = monitor_view(monitor, totals)
    only = totals.only_series
    if only is not None:
        labelled = bool(stored_labels(only.labels))
        view["open_anomalies"] = [point_view(p, labelled=labelled) for p in reads.open_anomaly_points(connection, only)]
        view["open_incident"] = incident_view(reads.open_incident(connection, only))
        if points > 0:
            view["points"] = [point_view(p, labelled=labelled) for p in reads.last_points(connection, only, points)]
    else:
        view["open_anomalies"] = [point_view(p, labelled=bool(stored_labels(s.labels)))
                                  for s, p in reads.monitor_open_anomalies(connection, monitor.id)]
        if points > 0:
            view["points"] = []
    if series > 0:
        page, next_after = reads.series_page(connection, monitor.id, limit=series, after=None)
        view["series"] = describe_series(connection, page, points=points if only is None else 0)
        view["series_next_after"] = next_after
    return view


def describe_series(connection: Connection, page: list[Row[Any]], *, points: int) -> list[dict[str, Any]]:
    latest = reads.last_point_of(connection, page)
    views = []
    for row in page:
        view = series_view(row, latest.get(row.id))
        view["open_incident"] = incident_view(reads.open_incident(connection, row))
        if points > 0:
            view["points"] = [point_view(p) for p in reads.last_points(connection, row, points)]
        views.append(view)
    return views


def get_monitor(*, database: Database, account_id: str, monitor_id: str, points: int, series: int = 0
                ) -> dict[str, Any]:
    with database.transaction() as connection:
        monitor = owned(connection, account_id=account_id, monitor_id=monitor_id)
        totals = reads.totals(connection, [monitor])[monitor.id]
        return describe_monitor(connection, monitor, points=points, totals=totals, series=series)


def list_monitors(
    *, database: Database, account_id: str, points: int, limit: int, after: str | None
) -> tuple[list[dict[str, Any]], str | None]:
    with database.transaction() as connection:
        statement = select(monitors_table).where(_MONITOR.account_id == account_id)
        if after:
            statement = statement.where(_MONITOR.id > after)
        monitors = list(connection.execute(statement.order_by(_MONITOR.id).limit(limit + 1)))
        more = len(monitors) > limit
        monitors = monitors[:limit]
        totals = reads.totals(connection, monitors)
        views = [describe_monitor(connection, m, points=points, totals=totals[m.id]) for m in monitors]
    return views, (monitors[-1].id if more and monitors else None)


def list_series(*, database: Database, account_id: str, monitor_id: str, limit: int, after: int | None,
                points: int, match: Selector | None, anomalous: bool) -> tuple[list[dict[str, Any]], int | None]:
    with database.transaction() as connection:
        owned(connection, account_id=account_id, monitor_id=monitor_id)
        page, next_after = reads.series_page(connection, monitor_id, limit=limit, after=after, match=match,
                                             anomalous=anomalous)
        return describe_series(connection, page, points=points), next_after


def get_series(*, database: Database, account_id: str, monitor_id: str, series_id: str, points: int
               ) -> dict[str, Any]:
    with database.transaction() as connection:
        owned(connection, account_id=account_id, monitor_id=monitor_id)
        row = reads.owned_series(connection, monitor_id, series_id)
        view = describe_series(connection, [row], points=points)[0]
        view["monitor_id"] = monitor_id
        view["open_anomalies"] = [point_view(p) for p in reads.open_anomaly_points(connection, row)]
        return view


def history_for_forecast(
    *, database: Database, account_id: str, monitor_id: str, max_points: int, series_id: Any = None
) -> tuple[Row[Any], list[int], list[str], list[float]]:
    with database.transaction() as connection:
        monitor = owned(connection, account_id=account_id, monitor_id=monitor_id)
        series = reads.sole_series(connection, monitor, series_id)
        rows = [] if series is None else reads.last_points(connection, series, max_points)
    # The forecast ahead starts from what the monitor judged normal: a flagged point counts as its expected
    # value, so one spike at the end does not send the forecast up (unless a user said it was normal).
    values = [p.expected if p.is_anomaly and p.feedback != NOT_ANOMALY else p.value for p in rows]
    return monitor, [p.epoch for p in rows], [p.timestamp for p in rows], values


def create_monitor(*, database: Database, account_id: str, fields: dict[str, Any], limit: int) -> dict[str, Any]:
    """A new monitor; a 429 when the account already keeps ``limit`` of them (checked at creation: two creations
    at the same moment may each see room for one)."""
    now = utc_now()
    secret = new_secret()
    values: dict[str, Any] = {
        "id": new_monitor_id(),
        "account_id": account_id,
        "name": fields["name"],
        "data_frequency": fields["data_frequency"],
        "confidence": fields.get("confidence"),
        "false_alarms_per_week": fields.get("false_alarms_per_week"),
        "sensitivity": fields.get("sensitivity"),
        "min_deviation": fields.get("min_deviation", 0.0),
        "min_relative_deviation": fields.get("min_relative_deviation", 0.0),
        "model": fields.get("model"),
        "retention_points": fields["retention_points"],
        "webhook_url": fields.get("webhook_url"),
        "remote_write_selector": fields.get("remote_write_selector"),
        "webhook_secret": secret,
        "created_at": now,
        "updated_at": now,
        "series_refused": 0,
    }
    sources.set_on_create(values, fields, now)
    with database.transaction() as connection:
        kept = connection.scalar(select(func.count()).select_from(monitors_table)
                                 .where(_MONITOR.account_id == account_id)) or 0
        if kept >= limit:
            raise QuotaExceeded(
                f"This account keeps {kept:,} monitors, the most it may (MAX_MONITORS_PER_ACCOUNT); delete one first.",
                details={"limit": limit, "window": "monitors", "stored": kept},
            )
        connection.execute(insert(monitors_table).values(**values))
        monitor = owned(connection, account_id=account_id, monitor_id=values["id"])
        view = describe_monitor(connection, monitor, points=0, totals=reads.Totals(0, 0, None, None))
    view["webhook_secret"] = secret
    return view


def update_monitor(*, database: Database, account_id: str, monitor_id: str, changes: dict[str, Any],
                   allow_private: bool = False) -> dict[str, Any]:
    with database.transaction() as connection:
        monitor = owned(connection, account_id=account_id, monitor_id=monitor_id, for_update=True)
        sources.check_fields(changes, monitor, allow_private=allow_private)
        values = sources.apply_changes(monitor, changes, utc_now())
        if threshold_fields_given(changes):
            for name in THRESHOLD_FIELDS:  # the one given replaces whichever set the threshold before
                values[name] = changes.get(name)
        for name in ("name", "webhook_url", "min_deviation", "min_relative_deviation", "remote_write_selector"):
            if name in changes:
                values[name] = changes[name]
        values["updated_at"] = utc_now()
        connection.execute(update(monitors_table).where(_MONITOR.id == monitor_id).values(**values))
        monitor = owned(connection, account_id=account_id, monitor_id=monitor_id)
        return describe_monitor(connection, monitor, points=0,
                                totals=reads.totals(connection, [monitor])[monitor.id])


def mark_not_anomaly(
    *, database: Database, runtime: MonitorRuntime, account_id: str, monitor_id: str, epoch: int,
    series_id: Any = None,
) -> dict[str, Any]:
    """Records a user's "not an anomaly" on a stored point of a series (the monitor's only one unless
    ``series_id`` names one). Its verdict stays as it was given; the detector learns the point as normal from now
    on: a point of the last append is relearnt here by replaying that append (app.monitors.judge.
    relearn_last_append), and the moved revision has every other process rebuild its state from the stored
    points. When it was the open incident's last anomaly not marked normal, the incident closes here, with its end
    events (webhook and Alertmanager)."""
    with database.transaction() as connection:
        monitor = owned(connection, account_id=account_id, monitor_id=monitor_id)
        series = reads.sole_series(connection, monitor, series_id)
        if series is None:
            raise _no_point(epoch)
        number = series.id
    with runtime.locks.held([number]):
        try:
            revision, relearnt, view, closed = _mark(database=database, runtime=runtime,
                                                     account_id=account_id, monitor_id=monitor_id, series_id=number,
                                                     epoch=epoch)
        except BaseException:
            runtime.cache.drop(number)  # relearning changed the cached state in place; the change is undone
            raise
        cached = runtime.cache.peek(number)
        if relearnt and isinstance(cached, JudgeState):
            cached.revision = revision
            runtime.cache.put(number, cached)
        else:
            runtime.cache.drop(number)
    if closed:
        runtime.sender.notify()
    return view


def _no_point(epoch: int) -> NotFound:
    return NotFound("No stored point at that timestamp.", details={
        "field": "timestamp", "issue": "no stored point", "provided": epoch_text(epoch)})


def _mark(*, database: Database, runtime: MonitorRuntime, account_id: str, monitor_id: str, series_id: int,
          epoch: int) -> tuple[int, bool, dict[str, Any], bool]:
    """(the series' new revision, relearnt in this process's state, the point's view, incident closed)."""
    closed = False
    with database.transaction() as connection:
        monitor = owned(connection, account_id=account_id, monitor_id=monitor_id)
        series = connection.execute(select(monitor_series_table).where(_SERIES.id == series_id)
                                    .with_for_update()).first()
        if series is None:
            raise _no_point(epoch)
        marked = connection.execute(update(monitor_points_table).where(*_point_key(monitor_id, series_id, epoch))
                                    .values(feedback=NOT_ANOMALY))
        point = _stored_point(connection, monitor_id, series_id, epoch) if marked.rowcount == 1 else None
        if point is None:
            raise _no_point(epoch)
        if series.open_anomaly_epoch is not None and epoch >= series.open_anomaly_epoch:
            closed = _close_if_all_marked(connection, monitor, series, point)
        # This process relearns a point of the last append by replaying that append alone; any other change
        # (and every other process) rebuilds from the stored points, which the moved relearn_revision asks for.
        cached = runtime.cache.peek(series_id)
        relearnt = (isinstance(cached, JudgeState) and cached.revision == series.revision
                    and relearn_last_append(cached, detector_of(monitor), epoch))
        revision = series.revision + 1
        connection.execute(update(monitor_series_table).where(_SERIES.id == series_id)
                           .values(revision=revision, relearn_revision=revision))
        connection.execute(update(monitors_table).where(_MONITOR.id == monitor_id).values(updated_at=utc_now()))
        return revision, relearnt, point_view(point, labelled=bool(stored_labels(series.labels))), closed


def _point_key(monitor_id: str, series_id: int, epoch: int) -> tuple[Any, ...]:
    return _POINT.monitor_id == monitor_id, _POINT.series_id == series_id, _POINT.epoch == epoch


def _stored_point(connection: Connection, monitor_id: str, series_id: int, epoch: int) -> Row[Any] | None:
    return connection.execute(select(monitor_points_table).where(*_point_key(monitor_id, series_id, epoch))).first()


def event_source(monitor: Row[Any], series: Row[Any]) -> EventSource:
    return EventSource(monitor_id=monitor.id, name=monitor.name, webhook_url=monitor.webhook_url,
                       alertmanager_url=monitor.alertmanager_url, series_id=series.id, labels=series.labels,
                       event_seq=series.event_seq, open_anomaly_epoch=series.open_anomaly_epoch)


def _close_if_all_marked(connection: Connection, monitor: Row[Any], series: Row[Any], marked: Row[Any]) -> bool:
    """Closes the series' open incident when ``marked`` was its last anomaly not marked normal: its end events
    queued, and the series' event_seq and open_anomaly_epoch moved in the database (``series`` keeps the values
    it was read with)."""
    if reads.open_anomaly_points(connection, series, limit=1):
        return False
    assert series.open_anomaly_epoch is not None
    anomalies = connection.scalar(select(func.count()).select_from(monitor_points_table).where(
        _POINT.monitor_id == monitor.id, _POINT.series_id == series.id,
        _POINT.epoch >= series.open_anomaly_epoch, _POINT.is_anomaly.is_(True))) or 0
    opening = _stored_point(connection, monitor.id, series.id, series.open_anomaly_epoch)
    described = alert_view(opening or marked)
    plan = incidents.closed_by_feedback(event_source(monitor, series), first=described, marked=alert_view(marked),
                                        marked_epoch=marked.epoch, anomalies=anomalies)
    enqueue_events(connection, event_source(monitor, series), plan, utc_now())
    connection.execute(update(monitor_series_table).where(_SERIES.id == series.id)
                       .values(event_seq=plan.seq, open_anomaly_epoch=None))
    return True


def rotate_secret(*, database: Database, account_id: str, monitor_id: str) -> str:
    secret = new_secret()
    with database.transaction() as connection:
        owned(connection, account_id=account_id, monitor_id=monitor_id, for_update=True)
        connection.execute(update(monitors_table).where(_MONITOR.id == monitor_id)
                           .values(webhook_secret=secret, updated_at=utc_now()))
    return secret


def delete_monitor(*, database: Database, runtime: MonitorRuntime, account_id: str, monitor_id: str) -> None:
    with database.transaction() as connection:
        owned(connection, account_id=account_id, monitor_id=monitor_id, for_update=True)
        series_ids = list(connection.scalars(select(_SERIES.id).where(_SERIES.monitor_id == monitor_id)))
        # Explicit deletes, children first: SQLite enforces no ON DELETE CASCADE without a pragma.
        for table in (delivery_attempts_table, monitor_events_table, monitor_points_table, monitor_snapshots_table,
                      monitor_series_table):
            connection.execute(delete(table).where(table.c.monitor_id == monitor_id))
        connection.execute(delete(monitors_table).where(_MONITOR.id == monitor_id))
    runtime.series_ids.forget_monitor(monitor_id)
    for series_id in series_ids:
        runtime.cache.drop(series_id)


def deliveries(*, database: Database, account_id: str, monitor_id: str, limit: int) -> list[dict[str, Any]]:
    with database.transaction() as connection:
        owned(connection, account_id=account_id, monitor_id=monitor_id)
        events = list(
            connection.execute(
                select(monitor_events_table)
                .where(_EVENT.monitor_id == monitor_id)
                .order_by(_EVENT.created_at.desc(), _EVENT.seq.desc())
                .limit(limit)
            )
        )
        attempts: dict[str, list[Row[Any]]] = {}
        if events:
            for attempt in connection.execute(
                select(delivery_attempts_table)
                .where(delivery_attempts_table.c.event_id.in_([e.id for e in events]))
                .order_by(delivery_attempts_table.c.id)
            ):
                attempts.setdefault(attempt.event_id, []).append(attempt)
    return [
        {
            **({"series_id": event.series_id} if '"series":{' in event.payload else {}),
            "event_id": event.id,
            "type": event.kind,
            "destination": event.destination,
            "sequence": event.seq,
            "status": event.status,
            "created_at": iso(event.created_at),
            "next_attempt_at": iso(event.next_attempt_at) if event.status in queue.ACTIVE else None,
            "delivered_at": iso(event.delivered_at),
            "attempts": [
                {
                    "attempt": a.attempt,
                    "attempted_at": iso(a.attempted_at),
                    "duration_ms": a.duration_ms,
                    "status_code": a.status_code,
                    "error": a.error,
                }
                for a in attempts.get(event.id, [])
            ],
        }
        for event in events
    ]
