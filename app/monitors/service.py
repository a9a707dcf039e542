"""Monitor management, the monitors' front door for routes and the dashboard: create, change, read, delete, mark a
point normal, rotate the webhook secret, list deliveries. Every function is keyword-only and runs in its own
transaction; new points come in through app.monitors.ingest."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.compute.detect.budget import THRESHOLD_FIELDS, threshold_fields_given
from app.db import Database
from app.monitors import incidents, queue, reads, sources
from app.monitors.answers import alert_view, incident_view, monitor_view, point_view, series_view
from app.monitors.cache import JudgeState
from app.monitors.judge import relearn_last_append
from app.monitors.records import (
    DeliveryAttemptRecord,
    MonitorEventRecord,
    MonitorPointRecord,
    MonitorRecord,
    MonitorSeriesRecord,
)
from app.monitors.runtime import MonitorRuntime
from app.monitors.selectors import Selector
from app.monitors.series import stored_labels
from app.monitors.store import (
    NOT_ANOMALY,
    EventSource,
    detector_of,
    enqueue_events,
    epoch_text,
    iso,
    new_monitor_id,
    owned,
    utc_now,
)
from app.monitors.webhooks import new_secret
from app.web.errors import NotFound, RateLimitExceeded


def describe_monitor(session: Session, monitor: MonitorRecord, *, points: int, totals: reads.Totals,
                     series: int = 0) -> dict[str, Any]:
    """The monitor; its points and open anomalies are its only series' (every series' open anomalies when it has
    several, whose points are each series' own); with ``series`` a first page of its series."""
    view = monitor_view(monitor, totals)
    only = totals.only_series
    if only is not None:
        labelled = bool(stored_labels(only.labels))
        view["open_anomalies"] = [point_view(p, labelled=labelled) for p in reads.open_anomaly_points(session, only)]
        view["open_incident"] = incident_view(reads.open_incident(session, only))
        if points > 0:
            view["points"] = [point_view(p, labelled=labelled) for p in reads.last_points(session, only, points)]
    else:
        view["open_anomalies"] = [point_view(p, labelled=bool(stored_labels(s.labels)))
                                  for s, p in reads.monitor_open_anomalies(session, monitor.id)]
        if points > 0:
            view["points"] = []
    if series > 0:
        page, next_after = reads.series_page(session, monitor.id, limit=series, after=None)
        view["series"] = describe_series(session, page, points=points if only is None else 0)
        view["series_next_after"] = next_after
    return view


def describe_series(session: Session, page: list[MonitorSeriesRecord], *, points: int) -> list[dict[str, Any]]:
    latest = reads.last_point_of(session, page)
    views = []
    for row in page:
        view = series_view(row, latest.get(row.id))
        view["open_incident"] = incident_view(reads.open_incident(session, row))
        if points > 0:
            view["points"] = [point_view(p) for p in reads.last_points(session, row, points)]
        views.append(view)
    return views


def get_monitor(*, database: Database, account_id: str, monitor_id: str, points: int, series: int = 0
                ) -> dict[str, Any]:
    with database.session() as session:
        monitor = owned(session, account_id=account_id, monitor_id=monitor_id)
        totals = reads.totals(session, [monitor])[monitor.id]
        return describe_monitor(session, monitor, points=points, totals=totals, series=series)


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
        totals = reads.totals(session, monitors)
        views = [describe_monitor(session, m, points=points, totals=totals[m.id]) for m in monitors]
    return views, (monitors[-1].id if more and monitors else None)


def list_series(*, database: Database, account_id: str, monitor_id: str, limit: int, after: int | None,
                points: int, match: Selector | None, anomalous: bool) -> tuple[list[dict[str, Any]], int | None]:
    with database.session() as session:
        owned(session, account_id=account_id, monitor_id=monitor_id)
        page, next_after = reads.series_page(session, monitor_id, limit=limit, after=after, match=match,
                                             anomalous=anomalous)
        return describe_series(session, page, points=points), next_after


def get_series(*, database: Database, account_id: str, monitor_id: str, series_id: str, points: int
               ) -> dict[str, Any]:
    with database.session() as session:
        owned(session, account_id=account_id, monitor_id=monitor_id)
        row = reads.owned_series(session, monitor_id, series_id)
        view = describe_series(session, [row], points=points)[0]
        view["monitor_id"] = monitor_id
        view["open_anomalies"] = [point_view(p) for p in reads.open_anomaly_points(session, row)]
        return view


