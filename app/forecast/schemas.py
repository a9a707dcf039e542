"""Request and response shapes of POST /forecast and its checks, stage by stage (docs/contract.md, Errors).

Stage 3 (request shape) answers 400 through marshmallow; stage 4 (series data) answers 422.
Both list every problem found in details.errors and the first one in field/issue/provided.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from app import jsonio
from app.errors import DataValidationError, InvalidRequest, sentence
from app.forecast.catalog import DEFAULT_MODEL_ID, MODEL_IDS
from app.forecast.timestamps import FREQUENCIES, TimeAxis, TimestampError, parse_axis, regular_axis

if TYPE_CHECKING:  # numpy loads on the first series, so the admin CLI never pays for it
    import numpy as np

MIN_POINTS = 10
HORIZON_RANGE = (1, 100)
CONFIDENCE_RANGE = (0.1, 0.99)
DEFAULT_CONFIDENCE = 0.95
# Finite but near float max (1e308), sums and spreads inside the models overflow and every model and its
# fallback fail (500). Far above any real measurement (the edge cases tested go to 1e12); such values answer 422.
MAX_ABS_VALUE = 1e300
# The data-preparation guide's advice; shorter series still get a forecast, with a warning header.
RECOMMENDED_POINTS = {
    "Seconds": 100,
    "Minutes": 100,
    "Hours": 100,
    "Daily": 30,
    "Weekly": 30,
    "Monthly": 12,
    "Quarterly": 12,
    "Yearly": 5,
}
FREQUENCY_ISSUE = "Must be one of: " + ", ".join(FREQUENCIES)


class JsonArray(fields.Field):
    """An array taken as it is; its elements are judged later as series data (422), not as shape (400)."""

    default_error_messages = {"invalid": "Must be an array."}  # noqa: RUF012

    def _deserialize(self, value: Any, attr: str | None, data: Mapping[str, Any] | None, **kwargs: Any) -> list[Any]:
        if not isinstance(value, list):
            raise self.make_error("invalid")
        return value


class StrictFloat(fields.Float):
    """A JSON number only: marshmallow's Float would also take "0.9" and true."""

    def _deserialize(self, value: Any, attr: str | None, data: Mapping[str, Any] | None, **kwargs: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.make_error("invalid")
        return super()._deserialize(value, attr, data, **kwargs)


class SeriesSchema(Schema):
    class Meta:
        unknown = "exclude"  # unknown fields are ignored (docs/contract.md)

    timestamps = JsonArray(
        required=True,
        metadata={
            "description": "YYYY-MM-DDTHH:MM:SS, optionally with fractional seconds and Z or ±HH:MM; "
            "strictly increasing, evenly spaced at a whole number of data_frequency units.",
            "items": {"type": "string", "format": "date-time", "example": "2026-01-01T00:00:00"},
            "minItems": MIN_POINTS,
        },
    )
    values = JsonArray(
        required=True,
        metadata={
            "description": "Finite numbers, one per timestamp; no nulls.",
            "items": {"type": "number"},
            "minItems": MIN_POINTS,
        },
    )


class ForecastRequestSchema(Schema):
    class Meta:
        unknown = "exclude"  # unknown fields are ignored (docs/contract.md)

    series = fields.List(
        fields.Nested(SeriesSchema),
        required=True,
        validate=validate.Length(equal=1, error="Must contain exactly one series."),
    )
    forecast_horizon = fields.Integer(
        required=True, strict=True, validate=validate.Range(*HORIZON_RANGE, error="Must be between {min} and {max}")
    )
    data_frequency = fields.String(required=True, validate=validate.OneOf(FREQUENCIES, error=FREQUENCY_ISSUE))
    forecast_frequency = fields.String(required=True, validate=validate.OneOf(FREQUENCIES, error=FREQUENCY_ISSUE))
    confidence = StrictFloat(
        load_default=DEFAULT_CONFIDENCE,
        allow_nan=False,
        validate=validate.Range(*CONFIDENCE_RANGE, error="Must be between {min} and {max}"),
    )

    @validates_schema
    def _frequencies_match(self, data: dict[str, Any], **kwargs: Any) -> None:
        data_frequency, forecast_frequency = data.get("data_frequency"), data.get("forecast_frequency")
        if data_frequency and forecast_frequency and data_frequency != forecast_frequency:
            raise ValidationError("Must equal data_frequency", field_name="forecast_frequency")


class ForecastResponseSchema(Schema):
    forecast_timestamps = fields.List(fields.String(), required=True)
    lower_bound = fields.List(fields.Float(), required=True)
    median = fields.List(fields.Float(), required=True)
    upper_bound = fields.List(fields.Float(), required=True)


class ErrorBodySchema(Schema):
    code = fields.String(
        required=True,
        validate=validate.OneOf(
            ["UNAUTHORIZED", "INVALID_REQUEST", "DATA_VALIDATION_ERROR", "RATE_LIMIT_EXCEEDED", "INTERNAL_ERROR"]
        ),
    )
    message = fields.String(required=True)
    details = fields.Dict()


class ErrorSchema(Schema):
    error = fields.Nested(ErrorBodySchema, required=True)


_request_schema = ForecastRequestSchema()


def excerpt(value: Any) -> Any:
    """A short stand-in for a submitted value (never more than an excerpt)."""
    if isinstance(value, list):
        return f"array of {len(value)} items"
    if isinstance(value, dict):
        return f"object with {len(value)} keys"
    if isinstance(value, str):
        return value if len(value) <= 64 else value[:61] + "..."
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def problem(field: str, issue: str, provided: Any, **extra: Any) -> dict[str, Any]:
    return {"field": field, "issue": issue, "provided": excerpt(provided), **extra}


def _envelope(problems: list[dict[str, Any]]) -> dict[str, Any]:
    details = dict(problems[0])
    if len(problems) > 1:
        details["errors"] = problems
    return details


def _reject_constant(name: str) -> float:
    # NaN / Infinity are not JSON; we still parse them so the error can point at the element (a 422).
    return float(name.replace("Infinity", "inf"))


def parse_json_body(raw: bytes) -> Any:
    try:
        return jsonio.loads_with_constants(raw, parse_constant=_reject_constant)
    except RecursionError as exc:
        raise InvalidRequest(
            "The request body is nested too deeply.", details=problem("body", "nested too deeply", "")
        ) from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidRequest(
            "The request body is not valid JSON.",
            details=problem("body", f"invalid JSON: {str(exc)[:120]}", ""),
        ) from exc


def _flatten(messages: Any, path: str, data: Any, out: list[dict[str, Any]]) -> None:
    if isinstance(messages, list) and all(isinstance(m, str) for m in messages):
        issue = "; ".join(messages)
        if issue == "Missing data for required field.":
            issue = "Required field is missing"
        out.append(problem(path or "body", issue, data if data is not _MISSING else None))
        return
    if isinstance(messages, dict):
        for key, nested in messages.items():
            if key == "_schema":
                _flatten(nested, path or "body", data, out)
                continue
            child_path = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))
            child = _MISSING
            if isinstance(data, dict):
                child = data.get(key, _MISSING)
            elif isinstance(data, list) and isinstance(key, int) and key < len(data):
                child = data[key]
            _flatten(nested, child_path, child, out)


