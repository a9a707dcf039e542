"""Anomalies as Alertmanager alerts (its v2 API, POST /api/v2/alerts), through the same queue and sender as
webhook events, as another destination.

A series of a monitor with an ``alertmanager_url`` gets a "firing" event when an anomaly run opens and a
"resolved" event when it closes, in the transaction that stores the point (app/monitors/store.py). An alert is
identified by its labels (alertname, monitor_id, monitor_name, and a labelled series' own labels with its
series_id), so every firing and resolved alert of one series is the same alert to Alertmanager. A firing alert
is sent with ``endsAt`` HOLD_SECONDS after the send, and re-sent every RESEND_SECONDS while the run stays open
(the periodic ``refresh_alerts`` task), so Alertmanager never closes an open anomaly by itself; if this service
stops re-sending (it is down), the alert resolves HOLD_SECONDS later. A resolved alert carries ``endsAt`` = the
time of the first normal point."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select, update

from app.db import Database
from app.monitors.alerts import queue
from app.monitors.alerts.webhooks import DeliveryOutcome, send_request
from app.monitors.label_sets import public_labels, stored_labels
from app.monitors.records import monitor_points_table, monitor_series_table, monitors_table
from app.monitors.types import EventSource, SeriesState

log = logging.getLogger("app.monitors.alertmanager")

DESTINATION = "alertmanager"
ALERT_NAME = "MonitorAnomaly"
API_PATH = "/api/v2/alerts"
HOLD_SECONDS = 300
RESEND_SECONDS = 60
# Monitors whose open alerts one refresh re-sends per transaction.
REFRESH_BATCH = 200


def _rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def labels(monitor_id: str, monitor_name: str, series_labels: dict[str, str], series_id: int) -> dict[str, str]:
    own = {"alertname": ALERT_NAME, "monitor_id": monitor_id, "monitor_name": monitor_name}
    return {**public_labels(series_labels, series_id), **own} if series_labels else own


def _annotations(monitor_id: str, point: dict[str, Any] | None, series_id: int | None = None) -> dict[str, str]:
    notes = {"monitor": f"/monitors/{monitor_id}", "dashboard": "/dashboard/monitors"}
    if series_id is not None:
        notes["series"] = f"/monitors/{monitor_id}/series/{series_id}"
    if point is not None:
        notes["summary"] = (f"{point['timestamp']}: value {point['value']:g}, expected {point['expected']:g} "
                            f"(range {point['lower_bound']:g} .. {point['upper_bound']:g})")
        if point.get("reason"):  # which signal fired: the value may be inside its range (a window signal)
            notes["summary"] += f". {point['reason']}"
            notes["reason"] = str(point["reason"])
        notes["anomaly_score"] = f"{point['anomaly_score']:.6f}"  # a probability near 1: its last digits matter
        if point.get("direction"):
            notes["direction"] = str(point["direction"])
    return notes


def _identity(series: SeriesState | EventSource, point: dict[str, Any] | None) -> dict[str, Any]:
    series_labels = series.label_map()
    return {"labels": labels(series.monitor_id, series.name, series_labels, series.series_id),
            "annotations": _annotations(series.monitor_id, point, series.series_id if series_labels else None)}


def firing(series: SeriesState | EventSource, start_epoch: int, point: dict[str, Any]) -> dict[str, Any]:
    """The payload part of a "firing" event; ``endsAt`` is added when it is sent."""
    return {"alert": {**_identity(series, point), "startsAt": _rfc3339(start_epoch)}}


def resolved(series: SeriesState | EventSource, start_epoch: int, end_epoch: int, point: dict[str, Any]
             ) -> dict[str, Any]:
    return {"alert": {**_identity(series, point), "startsAt": _rfc3339(start_epoch),
                      "endsAt": _rfc3339(max(end_epoch, start_epoch))}}


def render(body: bytes, *, public_url: str | None, now: float) -> bytes:
    """The stored event as Alertmanager's request body: a list of one alert, a firing one ending HOLD_SECONDS
    from now, and links made absolute when the server knows its public URL."""
    event = json.loads(body)
    alert = dict(event["alert"])
    if "endsAt" not in alert:
        alert["endsAt"] = _rfc3339(now + HOLD_SECONDS)
    if public_url:
        base = public_url.rstrip("/")
        notes = dict(alert.get("annotations", {}))
        for name in ("monitor", "series", "dashboard"):
            if notes.get(name, "").startswith("/"):
                notes[name] = base + notes[name]
        alert["annotations"] = notes
        alert["generatorURL"] = f"{base}/dashboard/monitors#monitor-{event['monitor_id']}-title"
    return json.dumps([alert], separators=(",", ":")).encode()


def post_alert(*, base_url: str, body: bytes, allow_private: bool, timeout: float,
               public_url: str | None = None) -> DeliveryOutcome:
    """One POST of a stored event to an Alertmanager; never raises (the queue retries what fails)."""
    try:
        payload = render(body, public_url=public_url, now=time.time())
    except (ValueError, KeyError, TypeError) as exc:
        return DeliveryOutcome(None, f"not an alert event: {exc}", 0.0)
    answer = send_request(method="POST", url=base_url.rstrip("/") + API_PATH, body=payload,
                          headers={"Content-Type": "application/json"}, allow_private=allow_private,
                          timeout=timeout)
    error = answer.error
    if error and answer.body:
        error = f"{error}: {answer.body[:200].decode(errors='replace')}"
    return DeliveryOutcome(answer.status_code, error, answer.duration_ms)


def refresh_alerts(database: Database, *, now: datetime | None = None) -> int:
    """Queues a "firing" re-send for every series whose anomaly is open and whose last one is RESEND_SECONDS
    old; returns how many. Safe to run in several processes at once: each re-send is claimed with a
    compare-and-set on the series' revision, which also keeps its sequence number from colliding with an
    append's (an append that lost the race retries)."""
    now = now or datetime.now(UTC)
    due_before = now - timedelta(seconds=RESEND_SECONDS * 0.9)
    series, monitors, points = monitor_series_table, monitors_table, monitor_points_table
    queued = 0
    with database.transaction() as connection:
        rows = connection.execute(
            select(series.c.id, series.c.monitor_id, series.c.labels, series.c.revision, series.c.event_seq,
                   series.c.open_anomaly_epoch, monitors.c.name, monitors.c.alertmanager_url)
            .join(monitors, monitors.c.id == series.c.monitor_id)
            .where(monitors.c.alertmanager_url.is_not(None), series.c.open_anomaly_epoch.is_not(None),
                   (series.c.alertmanager_refreshed_at.is_(None)) | (series.c.alertmanager_refreshed_at < due_before))
            .limit(REFRESH_BATCH)
        ).all()
        for row in rows:
            seq = row.event_seq + 1
            claimed = connection.execute(
                update(series)
                .where(series.c.id == row.id, series.c.revision == row.revision)
                .values(revision=row.revision + 1, event_seq=seq, alertmanager_refreshed_at=now)
            )
            if claimed.rowcount != 1:  # type: ignore[attr-defined]
                continue
            first = connection.execute(
                select(points).where(points.c.monitor_id == row.monitor_id, points.c.series_id == row.id,
                                     points.c.epoch == row.open_anomaly_epoch)
            ).first()
            point = None if first is None else {
                "timestamp": first.timestamp, "value": first.value, "expected": first.expected,
                "lower_bound": first.lower, "upper_bound": first.upper, "anomaly_score": first.score,
                "direction": first.direction, "reason": first.reason}
            event_id = queue.new_event_id()
            series_labels = stored_labels(row.labels)
            # The run's first point again: Alertmanager keeps the annotations of the latest send.
            alert = {"labels": labels(row.monitor_id, row.name, series_labels, row.id),
                     "annotations": _annotations(row.monitor_id, point, row.id if series_labels else None),
                     "startsAt": _rfc3339(row.open_anomaly_epoch)}
            payload = {"id": event_id, "type": "firing", "monitor_id": row.monitor_id, "monitor_name": row.name,
                       **({"series": {"id": row.id, "labels": series_labels}} if series_labels else {}),
                       "sequence": seq, "created_at": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "alert": alert}
            queue.enqueue(connection, monitor_id=row.monitor_id, series_id=row.id, webhook_url=row.alertmanager_url,
                          seq=seq, kind="firing", payload=payload, now=now, destination=DESTINATION)
            queued += 1
    return queued