def history_for_forecast(
    *, database: Database, account_id: str, monitor_id: str, max_points: int, series_id: Any = None
) -> tuple[MonitorRecord, list[int], list[str], list[float]]:
    with database.session() as session:
        monitor = owned(session, account_id=account_id, monitor_id=monitor_id)
        series = reads.sole_series(session, monitor, series_id)
        rows = [] if series is None else reads.last_points(session, series, max_points)
    # The forecast ahead starts from what the monitor judged normal: a flagged point counts as its expected
    # value, so one spike at the end does not send the forecast up (unless a user said it was normal).
    values = [p.expected if p.is_anomaly and p.feedback != NOT_ANOMALY else p.value for p in rows]
    return monitor, [p.epoch for p in rows], [p.timestamp for p in rows], values


def create_monitor(*, database: Database, account_id: str, fields: dict[str, Any], limit: int) -> dict[str, Any]:
    """A new monitor; a 429 when the account already keeps ``limit`` of them (checked at creation: two creations
    at the same moment may each see room for one)."""
    now = utc_now()
    secret = new_secret()
    monitor = MonitorRecord(
        id=new_monitor_id(),
        account_id=account_id,
        name=fields["name"],
        data_frequency=fields["data_frequency"],
        confidence=fields.get("confidence"),
        false_alarms_per_week=fields.get("false_alarms_per_week"),
        sensitivity=fields.get("sensitivity"),
        min_deviation=fields.get("min_deviation", 0.0),
        min_relative_deviation=fields.get("min_relative_deviation", 0.0),
        model=fields.get("model"),
        retention_points=fields["retention_points"],
        webhook_url=fields.get("webhook_url"),
        remote_write_selector=fields.get("remote_write_selector"),
        webhook_secret=secret,
        created_at=now,
        updated_at=now,
        series_refused=0,
    )
    sources.set_on_create(monitor, fields, now)
    with database.session() as session:
        kept = session.scalar(select(func.count()).select_from(MonitorRecord)
                              .where(MonitorRecord.account_id == account_id)) or 0
        if kept >= limit:
            raise RateLimitExceeded(
                f"This account keeps {kept:,} monitors, the most it may (MAX_MONITORS_PER_ACCOUNT); delete one first.",
                details={"limit": limit, "window": "monitors", "stored": kept},
            )
        session.add(monitor)
        session.flush()
        view = describe_monitor(session, monitor, points=0, totals=reads.Totals(0, 0, None, None))
    view["webhook_secret"] = secret
    return view


