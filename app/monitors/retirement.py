"""Retiring the labelled series that stopped coming (an instance gone, a label value that changed): a series that got
no point for MONITOR_SERIES_RETIRE_SECONDS (or three of its monitor's nominal steps, if longer) is deleted with its
points, and its open incident ends with it (the webhook's ``anomaly_ended`` with ``"closed_by": "retired"``,
Alertmanager's ``resolved``). It then counts no more against the monitor's series cap; if its label set comes back,
it is a new series. A monitor's unlabelled series is never retired: it is the monitor's one stream.

A periodic task of ``jobs worker`` runs it every minute. Each series goes in a transaction of its own, claimed with
a compare-and-set on its revision, so a point stored meanwhile keeps it (and any number of workers may run this)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Row, delete, func, select, update

from app.db import Database
from app.monitors.alerts import incidents
from app.monitors.alerts.events import enqueue_events
from app.monitors.label_sets import retire_after
from app.monitors.payloads.views import alert_view
from app.monitors.records import monitor_points_table, monitor_series_table, monitor_snapshots_table, monitors_table
from app.monitors.store import peak_first, standing_anomaly
from app.monitors.types import EventSource

log = logging.getLogger("app.monitors.retirement")

# Series one run looks at: the oldest-seen first; the next run (a minute later) takes the rest.
RETIRE_BATCH = 1000

_SERIES = monitor_series_table
_MONITORS = monitors_table
_POINTS = monitor_points_table


def retire_series(database: Database, *, retire_seconds: float, now: datetime | None = None) -> int:
    """Retires the labelled series unseen for their retire time; returns how many."""
    now = now or datetime.now(UTC)
    shortest = retire_after("Seconds", retire_seconds)
    with database.engine.connect() as connection:
        candidates = connection.execute(
            select(_SERIES.c.id, _SERIES.c.monitor_id, _SERIES.c.labels, _SERIES.c.revision, _SERIES.c.event_seq,
                   _SERIES.c.open_anomaly_epoch, _SERIES.c.last_epoch, _SERIES.c.last_seen_at,
                   _MONITORS.c.data_frequency, _MONITORS.c.name, _MONITORS.c.webhook_url,
                   _MONITORS.c.alertmanager_url)
            .join(_MONITORS, _MONITORS.c.id == _SERIES.c.monitor_id)
            .where(_SERIES.c.labels_key != "", _SERIES.c.last_seen_at < now - shortest)
            .order_by(_SERIES.c.last_seen_at)
            .limit(RETIRE_BATCH)
        ).all()
    retired = 0
    for row in candidates:
        if row.last_seen_at.replace(tzinfo=UTC) >= now - retire_after(row.data_frequency, retire_seconds):
            continue
        with database.engine.connect() as connection:
            connection.begin()
            if _retire(connection, row, now):
                connection.commit()
                retired += 1
            else:
                connection.rollback()
    if retired:
        log.info("series retired", extra={"fields": {"series": retired}})
    return retired


def _retire(connection: Connection, row: Row[Any], now: datetime) -> bool:
    series_id, monitor_id, opened = row.id, row.monitor_id, row.open_anomaly_epoch
    # The claim moves the revision: an append that read the series before it fails its own compare-and-set.
    claimed = connection.execute(update(_SERIES).where(_SERIES.c.id == series_id, _SERIES.c.revision == row.revision)
                                 .values(revision=row.revision + 1))
    if claimed.rowcount != 1:
        return False  # a point came meanwhile, or another worker retired it
    first, last = (_point(connection, monitor_id, series_id, epoch) for epoch in (opened, row.last_epoch))
    if opened is not None and first is not None and last is not None:
        source = EventSource(monitor_id=monitor_id, name=row.name, webhook_url=row.webhook_url,
                             alertmanager_url=row.alertmanager_url, series_id=series_id, labels=row.labels,
                             event_seq=row.event_seq, open_anomaly_epoch=opened)
        in_incident = (_POINTS.c.monitor_id == monitor_id, _POINTS.c.series_id == series_id,
                       _POINTS.c.epoch >= opened, _POINTS.c.is_anomaly.is_(True))
        anomalies = connection.execute(select(func.count()).select_from(_POINTS).where(*in_incident)).scalar() or 0
        peak = connection.execute(select(_POINTS).where(*in_incident, standing_anomaly(_POINTS.c))
                                  .order_by(*peak_first(_POINTS.c)).limit(1)).first()
        plan = incidents.closed(source, first=alert_view(first), last=alert_view(last), last_epoch=last.epoch,
                                anomalies=int(anomalies), by="retired", peak=peak and alert_view(peak))
        enqueue_events(connection, source, plan, now)
    connection.execute(delete(_POINTS).where(_POINTS.c.monitor_id == monitor_id, _POINTS.c.series_id == series_id))
    connection.execute(delete(monitor_snapshots_table).where(monitor_snapshots_table.c.series_id == series_id))
    connection.execute(delete(_SERIES).where(_SERIES.c.id == series_id))
    return True


def _point(connection: Connection, monitor_id: str, series_id: int, epoch: int | None) -> Any:
    if epoch is None:
        return None
    return connection.execute(select(_POINTS).where(_POINTS.c.monitor_id == monitor_id,
                                                    _POINTS.c.series_id == series_id, _POINTS.c.epoch == epoch)).first()
