"""Monitor management, the monitors' front door for routes and the dashboard: create, change, read, delete, mark a
point normal, rotate the webhook secret, list deliveries. Every function is keyword-only and runs in its own
transaction; new points come in through app.monitors.ingest."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.compute.detect.budget import THRESHOLD_FIELDS, threshold_fields_given
from app.db import Database
from app.monitors import incidents, queue, sources
from app.monitors.answers import alert_view, monitor_view, point_view
from app.monitors.cache import JudgeState
from app.monitors.judge import relearn_last_append
from app.monitors.records import DeliveryAttemptRecord, MonitorEventRecord, MonitorPointRecord, MonitorRecord
from app.monitors.runtime import MonitorRuntime
from app.monitors.store import (
    NOT_ANOMALY,
    detector_of,
    enqueue_events,
    epoch_text,
    iso,
    last_points,
    new_monitor_id,
    open_anomaly_points,
    owned,
    utc_now,
)
from app.monitors.webhooks import new_secret
from app.web.errors import NotFound, RateLimitExceeded


def describe_monitor(session: Session, monitor: MonitorRecord, *, points: int) -> dict[str, Any]:
    last = last_points(session, monitor.id, max(points, 1))
    view = monitor_view(monitor, last_timestamp=last[-1].timestamp if last else None)
    view["open_anomalies"] = [point_view(p) for p in open_anomaly_points(session, monitor)]
    if points > 0:
        view["points"] = [point_view(p) for p in last]
    return view


def get_monitor(*, database: Database, account_id: str, monitor_id: str, points: int) -> dict[str, Any]:
    with database.session() as session:
        monitor = owned(session, account_id=account_id, monitor_id=monitor_id)
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
        monitor = owned(session, account_id=account_id, monitor_id=monitor_id)
        rows = last_points(session, monitor_id, max_points)
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
        point_count=0,
        first_epoch=None,
        last_epoch=None,
        revision=0,
        event_seq=0,
        open_anomaly_epoch=None,
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
        view = describe_monitor(session, monitor, points=0)
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
        return describe_monitor(session, monitor, points=0)


def mark_not_anomaly(
    *, database: Database, runtime: MonitorRuntime, account_id: str, monitor_id: str, epoch: int
) -> dict[str, Any]:
    """Records a user's "not an anomaly" on a stored point. Its verdict stays as it was given; the detector
    learns the point as normal from now on: a point of the last append is relearnt here by replaying that
    append (app.monitors.judge.relearn_last_append), and the moved revision has every other process rebuild
    its state from the stored points. When it was the open incident's last anomaly not marked normal, the
    incident closes here, with its end events (webhook and Alertmanager)."""
    with runtime.locks.lock_for(monitor_id):
        try:
            revision, relearnt, view, closed = _mark(session_scope=database.session(), runtime=runtime,
                                                     account_id=account_id, monitor_id=monitor_id, epoch=epoch)
        except BaseException:
            runtime.cache.drop(monitor_id)  # relearning changed the cached state in place; the change is undone
            raise
        cached = runtime.cache.peek(monitor_id)
        if relearnt and isinstance(cached, JudgeState):
            cached.revision = revision
            runtime.cache.put(monitor_id, cached)
        else:
            runtime.cache.drop(monitor_id)
    if closed:
        runtime.sender.notify()
    return view


def _mark(*, session_scope: Any, runtime: MonitorRuntime, account_id: str, monitor_id: str, epoch: int
          ) -> tuple[int, bool, dict[str, Any], bool]:
    """(the monitor's new revision, relearnt in this process's state, the point's view, incident closed)."""
    closed = False
    with session_scope as session:
        monitor = owned(session, account_id=account_id, monitor_id=monitor_id, for_update=True)
        point = session.get(MonitorPointRecord, (monitor_id, epoch))
        if point is None:
            raise NotFound("No stored point at that timestamp.", details={
                "field": "timestamp", "issue": "no stored point", "provided": epoch_text(epoch)})
        point.feedback = NOT_ANOMALY
        session.flush()
        if monitor.open_anomaly_epoch is not None and epoch >= monitor.open_anomaly_epoch:
            closed = _close_if_all_marked(session, monitor, point)
        # This process relearns a point of the last append by replaying that append alone; any other change
        # (and every other process) rebuilds from the stored points, which the moved relearn_revision asks for.
        cached = runtime.cache.peek(monitor_id)
        relearnt = (isinstance(cached, JudgeState) and cached.revision == monitor.revision
                    and relearn_last_append(cached, detector_of(monitor), epoch))
        monitor.revision += 1
        monitor.relearn_revision = monitor.revision
        monitor.updated_at = utc_now()
        session.flush()
        return monitor.revision, relearnt, point_view(point), closed


def _close_if_all_marked(session: Session, monitor: MonitorRecord, marked: MonitorPointRecord) -> bool:
    if open_anomaly_points(session, monitor, limit=1):
        return False
    assert monitor.open_anomaly_epoch is not None
    anomalies = session.scalar(select(func.count()).select_from(MonitorPointRecord).where(
        MonitorPointRecord.monitor_id == monitor.id, MonitorPointRecord.epoch >= monitor.open_anomaly_epoch,
        MonitorPointRecord.is_anomaly.is_(True))) or 0
    opening = session.get(MonitorPointRecord, (monitor.id, monitor.open_anomaly_epoch))
    described = alert_view(opening or marked)
    plan = incidents.closed_by_feedback(monitor, first=described, marked=alert_view(marked), marked_epoch=marked.epoch,
                                        anomalies=anomalies)
    enqueue_events(session, monitor, plan, utc_now())
    monitor.event_seq = plan.seq
    monitor.open_anomaly_epoch = None
    return True


def rotate_secret(*, database: Database, account_id: str, monitor_id: str) -> str:
    secret = new_secret()
    with database.session() as session:
        monitor = owned(session, account_id=account_id, monitor_id=monitor_id, for_update=True)
        monitor.webhook_secret = secret
        monitor.updated_at = utc_now()
    return secret


def delete_monitor(*, database: Database, runtime: MonitorRuntime, account_id: str, monitor_id: str) -> None:
    with runtime.locks.lock_for(monitor_id), database.session() as session:
        owned(session, account_id=account_id, monitor_id=monitor_id, for_update=True)
        # Explicit deletes, children first: SQLite enforces no ON DELETE CASCADE without a pragma.
        session.execute(delete(DeliveryAttemptRecord).where(DeliveryAttemptRecord.monitor_id == monitor_id))
        session.execute(delete(MonitorEventRecord).where(MonitorEventRecord.monitor_id == monitor_id))
        session.execute(delete(MonitorPointRecord).where(MonitorPointRecord.monitor_id == monitor_id))
        session.execute(delete(MonitorRecord).where(MonitorRecord.id == monitor_id))
    runtime.cache.drop(monitor_id)


def deliveries(*, database: Database, account_id: str, monitor_id: str, limit: int) -> list[dict[str, Any]]:
    with database.session() as session:
        owned(session, account_id=account_id, monitor_id=monitor_id)
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
