"""The events a series' verdicts raise (an incident opened or closed, by webhook or Alertmanager), as their
payloads enter the delivery queue in the writer's transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from app.monitors.alerts import queue
from app.monitors.types import EventSource, IncidentPlan, SeriesState
from app.series.instants import moment_text


def series_payload(series_id: int, labels: dict[str, str]) -> dict[str, Any]:
    """What an event says of a labelled series (an unlabelled one's events carry nothing more than before)."""
    return {"series": {"id": series_id, "labels": labels}} if labels else {}


def enqueue_events(connection: Connection, series: SeriesState | EventSource, plan: IncidentPlan,
                   now: datetime) -> None:
    """The planned events into the delivery queue, in the caller's transaction."""
    labels = series.label_map()
    created_at = moment_text(now, microseconds=True)
    for event_seq, kind, extra, destination in plan.events:
        event_id = queue.new_event_id()
        payload = {"id": event_id, "type": kind, "monitor_id": series.monitor_id, "monitor_name": series.name,
                   **series_payload(series.series_id, labels), "sequence": event_seq, "created_at": created_at,
                   **extra}
        url = series.webhook_url if destination == "webhook" else series.alertmanager_url
        queue.enqueue(connection, monitor_id=series.monitor_id, series_id=series.series_id, webhook_url=url or "",
                      seq=event_seq, kind=kind, payload=payload, now=now, destination=destination)
