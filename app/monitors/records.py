"""The monitor tables (migrations 0002, 0004, 0005, 0011, 0012): monitors, their series, the series' judged points,
the series' saved detector states, the alert queue, its delivery log, and the leases of background jobs."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from app.db import UTCDateTime, metadata

monitors_table = Table(
    "monitors", metadata,
    Column("id", String(32), primary_key=True),
    Column("account_id", String(64), index=True, nullable=False),
    Column("name", String(200), nullable=False),
    Column("data_frequency", String(16), nullable=False),
    # At most one of confidence, sensitivity and false_alarms_per_week sets the threshold; none: one false
    # alarm a week.
    Column("confidence", Float, nullable=True),
    Column("false_alarms_per_week", Float, nullable=True),
    Column("model", String(64), nullable=True),
    Column("retention_points", Integer, nullable=False),
    Column("webhook_url", String(2048), nullable=True),
    # Kept in the clear because signing needs it; it is never returned after creation or rotation.
    Column("webhook_secret", String(128), nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("updated_at", UTCDateTime(), nullable=False),
    # Azure's 0-99 scale, as false alarms per week.
    Column("sensitivity", Integer, nullable=True),
    # Deviations from the expected value below either of these never make an anomaly.
    Column("min_deviation", Float, default=0.0, server_default="0", nullable=False),
    Column("min_relative_deviation", Float, default=0.0, server_default="0", nullable=False),
    # A Prometheus-backed monitor reads its points with this query instead of being sent them.
    Column("prometheus_url", String(2048), nullable=True),
    Column("prometheus_query", Text, nullable=True),
    # The last read's outcome ("ok", "pending", "no_series", ...) and its message for people.
    Column("source_status", String(16), nullable=True),
    Column("source_message", String(500), nullable=True),
    Column("source_checked_at", UTCDateTime(), nullable=True),
    # The evaluation time up to which Prometheus has been read; the next read starts one step later.
    Column("source_read_until", BigInteger, nullable=True),
    # When the next read is due; while a poller holds the monitor, the end of its lease.
    Column("source_due_at", UTCDateTime(), nullable=True, index=True),
    # The token of the poller's claim that holds the monitor (until source_due_at, its lease's end).
    Column("source_claim", String(16), nullable=True),
    # An Alertmanager (base URL) that receives the monitor's anomalies as alerts, besides the webhook.
    Column("alertmanager_url", String(2048), nullable=True),
    # A PromQL series selector: the remote-written series that feed this (pushed) monitor (migration 0009).
    Column("remote_write_selector", Text, nullable=True),
    # Points refused because a new series would have passed the per-monitor cap (MAX_SERIES_PER_MONITOR), and
    # when that last happened (migration 0011).
    Column("series_refused", BigInteger, default=0, server_default="0", nullable=False),
    Column("series_refused_at", UTCDateTime(), nullable=True),
)


# One label set of a monitor: its own stream of points, detector state, incidents and alert sequence. A monitor fed
# one unlabelled stream (pushed points, a query yielding one series without labels) has one series, with the empty
# label set.
monitor_series_table = Table(
    "monitor_series", metadata,

    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
    Column("monitor_id", String(32), ForeignKey("monitors.id", ondelete="CASCADE"), nullable=False),
    # "" for the empty label set, else a digest of the canonical labels (app.monitors.label_sets.labels_key).
    Column("labels_key", String(32), nullable=False),
    # The labels as canonical JSON. NULL: a stream stored before monitors had series, on a monitor fed by
    # Prometheus; the first label set that reaches the monitor takes it over (and its history).
    Column("labels", Text, nullable=True),
    Column("created_at", UTCDateTime(), nullable=False),
    # When a point of this series was last stored; labelled series unseen for long are retired.
    Column("last_seen_at", UTCDateTime(), nullable=False),
    Column("point_count", BigInteger, default=0, nullable=False),
    Column("first_epoch", BigInteger, nullable=True),
    Column("last_epoch", BigInteger, nullable=True),
    # Bumped by every change to the stored points, so a process's cached history knows when it is stale.
    Column("revision", BigInteger, default=0, nullable=False),
    # The revision of the last change a cached detector state cannot follow by reading the new points alone (a
    # point marked "not an anomaly"): a state cached at this revision or later catches up from the points after it.
    Column("relearn_revision", BigInteger, default=0, nullable=False),
    Column("event_seq", BigInteger, default=0, nullable=False),
    # Time of the first point of the anomaly run in progress, None when no run is open.
    Column("open_anomaly_epoch", BigInteger, nullable=True),
    # When a firing alert was last queued for Alertmanager (the re-send claims by this).
    Column("alertmanager_refreshed_at", UTCDateTime(), nullable=True),
    UniqueConstraint("monitor_id", "labels_key", name="uq_monitor_series_labels"),
    # AUTOINCREMENT: a retired series' id is never given to a new one (a process may still cache its state).
    sqlite_autoincrement=True,
)


monitor_points_table = Table(
    "monitor_points", metadata,
    Column("monitor_id", String(32), ForeignKey("monitors.id", ondelete="CASCADE"), primary_key=True),
    Column("series_id", BigInteger, ForeignKey("monitor_series.id", ondelete="CASCADE"), primary_key=True),
    Column("epoch", BigInteger, primary_key=True),
    Column("timestamp", String(40), nullable=False),
    Column("value", Float, nullable=False),
    Column("expected", Float, nullable=False),
    Column("lower", Float, nullable=False),
    Column("upper", Float, nullable=False),
    Column("score", Float, nullable=False),
    Column("is_anomaly", Boolean, nullable=False),
    Column("direction", String(8), nullable=True),
    Column("warmup", Boolean, nullable=False),
    # "not_anomaly" once a user said so; the detector then learns the point as a normal one.
    Column("feedback", String(16), nullable=True),
    Column("reason", String(400), nullable=True),  # why an anomaly was flagged (null for any other point)
)


# The default detector's state of a series as saved every so often, so a process that does not hold it (after a
# restart, on another process or host) replays only the points stored since rather than rebuilding it from the
# stored points its step and season need (app.monitors.state.snapshots).
monitor_snapshots_table = Table(
    "monitor_snapshots", metadata,
    Column("series_id", BigInteger, ForeignKey("monitor_series.id", ondelete="CASCADE"), primary_key=True),
    Column("monitor_id", String(32), ForeignKey("monitors.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("revision", BigInteger, nullable=False),  # the series' revision the state is at
    Column("last_epoch", BigInteger, nullable=False),  # the newest point the state has seen
    Column("layout", String(32), nullable=False),  # the detector's state layout (app.compute.detect.snapshot)
    Column("state", LargeBinary, nullable=False),
    Column("saved_at", UTCDateTime(), nullable=False),
)

# One alert event; while ``status`` is "pending" it is a queue entry that any server's sender may take.
monitor_events_table = Table(
    "monitor_events", metadata,
    Column("id", String(40), primary_key=True),
    Column("monitor_id", String(32), ForeignKey("monitors.id", ondelete="CASCADE"), nullable=False),
    # No foreign key: a retired series' last events (its incident's end) are still delivered.
    Column("series_id", BigInteger, nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("kind", String(32), nullable=False),
    Column("payload", Text, nullable=False),
    Column("webhook_url", String(2048), nullable=False),
    # "webhook" (signed event) or "alertmanager" (an alert for its v2 API); each destination keeps its own order.
    Column("destination", String(16), default="webhook", server_default="webhook", nullable=False),
    Column("status", String(16), nullable=False),
    Column("attempts", Integer, default=0, nullable=False),
    Column("created_at", UTCDateTime(), nullable=False),
    Column("next_attempt_at", UTCDateTime(), nullable=False),
    Column("last_attempt_at", UTCDateTime(), nullable=True),
    Column("delivered_at", UTCDateTime(), nullable=True),
    Column("last_status_code", Integer, nullable=True),
    Column("last_error", String(500), nullable=True),
    # Each series numbers its own events; the sender keeps each series' order per destination.
    UniqueConstraint("series_id", "seq", name="uq_monitor_events_series_seq"),
    # The senders' claim: due events by status and time.
    Index("ix_monitor_events_status_next", "status", "next_attempt_at"),
)


delivery_attempts_table = Table(
    "monitor_delivery_attempts", metadata,
    Column("id", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True),
    Column("event_id", String(40), ForeignKey("monitor_events.id", ondelete="CASCADE"), nullable=False),
    Column("monitor_id", String(32), ForeignKey("monitors.id", ondelete="CASCADE"), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("attempted_at", UTCDateTime(), nullable=False),
    Column("duration_ms", Float, nullable=False),
    Column("status_code", Integer, nullable=True),
    Column("error", String(500), nullable=True),
    Column("sender", String(64), nullable=False),
    Index("ix_monitor_delivery_attempts_monitor", "monitor_id", "id"),
)


# A named lease on a singleton background loop (the Prometheus poller): whoever holds an unexpired lease runs it, so
# every consumer may run the scheduler that restarts it.
job_leases_table = Table(
    "job_leases", metadata,
    Column("name", String(64), primary_key=True),
    Column("holder", String(64), nullable=False),
    Column("expires_at", UTCDateTime(), nullable=False),
)