def update_monitor(*, database: Database, account_id: str, monitor_id: str, changes: dict[str, Any],
                   allow_private: bool = False) -> dict[str, Any]:
    with database.session() as session:
        monitor = owned(session, account_id=account_id, monitor_id=monitor_id, for_update=True)
        sources.check_fields(changes, monitor, allow_private=allow_private)
        sources.apply_changes(monitor, changes, utc_now())
        if threshold_fields_given(changes):
            for name in THRESHOLD_FIELDS:  # the one given replaces whichever set the threshold before
                setattr(monitor, name, changes.get(name))
        for name in ("name", "webhook_url", "min_deviation", "min_relative_deviation", "remote_write_selector"):
            if name in changes:
                setattr(monitor, name, changes[name])
        monitor.updated_at = utc_now()
        session.flush()
        return describe_monitor(session, monitor, points=0, totals=reads.totals(session, [monitor])[monitor.id])


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
    with database.session() as session:
        monitor = owned(session, account_id=account_id, monitor_id=monitor_id)
        series = reads.sole_series(session, monitor, series_id)
        if series is None:
            raise _no_point(epoch)
        number = series.id
    with runtime.locks.held([number]):
        try:
            revision, relearnt, view, closed = _mark(session_scope=database.session(), runtime=runtime,
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


def _mark(*, session_scope: Any, runtime: MonitorRuntime, account_id: str, monitor_id: str, series_id: int,
          epoch: int) -> tuple[int, bool, dict[str, Any], bool]:
    """(the series' new revision, relearnt in this process's state, the point's view, incident closed)."""
    closed = False
    with session_scope as session:
        monitor = owned(session, account_id=account_id, monitor_id=monitor_id)
        series = session.execute(select(MonitorSeriesRecord).where(MonitorSeriesRecord.id == series_id)
                                 .with_for_update()).scalar_one_or_none()
        point = None if series is None else session.get(MonitorPointRecord, (monitor_id, series_id, epoch))
        if series is None or point is None:
            raise _no_point(epoch)
        point.feedback = NOT_ANOMALY
        session.flush()
        if series.open_anomaly_epoch is not None and epoch >= series.open_anomaly_epoch:
            closed = _close_if_all_marked(session, monitor, series, point)
        # This process relearns a point of the last append by replaying that append alone; any other change
        # (and every other process) rebuilds from the stored points, which the moved relearn_revision asks for.
        cached = runtime.cache.peek(series_id)
        relearnt = (isinstance(cached, JudgeState) and cached.revision == series.revision
                    and relearn_last_append(cached, detector_of(monitor), epoch))
        series.revision += 1
        series.relearn_revision = series.revision
        monitor.updated_at = utc_now()
        session.flush()
        return series.revision, relearnt, point_view(point, labelled=bool(stored_labels(series.labels))), closed


def event_source(monitor: MonitorRecord, series: MonitorSeriesRecord) -> EventSource:
    return EventSource(monitor_id=monitor.id, name=monitor.name, webhook_url=monitor.webhook_url,
                       alertmanager_url=monitor.alertmanager_url, series_id=series.id, labels=series.labels,
                       event_seq=series.event_seq, open_anomaly_epoch=series.open_anomaly_epoch)


def _close_if_all_marked(session: Session, monitor: MonitorRecord, series: MonitorSeriesRecord,
                         marked: MonitorPointRecord) -> bool:
    if reads.open_anomaly_points(session, series, limit=1):
        return False
    assert series.open_anomaly_epoch is not None
    anomalies = session.scalar(select(func.count()).select_from(MonitorPointRecord).where(
        MonitorPointRecord.monitor_id == monitor.id, MonitorPointRecord.series_id == series.id,
        MonitorPointRecord.epoch >= series.open_anomaly_epoch, MonitorPointRecord.is_anomaly.is_(True))) or 0
    opening = session.get(MonitorPointRecord, (monitor.id, series.id, series.open_anomaly_epoch))
    described = alert_view(opening or marked)
    plan = incidents.closed_by_feedback(event_source(monitor, series), first=described, marked=alert_view(marked),
                                        marked_epoch=marked.epoch, anomalies=anomalies)
    enqueue_events(session, event_source(monitor, series), plan, utc_now())
    series.event_seq = plan.seq
    series.open_anomaly_epoch = None
    return True


def rotate_secret(*, database: Database, account_id: str, monitor_id: str) -> str:
    secret = new_secret()
    with database.session() as session:
        monitor = owned(session, account_id=account_id, monitor_id=monitor_id, for_update=True)
        monitor.webhook_secret = secret
        monitor.updated_at = utc_now()
    return secret


def delete_monitor(*, database: Database, runtime: MonitorRuntime, account_id: str, monitor_id: str) -> None:
    with database.session() as session:
        owned(session, account_id=account_id, monitor_id=monitor_id, for_update=True)
        series_ids = list(session.execute(select(MonitorSeriesRecord.id)
                                          .where(MonitorSeriesRecord.monitor_id == monitor_id)).scalars())
        # Explicit deletes, children first: SQLite enforces no ON DELETE CASCADE without a pragma.
        session.execute(delete(DeliveryAttemptRecord).where(DeliveryAttemptRecord.monitor_id == monitor_id))
        session.execute(delete(MonitorEventRecord).where(MonitorEventRecord.monitor_id == monitor_id))
        session.execute(delete(MonitorPointRecord).where(MonitorPointRecord.monitor_id == monitor_id))
        session.execute(delete(MonitorSeriesRecord).where(MonitorSeriesRecord.monitor_id == monitor_id))
        session.execute(delete(MonitorRecord).where(MonitorRecord.id == monitor_id))
    runtime.series_ids.forget_monitor(monitor_id)
    for series_id in series_ids:
        runtime.cache.drop(series_id)


def deliveries(*, database: Database, account_id: str, monitor_id: str, limit: int) -> list[dict[str, Any]]:
    with database.session() as session:
        owned(session, account_id=account_id, monitor_id=monitor_id)
        events = list(
            session.execute(
                select(MonitorEventRecord)
                .where(MonitorEventRecord.monitor_id == monitor_id)
                .order_by(MonitorEventRecord.created_at.desc(), MonitorEventRecord.seq.desc())
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
