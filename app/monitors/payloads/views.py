"""The JSON a monitor, its series, their stored points and an append answer with. Whatever concerns a labelled
series carries its ``series_id``; a monitor's one unlabelled series answers as monitors did before they had
series."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Row

from app.compute.detect.results import DEFAULT_DETECTOR
from app.monitors import sources
from app.monitors.label_sets import stored_labels
from app.series.instants import epoch_text, moment_text, utc_text

if TYPE_CHECKING:
    from app.monitors.payloads.reads import OpenIncident, Totals
    from app.monitors.types import SeriesState, Verdict

# Every instant an answer writes is in one form, UTC with "Z" (a stored point's text keeps its fraction): a
# point sent as 00:11:00 or 02:11:00+02:00 reads as the 00:11:00Z the answer's computed instants are written in.


def iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment_text(moment, microseconds=True)


def point_view(point: Row[Any], *, labelled: bool = False) -> dict[str, Any]:
    view = {
        "timestamp": utc_text(point.timestamp),
        "value": point.value,
        "expected": point.expected,
        "lower_bound": point.lower,
        "upper_bound": point.upper,
        "anomaly_score": point.score,
        "is_anomaly": point.is_anomaly,
        "direction": point.direction,
        "reason": point.reason,
        "warmup": point.warmup,
        "feedback": point.feedback,
    }
    if labelled:
        view["series_id"] = point.series_id
    return view


def alert_view(point: Any) -> dict[str, Any]:
    """A stored point as an event describes it."""
    return {"timestamp": utc_text(point.timestamp), "value": point.value, "expected": point.expected,
            "lower_bound": point.lower, "upper_bound": point.upper, "anomaly_score": point.score,
            "direction": point.direction, "reason": point.reason}


def monitor_view(monitor: Row[Any], totals: Totals) -> dict[str, Any]:
    return {
        "id": monitor.id,
        "name": monitor.name,
        "data_frequency": monitor.data_frequency,
        "false_alarms_per_week": monitor.false_alarms_per_week,
        "confidence": monitor.confidence,
        "sensitivity": monitor.sensitivity,
        "min_deviation": monitor.min_deviation,
        "min_relative_deviation": monitor.min_relative_deviation,
        "model": monitor.model or DEFAULT_DETECTOR,
        "retention_points": monitor.retention_points,
        "webhook_url": monitor.webhook_url,
        "remote_write_selector": monitor.remote_write_selector,
        **sources.view(monitor),
        "created_at": iso(monitor.created_at),
        "updated_at": iso(monitor.updated_at),
        "point_count": totals.point_count,
        "last_timestamp": None if totals.last_timestamp is None else utc_text(totals.last_timestamp),
        "series_count": totals.series_count,
        "series_refused": monitor.series_refused,
        "series_refused_at": iso(monitor.series_refused_at),
    }


def incident_view(incident: OpenIncident | None) -> dict[str, Any] | None:
    if incident is None:
        return None
    last = incident.last_anomaly_epoch
    return {"started_at": epoch_text(incident.started_epoch),
            "last_anomaly_at": None if last is None else epoch_text(last), "anomalous_points": incident.anomalies,
            "peak": None if incident.peak is None else point_view(incident.peak)}


def series_view(series: Row[Any], last_point: Row[Any] | None) -> dict[str, Any]:
    return {
        "id": series.id,
        "labels": stored_labels(series.labels),
        "point_count": series.point_count,
        "first_timestamp": None if series.first_epoch is None else epoch_text(series.first_epoch),
        "last_timestamp": None if last_point is None else utc_text(last_point.timestamp),
        "last_point": None if last_point is None else point_view(last_point),
        "open_anomaly_since": None if series.open_anomaly_epoch is None else epoch_text(series.open_anomaly_epoch),
        "created_at": iso(series.created_at),
        "last_seen_at": iso(series.last_seen_at),
    }


def points_answer(
    monitor: SeriesState,
    old_records: list[Any],
    texts: list[str],
    values: list[float],
    verdicts: list[Verdict],
    period: int | None,
) -> dict[str, Any]:
    rows = [point_view(r) for r in old_records] + [
        {"timestamp": utc_text(t), "value": v, "expected": d.expected, "lower_bound": d.lower, "upper_bound": d.upper,
         "anomaly_score": d.score, "is_anomaly": d.is_anomaly, "direction": d.direction, "reason": d.reason,
         "warmup": d.warmup}
        for t, v, d in zip(texts, values, verdicts, strict=True)
    ]
    warmup = 0
    while warmup < len(rows) and rows[warmup]["warmup"]:
        warmup += 1
    return {
        "monitor_id": monitor.monitor_id,
        "timestamps": [r["timestamp"] for r in rows],
        "values": [r["value"] for r in rows],
        "expected": [r["expected"] for r in rows],
        "lower_bound": [r["lower_bound"] for r in rows],
        "upper_bound": [r["upper_bound"] for r in rows],
        "anomaly_score": [r["anomaly_score"] for r in rows],
        "is_anomaly": [r["is_anomaly"] for r in rows],
        "direction": [r["direction"] for r in rows],
        "reason": [r["reason"] for r in rows],
        "warmup_points": warmup,
        "period": period,
        "new_points": len(verdicts),
        "duplicate_points": len(old_records),
        "point_count": monitor.point_count,
    }
