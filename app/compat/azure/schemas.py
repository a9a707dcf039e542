"""Azure Anomaly Detector v1.1 request and response shapes, and their checks with Azure's error codes.

Field names, defaults, limits and error codes follow the published v1.1 REST specification. Each request
field that fails its check answers 400 with the code Azure uses for that field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from marshmallow import Schema, ValidationError, fields, validate

from app.series.instants import epoch_seconds
from app.series.timestamps import TimestampError
from app.web.errors import ApiError
from app.web.fields import JsonArray, StrictFloat

URL_PREFIX = "/anomalydetector/v1.1"
SUBSCRIPTION_KEY_HEADER = "Ocp-Apim-Subscription-Key"  # where Azure's SDKs send the key

if TYPE_CHECKING:  # numpy loads on the first series, so the admin CLI never pays for it
    import numpy as np

MIN_POINTS = 12
MAX_POINTS = 8640
MAX_ABS_VALUE = 1e300
GRANULARITIES: dict[str, str | None] = {
    "yearly": "Yearly",
    "monthly": "Monthly",
    "weekly": "Weekly",
    "daily": "Daily",
    "hourly": "Hours",
    "minutely": "Minutes",
    "secondly": "Seconds",
    "microsecond": "Seconds",
    "none": None,
}
IMPUTE_MODES = ("auto", "previous", "linear", "fixed", "zero", "notFill")
DEFAULT_SENSITIVITY = 99
DEFAULT_MAX_ANOMALY_RATIO = 0.25
DEFAULT_STABLE_TREND_WINDOW = 10
DEFAULT_CHANGE_THRESHOLD = 0.99


class AzureError(ApiError):
    """An error in Azure's shape: {"code", "message"} with one of Azure's error codes."""

    status = 400
    code = "INVALID_REQUEST"  # only used if this error ever reaches the house handler

    def __init__(self, azure_code: str, message: str, *, status: int = 400) -> None:
        super().__init__(message)
        self.azure_code = azure_code
        self.status = status


class TimeSeriesPointSchema(Schema):
    class Meta:
        unknown = "exclude"

    timestamp = fields.String(
        metadata={
            "format": "date-time",
            "description": "ISO 8601 timestamp of the point; required unless granularity is none. Without an "
            "offset it is read as UTC.",
        }
    )
    value = StrictFloat(required=True, allow_nan=False, metadata={"description": "The measurement."})


_GRANULARITY = fields.String(
    validate=validate.OneOf(list(GRANULARITIES)),
    metadata={
        "description": "Spacing of the series: yearly, monthly, weekly, daily, hourly, minutely, secondly, "
        "microsecond or none (default none: timestamps may be absent and the points are taken as evenly spaced)."
    },
)
_CUSTOM_INTERVAL = fields.Integer(
    strict=True,
    validate=validate.Range(min=1),
    metadata={"description": "Units of granularity per step, e.g. 5 with minutely for five-minute data."},
)
_PERIOD = fields.Integer(
    strict=True,
    allow_none=True,
    validate=validate.Range(min=0),
    metadata={"description": "Seasonality in points; 0 = none; absent = chosen from the granularity."},
)


def _series_field() -> fields.Field:
    return fields.List(
        fields.Nested(TimeSeriesPointSchema),
        required=True,
        metadata={"description": f"{MIN_POINTS} to {MAX_POINTS} points sorted by timestamp, no duplicates."},
    )


class DetectRequestSchema(Schema):
    class Meta:
        unknown = "exclude"

    series = _series_field()
    granularity = _GRANULARITY
    customInterval = _CUSTOM_INTERVAL  # noqa: N815 - Azure's field name
    period = _PERIOD
    maxAnomalyRatio = StrictFloat(  # noqa: N815
        load_default=DEFAULT_MAX_ANOMALY_RATIO,
        allow_nan=False,
        validate=validate.Range(0, 0.49, min_inclusive=False),
        metadata={"description": "At most this share of the points is reported as anomalies (0 < r <= 0.49)."},
    )
    sensitivity = fields.Integer(
        strict=True,
        load_default=DEFAULT_SENSITIVITY,
        validate=validate.Range(0, 99),
        metadata={
            "description": "0 to 99 (default 99); lower means wider margins and fewer anomalies: "
            "10^(4·sensitivity/99 - 2) false alarms a week on a normal series (99: a hundred, about 50: one, "
            "0: one in a hundred weeks), never more than one point in 100."
        },
    )
    imputeMode = fields.String(  # noqa: N815
        validate=validate.OneOf(IMPUTE_MODES),
        metadata={
            "description": "auto, previous, linear, fixed, zero or notFill. Accepted for compatibility: the "
            "detector judges each point against the time before it, so missing points need no filling."
        },
    )
    imputeFixedValue = StrictFloat(  # noqa: N815
        allow_nan=False, metadata={"description": "Accepted for compatibility (used by Azure with imputeMode fixed)."}
    )


class ChangePointRequestSchema(Schema):
    class Meta:
        unknown = "exclude"

    series = _series_field()
    granularity = fields.String(
        required=True,
        validate=validate.OneOf([g for g in GRANULARITIES if g != "none"]),
        metadata={"description": "Spacing of the series (required): yearly ... secondly."},
    )
    customInterval = _CUSTOM_INTERVAL  # noqa: N815
    period = _PERIOD
    stableTrendWindow = fields.Integer(  # noqa: N815
        strict=True,
        load_default=DEFAULT_STABLE_TREND_WINDOW,
        validate=validate.Range(min=3),
        metadata={"description": "Points on each side of a change that must hold the new level (>= 3, < n/2)."},
    )
    threshold = StrictFloat(
        load_default=DEFAULT_CHANGE_THRESHOLD,
        allow_nan=False,
        validate=validate.Range(0.01, 0.99),
        metadata={"description": "0.01 to 0.99 (default 0.99): the least confidence score of a change point."},
    )


class EntireDetectResponseSchema(Schema):
    period = fields.Integer(required=True, metadata={"description": "Seasonality used in points; 0 = none."})
    expectedValues = fields.List(fields.Float(), required=True)  # noqa: N815
    upperMargins = fields.List(fields.Float(), required=True)  # noqa: N815
    lowerMargins = fields.List(fields.Float(), required=True)  # noqa: N815
    isAnomaly = fields.List(fields.Boolean(), required=True)  # noqa: N815
    isNegativeAnomaly = fields.List(fields.Boolean(), required=True)  # noqa: N815
    isPositiveAnomaly = fields.List(fields.Boolean(), required=True)  # noqa: N815
    severity = fields.List(
        fields.Float(), required=True, metadata={"description": "0 for normal points, else (0.5, 1]."}
    )


class LastDetectResponseSchema(Schema):
    period = fields.Integer(required=True)
    suggestedWindow = fields.Integer(  # noqa: N815
        required=True, metadata={"description": "Trailing points the detector reads to judge the last one."}
    )
    expectedValue = fields.Float(required=True)  # noqa: N815
    upperMargin = fields.Float(required=True)  # noqa: N815
    lowerMargin = fields.Float(required=True)  # noqa: N815
    isAnomaly = fields.Boolean(required=True)  # noqa: N815
    isNegativeAnomaly = fields.Boolean(required=True)  # noqa: N815
    isPositiveAnomaly = fields.Boolean(required=True)  # noqa: N815
    severity = fields.Float(required=True)


class ChangePointResponseSchema(Schema):
    period = fields.Integer(required=True)
    isChangePoint = fields.List(fields.Boolean(), required=True)  # noqa: N815
    confidenceScores = fields.List(fields.Float(), required=True)  # noqa: N815


class AzureErrorSchema(Schema):
    code = fields.String(
        required=True,
        metadata={
            "description": "InvalidCustomInterval, BadArgument, InvalidGranularity, InvalidPeriod, "
            "InvalidModelArgument, InvalidSeries, InvalidJsonFormat, RequiredGranularity, RequiredSeries, "
            "InvalidImputeMode, InvalidImputeFixedValue; and for the key and limits: Unauthorized, Forbidden, "
            "TooManyRequests; InternalServerError."
        },
    )
    message = fields.String(required=True)


class _FastSeries:
    """Loading variant of the request schemas: series taken as a raw array and checked point by point in
    check_series, because a marshmallow Nested per point runs a whole schema load for every point."""

    series = JsonArray(required=True)


class DetectLoadSchema(_FastSeries, DetectRequestSchema):  # type: ignore[misc]
    pass


class ChangePointLoadSchema(_FastSeries, ChangePointRequestSchema):  # type: ignore[misc]
    pass


# Which Azure code a failing field answers with, checked in this order.
_FIELD_CODES: tuple[tuple[str, str, str], ...] = (
    ("series", "InvalidSeries", "The 'series' field must be an array of points with a numeric 'value'."),
    ("granularity", "InvalidGranularity", "The 'granularity' field can only be one of the following: "),
    ("customInterval", "InvalidCustomInterval", "The 'customInterval' field must be an integer > 0."),
    ("period", "InvalidPeriod", "The 'period' field must be an integer >= 0."),
    ("sensitivity", "BadArgument", "The 'sensitivity' field must be an integer between 0 and 99."),
    (
        "maxAnomalyRatio",
        "BadArgument",
        "The 'maxAnomalyRatio' field must be a number with 0 < maxAnomalyRatio <= 0.49.",
    ),
    ("imputeMode", "InvalidImputeMode", "The 'imputeMode' field should be one of the following: "),
    ("imputeFixedValue", "InvalidImputeFixedValue", "The 'imputeFixedValue' field must be a number."),
    ("stableTrendWindow", "BadArgument", "The 'stableTrendWindow' field must be an integer >= 3 and < half of "),
    ("threshold", "BadArgument", "The 'threshold' field must be a number between 0.01 and 0.99."),
)


@dataclass(frozen=True)
class AzureSeries:
    epoch_seconds: Any  # UTC seconds (list or float64 array)
    values: Any  # float64 array
    data_frequency: str | None  # None for granularity none
    period: int | None


def load(schema: Schema, body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise AzureError("InvalidJsonFormat", "Invalid Json Format, the request body must be a JSON object.")
    try:
        return schema.load(body)
    except ValidationError as exc:
        messages = exc.messages if isinstance(exc.messages, dict) else {}
        for field, code, message in _FIELD_CODES:
            if field in messages:
                if field == "series" and "series" not in body:
                    raise AzureError("RequiredSeries", "The 'series' field is required in request.") from exc
                if field == "granularity" and "granularity" not in body:
                    raise AzureError("RequiredGranularity", "The 'granularity' field is required in request.") from exc
                if field == "granularity":
                    message += ", ".join(GRANULARITIES) + "."
                elif field == "imputeMode":
                    message += ", ".join(IMPUTE_MODES) + "."
                elif field == "stableTrendWindow":
                    message += "the series' length."
                raise AzureError(code, message) from exc
        raise AzureError("BadArgument", "Invalid request.") from exc


_TIMESTAMP = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[T ]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:\.([0-9]+))?)?)?"
    r"(Z|z|[+-][0-9]{2}:?[0-9]{2})?"
)


def parse_timestamp(text: str) -> float:
    """UTC seconds of an ISO 8601 timestamp as Azure's clients send it (any fraction length, Z or offset)."""
    match = _TIMESTAMP.fullmatch(text.strip())
    if match is None:
        raise ValueError(text)
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    instant = datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0), int(second or 0), tzinfo=UTC)
    seconds = instant.timestamp() + (float("0." + fraction) if fraction else 0.0)
    if zone and zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        digits = zone[1:].replace(":", "")
        seconds -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return seconds


