"""Request and response shapes of POST /anomalies and /anomalies/last, and their checks.

The checks follow /forecast: the request's shape answers 400 (every problem listed), the series data
422 with the offending index. Differences: at least MIN_POINTS points, and the timestamps only have
to be strictly increasing in one form (gaps and jitter are real and accepted).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marshmallow import Schema, fields, validate

from app.compute.detect.budget import (
    FALSE_ALARMS_RANGE,
    THRESHOLD_FIELDS,
    budget_for_sensitivity,
    threshold_fields_given,
)
from app.compute.detect.results import DEFAULT_DETECTOR, DETECTOR_IDS, SENSITIVITY_RANGE
from app.forecast.schemas import FREQUENCY_ISSUE, missing_rows, present_values
from app.series.instants import epoch_seconds
from app.series.timestamps import FREQUENCIES, TimestampError
from app.web.errors import DataValidationError, sentence
from app.web.fields import JsonArray, StrictFloat
from app.web.validation import envelope, load_object, problem

MIN_POINTS = 12


class AnomalySeriesSchema(Schema):
    class Meta:
        unknown = "exclude"

    timestamps = JsonArray(
        required=True,
        metadata={
            "description": "YYYY-MM-DDTHH:MM:SS, optionally with fractional seconds and Z or ±HH:MM, one form "
            "throughout; strictly increasing. Missing intervals and jitter off the grid are accepted. "
            "Timestamps without an offset are read as UTC.",
            "items": {"type": "string", "format": "date-time", "example": "2026-01-01T00:00:00"},
            "minItems": MIN_POINTS,
        },
    )
    values = JsonArray(
        required=True,
        metadata={
            "description": "Finite numbers, one per timestamp; null for a missing value, whose row is left "
            "out as a missing timestamp is.",
            "items": {"type": "number", "nullable": True},
            "minItems": MIN_POINTS,
        },
    )


class AnomalyRequestSchema(Schema):
    class Meta:
        unknown = "exclude"

    series = fields.List(
        fields.Nested(AnomalySeriesSchema),
        required=True,
        validate=validate.Length(equal=1, error="Must contain exactly one series."),
        metadata={"description": "Exactly one series."},
    )
    data_frequency = fields.String(
        required=True,
        validate=validate.OneOf(FREQUENCIES, error=FREQUENCY_ISSUE),
        metadata={"description": "The nominal spacing of the series; it sets which seasonality is tried."},
    )
    false_alarms_per_week = StrictFloat(
        load_default=None,
        allow_nan=False,
        validate=validate.Range(*FALSE_ALARMS_RANGE, error="Must be between 0.001 and 1000"),
        metadata={
            "description": "How many false alarms a normal stream may raise per week; it sets the threshold. "
            "Default 1.",
        },
    )
    confidence = StrictFloat(
        load_default=None,
        allow_nan=False,
        validate=validate.Range(0.5, 0.9999, error="Must be between 0.5 and 0.9999"),
        metadata={
            "description": "Instead of false_alarms_per_week: the share of normal points to keep below the "
            "threshold (the threshold is this number).",
        },
    )
    sensitivity = fields.Integer(
        load_default=None,
        strict=True,
        validate=validate.Range(*SENSITIVITY_RANGE, error="Must be between 0 and 99"),
        metadata={
            "description": "Azure's 0-99 scale instead of false_alarms_per_week: 10^(4·sensitivity/99 - 2) "
            "false alarms a week (about 50 is the default of one; 0 and 99 differ 10,000 times).",
        },
    )


class AnomalyResponseSchema(Schema):
    timestamps = fields.List(fields.String(), required=True, metadata={"description": "The input timestamps."})
    expected = fields.List(
        fields.Float(), required=True, metadata={"description": "The value predicted from the rows before."}
    )
    lower_bound = fields.List(fields.Float(), required=True, metadata={"description": "Low end of the range."})
    upper_bound = fields.List(fields.Float(), required=True, metadata={"description": "High end of the range."})
    anomaly_score = fields.List(
        fields.Float(),
        required=True,
        metadata={"description": "0 to 1: the probability that the row is not normal (news, not part of an "
                  "incident already told)."},
    )
    is_anomaly = fields.List(fields.Boolean(), required=True,
                             metadata={"description": "anomaly_score >= threshold."})
    threshold = fields.Float(
        required=True, metadata={"description": "The least anomaly_score of an anomaly, from the alarm budget."}
    )
    direction = fields.List(
        fields.String(allow_none=True),
        required=True,
        metadata={"description": '"up" or "down" for an anomaly, null otherwise.'},
    )
    reason = fields.List(
        fields.String(allow_none=True),
        required=True,
        metadata={"description": "Why an anomaly was flagged, in a sentence naming the signal and its numbers (its "
                  "value beyond the range; the last points' level or spread against what was expected; a value "
                  "that stopped changing); null for every other row."},
    )
    warmup_points = fields.Integer(
        required=True, metadata={"description": "Leading rows used only to learn (score 0, not an anomaly)."}
    )
    period = fields.Integer(
        allow_none=True, required=True, metadata={"description": "Seasonality used, in rows; null when none."}
    )
    out_of_order = fields.List(
        fields.Integer(),
        required=True,
        metadata={"description": "Rows whose timestamp is not after the row before it (a repeated hour, a clock "
                  "stepping back); they are judged in the order given like every other row."},
    )
    missing_values = fields.Integer(
        metadata={"description": "Only when some values were null: how many rows were left out for it."})


class LastPointResponseSchema(Schema):
    timestamp = fields.String(required=True, metadata={"description": "The last input timestamp."})
    expected = fields.Float(required=True)
    lower_bound = fields.Float(required=True)
    upper_bound = fields.Float(required=True)
    anomaly_score = fields.Float(required=True)
    is_anomaly = fields.Boolean(required=True)
    threshold = fields.Float(required=True)
    direction = fields.String(allow_none=True, required=True)
    reason = fields.String(allow_none=True, required=True, metadata={"description": "As in POST /anomalies."})
    warmup_points = fields.Integer(required=True)
    period = fields.Integer(allow_none=True, required=True)
    out_of_order = fields.List(fields.Integer(), required=True, metadata={"description": "As in POST /anomalies."})
    missing_values = fields.Integer(metadata={"description": "As in POST /anomalies."})


_request_schema = AnomalyRequestSchema()


@dataclass(frozen=True)
class AnomalyRequest:
    timestamps: list[Any]
    values: list[Any]
    data_frequency: str
    confidence: float | None
    false_alarms_per_week: float | None
    detector: str


@dataclass(frozen=True)
class CheckedSeries:
    epoch_seconds: Any  # float64 numpy array, UTC seconds
    values: Any  # float64 numpy array
    out_of_order: list[int]  # rows whose timestamp is not after the row before (judged in the order given)
    # The rows judged: a value sent as null makes its row missing, as a missing timestamp is (the detector
    # judges each row by time, so a hole needs nothing), so these are the timestamps of the other rows.
    timestamps: list[Any] = field(default_factory=list)
    missing_values: int = 0


def out_of_order_rows(instants: Any) -> list[int]:
    import numpy as np

    if len(instants) < 2:
        return []
    return (np.flatnonzero(np.diff(instants) <= 0) + 1).tolist()


def load_request(body: Any, headers: Mapping[str, str]) -> AnomalyRequest:
    """The request's shape; 400 with every problem listed."""
    problems: list[dict[str, Any]] = []
    detector = headers.get("X-Model-Id")
    if detector is not None:
        detector = detector.strip()
        if detector not in DETECTOR_IDS:
            problems.append(problem("X-Model-Id", "Must be one of: " + ", ".join(DETECTOR_IDS), detector))
    problems += threshold_conflicts(body)
    data = load_object(_request_schema, body, problems)
    series = data["series"][0]
    budget = data["false_alarms_per_week"]
    if data["sensitivity"] is not None:
        budget = budget_for_sensitivity(data["sensitivity"])
    return AnomalyRequest(
        timestamps=series["timestamps"],
        values=series["values"],
        data_frequency=data["data_frequency"],
        confidence=data["confidence"],
        false_alarms_per_week=budget,
        detector=detector or DEFAULT_DETECTOR,
    )