_MISSING = object()


@dataclass(frozen=True)
class ForecastRequest:
    forecast_horizon: int
    data_frequency: str
    confidence: float
    model_id: str


@dataclass(frozen=True)
class SubmittedSeries:
    """The series as the body holds it, before the series-data stage has judged it."""

    timestamps: list[Any]
    values: list[Any]


def load_object(schema: Schema, body: Any, problems: list[dict[str, Any]]) -> dict[str, Any]:
    """``body`` loaded by ``schema``, or 400 listing every problem: the body's own first, then ``problems``
    already found (in headers). Every JSON endpoint's request-shape stage goes through here."""
    if not isinstance(body, dict):
        problems.insert(0, problem("body", "Must be a JSON object", body))
        raise InvalidRequest("The request body must be a JSON object.", details=_envelope(problems))
    try:
        data = schema.load(body)
    except ValidationError as exc:
        schema_problems: list[dict[str, Any]] = []
        _flatten(exc.messages, "", body, schema_problems)
        problems[:0] = schema_problems
        data = None
    if problems or data is None:
        first = problems[0]
        raise InvalidRequest(sentence(f"Invalid request: {first['field']}: {first['issue']}"),
                             details=_envelope(problems))
    return data


def load_request(body: Any, headers: Mapping[str, str]) -> tuple[ForecastRequest, SubmittedSeries]:
    """The request-shape stage: everything about the request's shape, answered 400 with every problem listed."""
    problems: list[dict[str, Any]] = []
    model_id = model_id_from_headers(headers, problems)
    data = load_object(_request_schema, body, problems)
    series = data["series"][0]
    return ForecastRequest(
        forecast_horizon=data["forecast_horizon"],
        data_frequency=data["data_frequency"],
        confidence=data["confidence"],
        model_id=model_id,
    ), SubmittedSeries(timestamps=series["timestamps"], values=series["values"])


