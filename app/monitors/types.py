"""The monitors' shared vocabulary, below every module that uses it: a series as the append path reads it
(SeriesState) and as an event names it (EventSource), a point's verdict, and the events an incident plans. It
imports nothing of app.monitors, so any module may take these names without closing a circle."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Row

from app.compute.detect.budget import budget_for_sensitivity
from app.compute.detect.streaming import StreamingDetector


@dataclass
class SeriesState:
    """A series as the append path reads it: its monitor's settings and its own stored state, a plain copy of one
    row that the append moves to its new state once written."""

    # the monitor's
    monitor_id: str
    account_id: str
    name: str
    data_frequency: str
    confidence: float | None
    false_alarms_per_week: float | None
    model: str | None
    retention_points: int
    webhook_url: str | None
    sensitivity: int | None
    min_deviation: float
    min_relative_deviation: float
    alertmanager_url: str | None
    prometheus_query: str | None
    # the series'
    series_id: int
    labels: str | None
    point_count: int
    first_epoch: int | None
    last_epoch: int | None
    revision: int
    relearn_revision: int
    event_seq: int
    open_anomaly_epoch: int | None

    def detector(self) -> StreamingDetector:
        return detector_of(self)

    def label_map(self) -> dict[str, str]:
        return {} if not self.labels else dict(json.loads(self.labels))


def threshold_of(monitor: SeriesState | Row[Any]) -> tuple[float | None, float | None]:
    """(confidence, false_alarms_per_week) as a monitor's settings give them to a detector."""
    if monitor.sensitivity is not None:
        return None, budget_for_sensitivity(monitor.sensitivity)
    return monitor.confidence, monitor.false_alarms_per_week


def detector_of(monitor: SeriesState | Row[Any]) -> StreamingDetector:
    """The default detector as a monitor's settings configure it."""
    confidence, budget = threshold_of(monitor)
    return StreamingDetector(
        data_frequency=monitor.data_frequency,
        confidence=confidence,
        false_alarms_per_week=budget,
        floor=(monitor.min_deviation, monitor.min_relative_deviation),
    )


@dataclass
class EventSource:
    """A series as an event names it, outside the append path (feedback, retirement)."""

    monitor_id: str
    name: str
    webhook_url: str | None
    alertmanager_url: str | None
    series_id: int
    labels: str | None
    event_seq: int
    open_anomaly_epoch: int | None

    def label_map(self) -> dict[str, str]:
        return {} if not self.labels else dict(json.loads(self.labels))


@dataclass(frozen=True)
class Verdict:
    expected: float
    lower: float
    upper: float
    score: float
    is_anomaly: bool
    direction: str | None
    warmup: bool
    incident: bool  # the detector's incident is still open after the point (it ends at the first that is not)
    reason: str | None = None  # why an anomaly was flagged (app.compute.detect.reasons)


@dataclass
class IncidentPlan:
    # (sequence number, kind, payload fields, destination), in the order they must be delivered
    events: list[tuple[int, str, dict[str, Any], str]] = field(default_factory=list)
    open_epoch: int | None = None  # the open incident's first point after these points, if one is open
    seq: int = 0  # the series' last event sequence number after these events
