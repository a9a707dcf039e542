"""The monitor tables (migrations 0002, 0004, 0005, 0011): monitors, their series, the series' judged points, the
alert queue, its delivery log, and the leases of background jobs."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.db import Base
from app.keys.records import UTCDateTime


class MonitorRecord(Base):
    __tablename__ = "monitors"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    account_id: Mapped[str] = mapped_column(String(64), index=True)
    name: Mapped[str] = mapped_column(String(200))
    data_frequency: Mapped[str] = mapped_column(String(16))
    # At most one of confidence, sensitivity and false_alarms_per_week sets the threshold; none: one false
    # alarm a week.
    confidence: Mapped[float | None] = mapped_column(Float, nullable=True)
    false_alarms_per_week: Mapped[float | None] = mapped_column(Float, nullable=True)
    model: Mapped[str | None] = mapped_column(String(64), nullable=True)
    retention_points: Mapped[int] = mapped_column(Integer)
    webhook_url: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    # Kept in the clear because signing needs it; it is never returned after creation or rotation.
    webhook_secret: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # Azure's 0-99 scale, as false alarms per week.
    sensitivity: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # Deviations from the expected value below either of these never make an anomaly.
    min_deviation: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    min_relative_deviation: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # A Prometheus-backed monitor reads its points with this query instead of being sent them.
    prometheus_url: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    prometheus_query: Mapped[str | None] = mapped_column(Text, nullable=True)
    # The last read's outcome ("ok", "pending", "no_series", ...) and its message for people.
    source_status: Mapped[str | None] = mapped_column(String(16), nullable=True)
    source_message: Mapped[str | None] = mapped_column(String(500), nullable=True)
    source_checked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    # The evaluation time up to which Prometheus has been read; the next read starts one step later.
    source_read_until: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # When the next read is due; while a poller holds the monitor, the end of its lease.
    source_due_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True, index=True)
    # The token of the poller's claim that holds the monitor (until source_due_at, its lease's end).
    source_claim: Mapped[str | None] = mapped_column(String(16), nullable=True)
    # An Alertmanager (base URL) that receives the monitor's anomalies as alerts, besides the webhook.
    alertmanager_url: Mapped[str | None] = mapped_column(String(2048), nullable=True)
    # A PromQL series selector: the remote-written series that feed this (pushed) monitor (migration 0009).
    remote_write_selector: Mapped[str | None] = mapped_column(Text, nullable=True)
    # Points refused because a new series would have passed the per-monitor cap (MAX_SERIES_PER_MONITOR), and
    # when that last happened (migration 0011).
    series_refused: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    series_refused_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class MonitorSeriesRecord(Base):
    """One label set of a monitor: its own stream of points, detector state, incidents and alert sequence. A
    monitor fed one unlabelled stream (pushed points, a query yielding one series without labels) has one series,
    with the empty label set."""

    __tablename__ = "monitor_series"
    # AUTOINCREMENT: a retired series' id is never given to a new one (a process may still cache its state).
    __table_args__ = (UniqueConstraint("monitor_id", "labels_key", name="uq_monitor_series_labels"),
                      {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True,
                                    autoincrement=True)
    monitor_id: Mapped[str] = mapped_column(String(32), ForeignKey("monitors.id", ondelete="CASCADE"))
    # "" for the empty label set, else a digest of the canonical labels (app.monitors.series.labels_key).
    labels_key: Mapped[str] = mapped_column(String(32))
    # The labels as canonical JSON. NULL: a stream stored before monitors had series, on a monitor fed by
    # Prometheus; the first label set that reaches the monitor takes it over (and its history).
    labels: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    # When a point of this series was last stored; labelled series unseen for long are retired.
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime())
    point_count: Mapped[int] = mapped_column(BigInteger, default=0)
    first_epoch: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    last_epoch: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # Bumped by every change to the stored points, so a process's cached history knows when it is stale.
    revision: Mapped[int] = mapped_column(BigInteger, default=0)
    # The revision of the last change a cached detector state cannot follow by reading the new points alone (a
    # point marked "not an anomaly"): a state cached at this revision or later catches up from the points after it.
    relearn_revision: Mapped[int] = mapped_column(BigInteger, default=0)
    event_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    # Time of the first point of the anomaly run in progress, None when no run is open.
    open_anomaly_epoch: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    # When a firing alert was last queued for Alertmanager (the re-send claims by this).
    alertmanager_refreshed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class MonitorPointRecord(Base):
    __tablename__ = "monitor_points"

    monitor_id: Mapped[str] = mapped_column(String(32), ForeignKey("monitors.id", ondelete="CASCADE"), primary_key=True)
    series_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("monitor_series.id", ondelete="CASCADE"),
                                           primary_key=True)
    epoch: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    timestamp: Mapped[str] = mapped_column(String(40))
    value: Mapped[float] = mapped_column(Float)
    expected: Mapped[float] = mapped_column(Float)
    lower: Mapped[float] = mapped_column(Float)
    upper: Mapped[float] = mapped_column(Float)
    score: Mapped[float] = mapped_column(Float)
    is_anomaly: Mapped[bool] = mapped_column(Boolean)
    direction: Mapped[str | None] = mapped_column(String(8), nullable=True)
    warmup: Mapped[bool] = mapped_column(Boolean)
    # "not_anomaly" once a user said so; the detector then learns the point as a normal one.
    feedback: Mapped[str | None] = mapped_column(String(16), nullable=True)


class MonitorEventRecord(Base):
    """One alert event; while ``status`` is "pending" it is a queue entry that any server's sender may take."""

    __tablename__ = "monitor_events"
    __table_args__ = (
        # Each series numbers its own events; the sender keeps each series' order per destination.
        UniqueConstraint("series_id", "seq", name="uq_monitor_events_series_seq"),
        # The senders' claim: due events by status and time.
        Index("ix_monitor_events_status_next", "status", "next_attempt_at"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    monitor_id: Mapped[str] = mapped_column(String(32), ForeignKey("monitors.id", ondelete="CASCADE"))
    # No foreign key: a retired series' last events (its incident's end) are still delivered.
    series_id: Mapped[int] = mapped_column(BigInteger)
    seq: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(32))
    payload: Mapped[str] = mapped_column(Text)
    webhook_url: Mapped[str] = mapped_column(String(2048))
    # "webhook" (signed event) or "alertmanager" (an alert for its v2 API); each destination keeps its own order.
    destination: Mapped[str] = mapped_column(String(16), default="webhook", server_default="webhook")
    status: Mapped[str] = mapped_column(String(16))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)
    last_status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    last_error: Mapped[str | None] = mapped_column(String(500), nullable=True)


class DeliveryAttemptRecord(Base):
    __tablename__ = "monitor_delivery_attempts"
    __table_args__ = (Index("ix_monitor_delivery_attempts_monitor", "monitor_id", "id"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    event_id: Mapped[str] = mapped_column(String(40), ForeignKey("monitor_events.id", ondelete="CASCADE"))
    monitor_id: Mapped[str] = mapped_column(String(32), ForeignKey("monitors.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    attempted_at: Mapped[datetime] = mapped_column(UTCDateTime())
    duration_ms: Mapped[float] = mapped_column(Float)
    status_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    error: Mapped[str | None] = mapped_column(String(500), nullable=True)
    sender: Mapped[str] = mapped_column(String(64))


class JobLeaseRecord(Base):
    """A named lease on a singleton background loop (the Prometheus poller): whoever holds an unexpired lease
    runs it, so every consumer may run the scheduler that restarts it."""

    __tablename__ = "job_leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())