def model_id_from_headers(headers: Mapping[str, str], problems: list[dict[str, Any]]) -> str:
    """X-Model-Id, else its alias X-Model-Selector, else the default; both and different is an error."""
    primary, alias = headers.get("X-Model-Id"), headers.get("X-Model-Selector")
    if primary is not None and alias is not None and primary.strip() != alias.strip():
        problems.append(problem("X-Model-Selector", "Must equal X-Model-Id when both are sent", alias))
    chosen = primary if primary is not None else alias
    if chosen is None:
        return DEFAULT_MODEL_ID
    chosen = chosen.strip()
    if chosen not in MODEL_IDS:
        header = "X-Model-Id" if primary is not None else "X-Model-Selector"
        problems.append(problem(header, "Must be one of: " + ", ".join(MODEL_IDS), chosen))
    return chosen


@dataclass(frozen=True)
class SeriesData:
    axis: TimeAxis
    # float64, sent to the worker pool as one buffer
    values: np.ndarray


def check_series(submitted: SubmittedSeries, frequency: str, *, max_points: int) -> SeriesData:
    """The series-data stage: the series data itself, answered 422 with every defect found."""
    timestamps, values = submitted.timestamps, submitted.values
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
    shortest = min(len(timestamps), len(values))
    if shortest < MIN_POINTS:
        problems.append(
            problem("series[0]", "insufficient data points", f"{shortest} points", minimum=MIN_POINTS)
        )
    longest = max(len(timestamps), len(values))
    if longest > max_points:
        problems.append(problem("series[0]", "too many data points", f"{longest} points", maximum=max_points))
        raise DataValidationError(sentence(f"Invalid series data: {problems[0]['issue']}"), details=_envelope(problems))

    floats = _values_array(values, problems)
    # The whole series in one pass when it is regular; item by item only to find and name a defect.
    axis = regular_axis(timestamps, frequency)
    if axis is None:
        axis = _axis_item_by_item(timestamps, frequency, problems)
    if problems or axis is None:
        first = problems[0]
        raise DataValidationError(sentence(f"Invalid series data: {first['issue']}"), details=_envelope(problems))
    return SeriesData(axis=axis, values=floats)


def _axis_item_by_item(timestamps: list[Any], frequency: str, problems: list[dict[str, Any]]) -> TimeAxis | None:
    bad_type = _first_non_string(timestamps)
    if bad_type is not None:
        problems.append(
            problem("series[0].timestamps", "invalid timestamp format", timestamps[bad_type], index=bad_type)
        )
    elif len(timestamps) >= 2:
        try:
            return parse_axis(timestamps, frequency)
        except TimestampError as exc:
            extra: dict[str, Any] = {"index": exc.index}
            if exc.expected is not None:
                extra["expected"] = exc.expected
            problems.append(problem("series[0].timestamps", exc.issue, exc.provided, **extra))
    return None


def _first_non_string(items: list[Any]) -> int | None:
    try:
        "".join(items)  # one C pass that refuses any element that is not a string
    except TypeError:
        return next(i for i, item in enumerate(items) if not isinstance(item, str))
    return None


def _values_array(values: list[Any], problems: list[dict[str, Any]]) -> np.ndarray:
    """The values as float64 when all are fine, checked in one pass; else _check_values names the first defect."""
    import numpy as np
    if set(map(type, values)) <= {float, int}:  # bool is excluded: type(True) is bool
        try:
            array = np.array(values, dtype=np.float64)
        except OverflowError:  # an integer past the float range: reported as not finite below
            array = None
        if array is not None and (array.size == 0 or all_in_range(array)):
            return array
    return np.array(_check_values(values, problems), dtype=np.float64)


def all_in_range(array: np.ndarray) -> bool:
    """Every value finite and at most MAX_ABS_VALUE in magnitude (a non-empty float64 array)."""
    # max and min carry a NaN through and NaN compares False, so these also refuse NaN and the infinities.
    return bool(array.max() <= MAX_ABS_VALUE and array.min() >= -MAX_ABS_VALUE)


def _check_values(values: list[Any], problems: list[dict[str, Any]]) -> list[float]:
    floats: list[float] = []
    for index, value in enumerate(values):
        # bool is an int subclass in Python but true/false are not numbers in JSON.
        if type(value) not in (int, float):
            issue = "missing value (null)" if value is None else "value must be a number"
            problems.append(problem("series[0].values", issue, value, index=index))
            return floats
        try:
            number = float(value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            problems.append(problem("series[0].values", "value must be a finite number", str(value)[:64], index=index))
            return floats
        if abs(number) > MAX_ABS_VALUE:
            problems.append(
                problem(
                    "series[0].values",
                    f"value out of range: magnitude must be at most {MAX_ABS_VALUE:g}",
                    value,
                    index=index,
                    maximum=MAX_ABS_VALUE,
                )
            )
            return floats
        floats.append(number)
    return floats
