"""Request and response shapes of the monitor endpoints; requests load through app.web.validation.load_object.

Shape problems (wrong types, ranges, a bad webhook URL) are 400; problems in the points themselves are 422
(app.monitors.intake.points), as for /forecast and /anomalies. Unknown fields are ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from app.compute.detect.budget import FALSE_ALARMS_RANGE, THRESHOLD_FIELDS, threshold_fields_given
from app.compute.detect.results import DETECTOR_IDS, SENSITIVITY_RANGE
from app.series.timestamps import FREQUENCIES
from app.web.fields import MAX_ABS_VALUE, JsonArray, StoredText, StrictFloat

DEFAULT_RETENTION = 10_000
MAX_RETENTION = 1_000_000
MAX_NAME_LENGTH = 200
FREQUENCY_ISSUE = "Must be one of: " + ", ".join(FREQUENCIES)
DETECTOR_ISSUE = "Must be one of: " + ", ".join(DETECTOR_IDS)


class StrictString(StoredText):
    """A JSON string the database can hold (marshmallow's String is already strict; this also trims and refuses
    blank)."""

    def _deserialize(self, value: Any, attr: str | None, data: Mapping[str, Any] | None, **kwargs: Any) -> str:
        text = super()._deserialize(value, attr, data, **kwargs)
        if not text.strip():
            raise ValidationError("Must not be blank.")
        return text.strip()


class JudgingFields(Schema):
    """How a monitor's points are judged; the same fields on creation and on change (absent: unchanged, or
    the default on creation)."""

    false_alarms_per_week = StrictFloat(
        allow_none=True,
        allow_nan=False,
        validate=validate.Range(*FALSE_ALARMS_RANGE, error="Must be between 0.001 and 1000"),
        metadata={"description": "How many false alarms a normal stream may raise per week; it sets the "
                  "threshold. Default null: one a week. At most one of false_alarms_per_week, confidence and "
                  "sensitivity is given; on a change the one given replaces the others."},
    )
    confidence = StrictFloat(
        allow_none=True,
        allow_nan=False,
        validate=validate.Range(0.5, 0.9999, error="Must be between 0.5 and 0.9999"),
        metadata={"description": "Instead of false_alarms_per_week: the share of normal points below the "
                  "threshold, as in /anomalies. Default null."},
    )
    sensitivity = fields.Integer(
        allow_none=True,
        strict=True,
        validate=validate.Range(*SENSITIVITY_RANGE, error="Must be between 0 and 99"),
        metadata={"description": "Instead of false_alarms_per_week: Azure's 0-99 scale, 10^(4·sensitivity/99 - 2) "
                  "false alarms a week. Default null."},
    )
    min_deviation = StrictFloat(
        allow_nan=False,
        validate=validate.Range(min=0, max=MAX_ABS_VALUE, error="Must be between 0 and 1e300"),
        metadata={"description": "A point closer than this to its expected value is never an anomaly. "
                  "Default 0."},
    )
    min_relative_deviation = StrictFloat(
        allow_nan=False,
        validate=validate.Range(0, 100, error="Must be between 0 and 100"),
        metadata={"description": "As min_deviation, as a share of |expected| (0.1 = 10%). Default 0."},
    )

    @validates_schema
    def one_threshold(self, data: Mapping[str, Any], **kwargs: Any) -> None:
        given = threshold_fields_given(data)
        if len(given) > 1:
            raise ValidationError(f"Give one of {', '.join(THRESHOLD_FIELDS)}, not several.", given[1])


class MonitorCreateSchema(JudgingFields):
    class Meta:
        unknown = "exclude"

    name = StrictString(required=True, validate=validate.Length(max=MAX_NAME_LENGTH))
    data_frequency = fields.String(required=True, validate=validate.OneOf(FREQUENCIES, error=FREQUENCY_ISSUE))
    model = fields.String(
        load_default=None,
        allow_none=True,
        validate=validate.OneOf(DETECTOR_IDS, error=DETECTOR_ISSUE),
        metadata={"description": "The detector that judges the points, as X-Model-Id on /anomalies; null for "
                  "the default."},
    )
    retention_points = fields.Integer(
        load_default=DEFAULT_RETENTION,
        strict=True,
        validate=validate.Range(1, MAX_RETENTION, error=f"Must be between 1 and {MAX_RETENTION}"),
        metadata={"description": "Points kept; the oldest are dropped beyond it."},
    )
    webhook_url = StoredText(
        load_default=None,
        allow_none=True,
        metadata={"description": "https URL that receives signed alert events; null for none."},
    )
    prometheus_url = StoredText(
        load_default=None,
        allow_none=True,
        metadata={"description": "Base URL of a Prometheus server (as in its /api/v1); with prometheus_query the "
                  "monitor reads its points from there instead of being sent them. The webhook address rules "
                  "apply."},
    )
    prometheus_query = StoredText(
        load_default=None,
        allow_none=True,
        metadata={"description": "PromQL that yields one series; evaluated once per data_frequency step."},
    )
    alertmanager_url = StoredText(
        load_default=None,
        allow_none=True,
        metadata={"description": "Base URL of an Alertmanager that receives the monitor's anomalies as alerts "
                  "(v2 API), besides the webhook; null for none."},
    )
    remote_write_selector = StoredText(
        load_default=None,
        allow_none=True,
        metadata={"description": "A PromQL series selector, e.g. {job=\"api\", __name__=\"http_requests_total\"}: "
                  "the series remote-written to POST /api/v1/write that feed this monitor. Pushed monitors only."},
    )


class MonitorPatchSchema(JudgingFields):
    class Meta:
        unknown = "exclude"

    name = StrictString(validate=validate.Length(max=MAX_NAME_LENGTH))
    webhook_url = StoredText(allow_none=True, metadata={"description": "null removes the webhook."})
    prometheus_url = StoredText(allow_none=True, metadata={"description": "Only on a Prometheus-backed monitor."})
    prometheus_query = StoredText(allow_none=True, metadata={"description": "Only on a Prometheus-backed monitor; "
                                  "the next read starts where the last one stopped."})
    alertmanager_url = StoredText(allow_none=True, metadata={"description": "null removes the Alertmanager."})
    remote_write_selector = StoredText(allow_none=True, metadata={"description": "null stops remote-written "
                                       "series from reaching the monitor."})


class PointsRequestSchema(Schema):
    class Meta:
        unknown = "exclude"

    timestamps = JsonArray(
        required=True,
        metadata={"description": "Strictly increasing, in /forecast's timestamp form; holes and jitter are "
                  "accepted. Whole seconds identify a point.", "items": {"type": "string", "format": "date-time"}},
    )
    values = JsonArray(required=True, metadata={"items": {"type": "number"}})
    labels = fields.Raw(
        load_default=None,
        metadata={"description": "The series the points belong to, as an object of label names to values; absent "
                  "or null: the monitor's unlabelled series.", "type": "object",
                  "additionalProperties": {"type": "string"}},
    )


class PointsResponseSchema(Schema):
    monitor_id = fields.String(required=True)
    timestamps = fields.List(fields.String(), required=True)
    values = fields.List(fields.Float(), required=True)
    expected = fields.List(fields.Float(), required=True)
    lower_bound = fields.List(fields.Float(), required=True)
    upper_bound = fields.List(fields.Float(), required=True)
    anomaly_score = fields.List(fields.Float(), required=True)
    is_anomaly = fields.List(fields.Boolean(), required=True)
    direction = fields.List(fields.String(allow_none=True), required=True)
    reason = fields.List(fields.String(allow_none=True), required=True,
                         metadata={"description": "Why each anomaly was flagged, as in POST /anomalies; null for "
                                   "any other entry."})
    warmup_points = fields.Integer(required=True, metadata={"description": "Leading entries judged as warm-up."})
    period = fields.Integer(
        allow_none=True, required=True,
        metadata={"description": "The seasonality the judge used, in rows, as /anomalies; null when no new point."},
    )
    new_points = fields.Integer(required=True, metadata={"description": "Entries stored by this request."})
    duplicate_points = fields.Integer(
        required=True, metadata={"description": "Entries already stored with the same value (answered as stored)."}
    )
    point_count = fields.Integer(required=True)


class PointSchema(Schema):
    timestamp = fields.String(required=True)
    value = fields.Float(required=True)
    expected = fields.Float(required=True)
    lower_bound = fields.Float(required=True)
    upper_bound = fields.Float(required=True)
    anomaly_score = fields.Float(required=True)
    is_anomaly = fields.Boolean(required=True)
    direction = fields.String(allow_none=True, required=True)
    reason = fields.String(allow_none=True, required=True,
                           metadata={"description": "Why the anomaly was flagged, as in POST /anomalies; else null."})
    warmup = fields.Boolean(required=True)
    feedback = fields.String(
        allow_none=True, required=True,
        metadata={"description": "\"not_anomaly\" once a user said so (POST /monitors/{id}/feedback); else null."},
    )
    series_id = fields.Integer(metadata={"description": "The point's series, when it is a labelled series of its "
                                         "monitor (a monitor's unlabelled points carry none)."})


class ForecastSchema(Schema):
    model = fields.String(required=True)
    confidence = fields.Float(required=True)
    forecast_timestamps = fields.List(fields.String(), required=True)
    lower_bound = fields.List(fields.Float(), required=True)
    median = fields.List(fields.Float(), required=True)
    upper_bound = fields.List(fields.Float(), required=True)


class SourceSchema(Schema):
    kind = fields.String(required=True, metadata={"enum": ["push", "prometheus"]})
    prometheus_url = fields.String(allow_none=True)
    query = fields.String(allow_none=True)
    step_seconds = fields.Integer(allow_none=True)
    status = fields.String(allow_none=True, metadata={
        "enum": ["pending", "ok", "no_series", "unreachable", "timeout", "error"],
        "description": "The last read's outcome; anything but ok and pending is a problem that message names."})
    message = fields.String(allow_none=True)
    checked_at = fields.String(allow_none=True, metadata={"description": "When Prometheus was last asked."})
    read_until = fields.String(allow_none=True, metadata={"description": "Read up to this evaluation time."})


class IncidentSchema(Schema):
    started_at = fields.String(required=True, metadata={"description": "Its first anomaly's time."})
    last_anomaly_at = fields.String(allow_none=True, required=True, metadata={
        "description": "Its latest anomaly's time (null once every one was marked normal); it ends after "
                       "48 points in a row within their range, when its level is adopted, or by feedback."})
    anomalous_points = fields.Integer(required=True, metadata={"description": "Its anomalies not marked normal."})
    peak = fields.Nested(PointSchema, allow_none=True, required=True,
                         metadata={"description": "Its anomaly furthest from what was expected."})


class SeriesSchema(Schema):
    id = fields.Integer(required=True)
    labels = fields.Dict(keys=fields.String(), values=fields.String(), required=True,
                         metadata={"description": "The series' label set; {} for a monitor's unlabelled stream."})
    point_count = fields.Integer(required=True)
    first_timestamp = fields.String(allow_none=True, required=True)
    last_timestamp = fields.String(allow_none=True, required=True)
    last_point = fields.Nested(PointSchema, allow_none=True, required=True)
    open_anomaly_since = fields.String(allow_none=True, required=True,
                                       metadata={"description": "The open incident's first point; null: none open."})
    open_incident = fields.Nested(IncidentSchema, allow_none=True, required=True,
                                  metadata={"description": "The open incident; null: none open."})
    created_at = fields.String(required=True)
    last_seen_at = fields.String(required=True, metadata={"description": "When a point was last stored; a "
                                 "labelled series unseen for MONITOR_SERIES_RETIRE_SECONDS is retired."})
    points = fields.List(fields.Nested(PointSchema), metadata={"description": "The last ?points=N points."})
    monitor_id = fields.String(metadata={"description": "GET /monitors/{id}/series/{series_id} only."})
    open_anomalies = fields.List(fields.Nested(PointSchema), metadata={"description": "One series' page only."})
    forecast = fields.Nested(ForecastSchema, allow_none=True, metadata={"description": "With ?horizon=H."})


class SeriesListSchema(Schema):
    monitor_id = fields.String(required=True)
    series = fields.List(fields.Nested(SeriesSchema), required=True)
    next_after = fields.Integer(allow_none=True, required=True)


class MonitorSchema(Schema):
    id = fields.String(required=True)
    name = fields.String(required=True)
    data_frequency = fields.String(required=True)
    false_alarms_per_week = fields.Float(allow_none=True, required=True)
    confidence = fields.Float(allow_none=True, required=True)
    sensitivity = fields.Integer(allow_none=True, required=True)
    min_deviation = fields.Float(required=True)
    min_relative_deviation = fields.Float(required=True)
    model = fields.String(required=True)
    retention_points = fields.Integer(required=True)
    webhook_url = fields.String(allow_none=True, required=True)
    alertmanager_url = fields.String(allow_none=True, required=True)
    remote_write_selector = fields.String(allow_none=True, required=True)
    source = fields.Nested(SourceSchema, required=True)
    created_at = fields.String(required=True)
    updated_at = fields.String(required=True)
    point_count = fields.Integer(required=True)
    last_timestamp = fields.String(allow_none=True, required=True)
    open_anomalies = fields.List(fields.Nested(PointSchema), required=True)
    open_incident = fields.Nested(IncidentSchema, allow_none=True, metadata={"description": "Its series' open "
                                  "incident when it has one series (each entry of series has its own)."})
    points = fields.List(fields.Nested(PointSchema), metadata={"description": "The last ?points=N points of its "
                         "series when it has one; empty when it has several (each entry of series has its own)."})
    forecast = fields.Nested(ForecastSchema, allow_none=True, metadata={"description": "With ?horizon=H."})
    series_count = fields.Integer(required=True, metadata={"description": "Its series: one per label set."})
    series_refused = fields.Integer(required=True, metadata={"description": "Points refused because their new "
                                    "series would have passed MAX_SERIES_PER_MONITOR."})
    series_refused_at = fields.String(allow_none=True, required=True)
    series = fields.List(fields.Nested(SeriesSchema), metadata={"description": "GET /monitors/{id}: the first "
                         "?series=N of its series."})
    series_next_after = fields.Integer(allow_none=True, metadata={"description": "Continue with GET "
                                       "/monitors/{id}/series?after= when it has more."})
    webhook_secret = fields.String(metadata={"description": "Only in the answer that creates or rotates it."})


class MonitorListSchema(Schema):
    monitors = fields.List(fields.Nested(MonitorSchema), required=True)
    next_after = fields.String(allow_none=True, required=True)


class DeliveryAttemptSchema(Schema):
    attempt = fields.Integer(required=True)
    attempted_at = fields.String(required=True)
    duration_ms = fields.Float(required=True)
    status_code = fields.Integer(allow_none=True, required=True)
    error = fields.String(allow_none=True, required=True)


class DeliverySchema(Schema):
    event_id = fields.String(required=True)
    type = fields.String(required=True, metadata={"description": "anomaly, anomaly_ended (webhook); firing, "
                                                    "resolved (Alertmanager)"})
    destination = fields.String(required=True, metadata={"enum": ["webhook", "alertmanager"]})
    sequence = fields.Integer(required=True)
    status = fields.String(required=True, metadata={"enum": ["pending", "sending", "delivered", "failed",
                                                                "cancelled"]})
    created_at = fields.String(required=True)
    next_attempt_at = fields.String(allow_none=True, required=True)
    delivered_at = fields.String(allow_none=True, required=True)
    attempts = fields.List(fields.Nested(DeliveryAttemptSchema), required=True)


class DeliveriesSchema(Schema):
    monitor_id = fields.String(required=True)
    deliveries = fields.List(fields.Nested(DeliverySchema), required=True)


class SecretSchema(Schema):
    webhook_secret = fields.String(required=True)


class FeedbackRequestSchema(Schema):
    class Meta:
        unknown = "exclude"

    timestamp = fields.String(
        required=True, metadata={"description": "A stored point's timestamp, as sent with the point."}
    )
    series_id = fields.Integer(
        load_default=None, allow_none=True, strict=True, validate=validate.Range(1, 2**63 - 1),
        metadata={"description": "The series of the point; needed only on a monitor with several series."},
    )
    is_anomaly = fields.Boolean(
        required=True,
        validate=validate.Equal(False, error="Must be false: only 'not an anomaly' is taken"),
        metadata={"description": "false: the point is normal; the detector learns it as such from now on."},
    )