def threshold_conflicts(body: Any) -> list[dict[str, Any]]:
    """At most one of the fields that set the threshold may be given (null counts as absent)."""
    if not isinstance(body, dict):
        return []
    given = threshold_fields_given(body)
    if len(given) < 2:
        return []
    return [problem(given[1], f"Give one of {', '.join(THRESHOLD_FIELDS)}, not several",
                    body[given[1]], given=given)]


def check_series(request: AnomalyRequest, *, max_points: int) -> CheckedSeries:
    """The series data; 422 with every defect found and the first one's index."""
    timestamps, values = request.timestamps, request.values
    problems: list[dict[str, Any]] = []
    if len(timestamps) != len(values):
        problems.append(
            problem(
                "series[0]",
                "arrays must have equal length",
                f"{len(timestamps)} timestamps, {len(values)} values",
                timestamps=len(timestamps),
                values=len(values),
            )
        )
    longest = max(len(timestamps), len(values))
    if longest > max_points:
        if min(len(timestamps), len(values)) < MIN_POINTS:
            problems.append(problem("series[0]", "insufficient data points",
                                    f"{min(len(timestamps), len(values))} points", minimum=MIN_POINTS))
        problems.append(problem("series[0]", "too many data points", f"{longest} points", maximum=max_points))
        raise DataValidationError(sentence(f"Invalid series data: {problems[0]['issue']}"), details=envelope(problems))
    floats, missing_count = present_values(timestamps, values, MIN_POINTS, problems)
    instants: Any = []
    if timestamps:
        try:
            instants = epoch_seconds(timestamps, increasing=False)
        except TimestampError as exc:
            extra: dict[str, Any] = {"index": exc.index}
            if exc.expected is not None:
                extra["expected"] = exc.expected
            problems.append(problem("series[0].timestamps", exc.issue, exc.provided, **extra))
    if problems:
        first = problems[0]
        raise DataValidationError(sentence(f"Invalid series data: {first['issue']}"), details=envelope(problems))
    kept = timestamps
    if missing_count:
        import numpy as np

        present = np.ones(len(timestamps), dtype=bool)
        present[missing_rows(values)] = False
        instants = instants[present]
        kept = [text for text, keep in zip(timestamps, present.tolist(), strict=True) if keep]
    return CheckedSeries(epoch_seconds=instants, values=floats, out_of_order=out_of_order_rows(instants),
                         timestamps=kept, missing_values=missing_count)