def check_series(data: Mapping[str, Any], *, max_points: int) -> AzureSeries:
    points = data["series"]
    limit = min(MAX_POINTS, max_points)
    if len(points) < MIN_POINTS:
        raise AzureError("InvalidSeries", f"The 'series' field must have at least {MIN_POINTS} points.")
    if len(points) > limit:
        raise AzureError("InvalidSeries", f"The 'series' field cannot have more than {limit} points.")
    values = _values(points)
    granularity = data.get("granularity") or "none"
    frequency = GRANULARITIES[granularity]
    period = data.get("period")
    if frequency is None:
        # Without a granularity the points are evenly spaced by position and have no calendar seasonality.
        return AzureSeries([float(i) for i in range(len(points))], values, None, 0 if period is None else period)
    stamps = [point.get("timestamp") for point in points]
    try:
        # The common case (one ISO form throughout, increasing) in one vectorised pass.
        return AzureSeries(epoch_seconds(stamps), values, frequency, period)
    except TimestampError:
        pass
    instants: list[float] = []
    for index, text in enumerate(stamps):
        try:
            if not isinstance(text, str):
                raise ValueError
            instant = parse_timestamp(text)
        except (ValueError, OverflowError):
            raise AzureError(
                "InvalidSeries", f"'timestamp' or 'value' is malformed in 'series' Field (index {index})."
            ) from None
        if instants and instant <= instants[-1]:
            if instant == instants[-1]:
                raise AzureError(
                    "InvalidSeries", f"The 'series' field cannot have duplicated timestamp (index {index})."
                )
            raise AzureError(
                "InvalidSeries", f"The 'series' field must be sorted by timestamp in ascending order (index {index})."
            )
        instants.append(instant)
    return AzureSeries(instants, values, frequency, period)


def _values(points: list[Any]) -> np.ndarray:
    """Every point's value as float64, checked in one pass; the per-point walk only names the first defect."""
    import numpy as np
    try:
        raw = [point["value"] for point in points]
        clean = set(map(type, raw)) <= {int, float}  # bool is not a number in JSON
        values = np.asarray(raw, dtype=np.float64) if clean else None
    except (TypeError, KeyError, OverflowError):
        values = None
    if values is not None and bool((np.abs(values) <= MAX_ABS_VALUE).all()):
        return values
    for index, point in enumerate(points):
        value = point.get("value") if isinstance(point, dict) else None
        if type(value) not in (int, float):
            raise AzureError("InvalidSeries", f"'timestamp' or 'value' is malformed in 'series' Field (index {index}).")
        if not math.isfinite(float(value)) or abs(value) > MAX_ABS_VALUE:
            raise AzureError("InvalidSeries", f"The magnitude of 'value' at index {index} in 'series' is too large.")
    raise AssertionError("a defect was found in bulk but not point by point")  # pragma: no cover
